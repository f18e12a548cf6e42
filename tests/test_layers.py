"""The package's architecture, checked: layers import only downward and no modules form a cycle.

cli/ and api.py (the faces) -> flows/ (use cases) -> sinks/ (where results go) -> tasks/
(what each task does with a model's outputs) and execution/ (where and how inferences run) ->
hw/ (the hardware boundary) -> core/ (pure) -> errors.py; tasks/ and execution/ never import
each other. Imports inside functions count too (a lazy import is still a dependency), and so do
imports by name: importlib.import_module, __import__, a module's name or Python code in a string.
"""

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "edgeapp"
RANK = {"cli": 6, "api": 6, "flows": 5, "sinks": 4, "tasks": 3, "execution": 3, "hw": 2, "core": 1,
        "errors": 0}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def edgeapp_imports(path: Path, by_name: bool = True) -> set:
    """Every edgeapp module this file imports, at module level or inside functions, by an import
    statement or (by_name) by name: importlib.import_module, __import__, a module's name or
    Python code in a string (a child process's program)."""
    return imports_of(path.read_text(), module_name(path), str(path), by_name)


def imports_of(source: str, module: str, where: str = "<source>", by_name: bool = True) -> set:
    tree = ast.parse(source, where)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("edgeapp"))
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{where}: relative import (use absolute edgeapp.<layer>...)"
            if node.module and node.module.startswith("edgeapp"):
                found |= _from_import(node.module, [a.name for a in node.names])
        elif by_name and isinstance(node, ast.Call) and _imports_by_name(node) and node.args:
            found |= _named_modules(node.args[0], module)
    for text in _strings(tree) if by_name else ():
        found |= _string_imports(text)
    return found


def _from_import(package: str, names: list) -> set:
    """`from edgeapp.core import stats` imports edgeapp.core.stats; `from edgeapp.core.stats
    import median` imports edgeapp.core.stats."""
    return {f"{package}.{name}" if _exists(f"{package}.{name}") else package for name in names}


def _imports_by_name(call: ast.Call) -> bool:
    """importlib.import_module(...), import_module(...) or __import__(...)."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name in ("import_module", "__import__")


def _named_modules(arg: ast.AST, module: str) -> set:
    """The edgeapp modules an import_module argument may name: a literal name, or every module
    under an f-string's fixed start (`f"edgeapp.tasks.{name}"`, `f"{__name__}.{name}"`). A
    variable is followed through the module names written as strings in the file (_strings)."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value} if arg.value.startswith("edgeapp") and _exists(arg.value) else set()
    if not isinstance(arg, ast.JoinedStr):
        return set()
    start = ""
    for part in arg.values:
        if isinstance(part, ast.Constant):
            start += str(part.value)
        elif isinstance(part, ast.FormattedValue) and getattr(part.value, "id", None) == "__name__":
            start += module
        elif isinstance(part, ast.FormattedValue) and getattr(part.value, "id", None) == "__package__":
            start += module if PKG.joinpath(*module.split(".")[1:], "__init__.py").exists() \
                else module.rsplit(".", 1)[0]
        else:
            break
    if not start.startswith("edgeapp"):
        return set()
    return {m for m in _all_modules() if m.startswith(start)}


MODULE_NAME = re.compile(r"edgeapp(?:\.\w+)+")
CODE_IMPORT = re.compile(r"(?:^|[;\n]|\s)(?:from\s+(edgeapp(?:\.\w+)*)\s+import\s+([\w, ]+)"
                         r"|import\s+(edgeapp(?:\.\w+)+))")


def _strings(tree: ast.AST) -> list:
    """The file's string literals but its docstrings (which name modules in prose)."""
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def _string_imports(text: str) -> set:
    """A module's whole name as a string ("edgeapp.tasks.classify", for import_module later) or
    Python code importing one (a child process's `-c` program)."""
    found = set()
    if MODULE_NAME.fullmatch(text) and _exists(text):
        found.add(text)
    for package, names, plain in CODE_IMPORT.findall(text):
        if plain:
            found.add(plain)
        elif package:
            found |= _from_import(package, [n.strip() for n in names.split(",") if n.strip()])
    return found


def _all_modules() -> list:
    return [module_name(p) for p in PKG.rglob("*.py")]


def _exists(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PKG.parent / rel).with_suffix(".py").exists() or (PKG.parent / rel / "__init__.py").exists()


def layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "edgeapp"


def graph(by_name: bool = True) -> dict:
    return {module_name(p): edgeapp_imports(p, by_name) for p in PKG.rglob("*.py")}


def test_every_module_sits_in_a_layer():
    loose = [m for m in graph() if layer(m) not in RANK and m not in ("edgeapp", "edgeapp.__main__")]
    assert not loose, f"modules outside the layers' folders: {loose}"


def test_imports_only_go_down():
    upward = []
    for mod, deps in graph().items():
        if layer(mod) not in RANK:
            continue
        for dep in deps:
            if dep == "edgeapp":  # `from edgeapp import __version__`: the root imports nothing eagerly
                continue
            if RANK.get(layer(dep), 99) > RANK[layer(mod)]:
                upward.append(f"{mod} -> {dep}")
    assert not upward, "upward imports:\n" + "\n".join(sorted(upward))



def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_float_sources_are_shared_not_borrowed_from_convert():
    """convert and eval both read float models through flows/sources/: no flow outside the convert
    package imports it (an eval of a .tflite never loads convert), and flows/sources/ imports
    neither convert nor any other flow."""
    convert, sources = "edgeapp.flows.convert", "edgeapp.flows.sources"
    wrong = sorted(f"{mod} -> {dep}" for mod, deps in graph().items()
                   if within(mod, "edgeapp.flows") and not within(mod, convert)
                   for dep in deps if within(dep, convert)
                   or within(mod, sources) and within(dep, "edgeapp.flows") and not within(dep, sources))
    assert not wrong, "imports across flows/sources/ and flows/convert/:\n" + "\n".join(wrong)

# Layers of one rank that never import each other: what a task does with a model's outputs and
# where inferences run are joined only by flows/ (CONTRIBUTING.md, "Where things are").
APART = [("tasks", "execution")]


@pytest.mark.parametrize("one, other", APART)
def test_side_by_side_layers_do_not_import_each_other(one, other):
    crossing = [f"{mod} -> {dep}" for mod, deps in graph().items() for dep in deps
                if {layer(mod), layer(dep)} == {one, other}]
    assert not crossing, f"{one} and {other} import each other:\n" + "\n".join(sorted(crossing))


@pytest.mark.parametrize("source, expected", [
    ('import importlib\nimportlib.import_module("edgeapp.flows.batch")', {"edgeapp.flows.batch"}),
    ('from importlib import import_module\ndef f(n):\n    return import_module(f"edgeapp.tasks.{n}")',
     {"edgeapp.tasks.classify", "edgeapp.tasks.detect"}),
    ('import importlib\ndef f(n):\n    return importlib.import_module(f"{__name__}.{n}")',
     {"edgeapp.tasks.classify", "edgeapp.tasks.detect"}),
    ('import importlib\nWHERE = {"x": "edgeapp.sinks.mqtt"}\nimportlib.import_module(WHERE["x"])',
     {"edgeapp.sinks.mqtt"}),
    ('CODE = "import sys; from edgeapp.hw.probe_child import main; main()"', {"edgeapp.hw.probe_child"}),
    ('"""Unlike edgeapp.flows.batch, prose in a docstring imports nothing."""', set()),
])
def test_imports_by_name_are_followed(source, expected):
    """The layer checks see modules imported by name, not only by import statements."""
    module = "edgeapp.tasks" if "__name__" in source else "edgeapp.core.example"
    assert expected <= imports_of(source, module)
    if not expected:
        assert imports_of(source, module) == set()


def test_no_import_cycles():
    """Over import statements: a registry importing its plug-ins by name (tasks/__init__.py) that
    a plug-in asks back at call time, or a module starting another as a child process's program
    (hw/child.py), is no cycle the loader can trip on."""
    full = graph(by_name=False)
    g = {m: {d for d in deps if d in full} for m, deps in full.items()}
    cycles, state, stack = [], {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(g[m]):
            if state.get(d) == "open":
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"

    for m in sorted(g):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def core_room(name: str) -> str:
    """The room of a core module: its topic package (core/vision/, core/quant/, ...), or "flat"
    for the shared facts directly in core/ (naming, limits, labels, meta, units, ...)."""
    parts = name.split(".")
    if len(parts) > 3 or (len(parts) == 3 and (PKG / "core" / parts[2]).is_dir()):
        return parts[2]
    return "flat"


def test_core_rooms_import_down_and_never_in_a_circle():
    """core/ is split by topic: the flat modules are the base every room may read, so they
    import no room; the rooms' imports of each other form no circle."""
    full = graph(by_name=False)
    rooms = {}
    for mod, deps in full.items():
        if layer(mod) != "core":
            continue
        for dep in deps:
            if layer(dep) == "core" and dep != "edgeapp.core" and core_room(dep) != core_room(mod):
                rooms.setdefault(core_room(mod), set()).add(core_room(dep))
    assert not rooms.get("flat", set()) - {"flat"}, f"flat core modules import rooms: {rooms['flat']}"

    def reaches(start, goal, seen=()):
        return any(r == goal or (r not in seen and reaches(r, goal, seen + (r,))) for r in rooms.get(start, ()))

    circles = sorted(r for r in rooms if reaches(r, r))
    assert not circles, f"core rooms in a circle: {circles} ({rooms})"


@pytest.mark.parametrize("forbidden", ["ctypes"])
def test_only_hw_loads_native_libraries(forbidden):
    users = [module_name(p) for p in PKG.rglob("*.py")
             if layer(module_name(p)) != "hw" and f"import {forbidden}" in p.read_text()]
    assert not users, f"{forbidden} outside edgeapp/hw/: {users}"


def test_the_module_map_in_contributing_names_every_module():
    """CONTRIBUTING's table is how a newcomer finds the file for a feature: it must not fall
    behind the tree (a module it does not name) nor name one that is gone."""
    import re

    text = (PKG.parent / "CONTRIBUTING.md").read_text()
    named = set(re.findall(r"`((?:cli|flows|sinks|tasks|execution|hw|core)/[\w/]+\.py|[\w]+\.py)`", text))
    modules = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if p.name != "__init__.py"}
    if "`cli/<command>.py`" in text:  # one row stands for the command modules
        import typer

        from edgeapp.cli.app import app

        commands = typer.main.get_command(app).commands
        named |= {f"cli/{c.replace('-', '_')}.py" for c in commands}
    assert not modules - named, f"modules missing from CONTRIBUTING.md's map: {sorted(modules - named)}"
    gone = {n for n in named if "/" in n and n not in modules and not n.endswith("__init__.py")}
    assert not gone, f"CONTRIBUTING.md names modules that do not exist: {sorted(gone)}"


def test_libedgetpu_is_opened_in_one_place():
    """One loader (hw/libedgetpu.py) for the Edge TPU library: its load errors, its file and its
    build label are then explained the same way everywhere."""
    # Pillow's libtiff, already loaded (RTLD_NOLOAD), to quiet it; libc's prctl (a worker ends
    # with its parent)
    others = {"hw/native_stderr.py", "hw/worker/main.py"}
    loaders = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
               if p.name != "libedgetpu.py" and ("CDLL(" in p.read_text() or "LoadLibrary" in p.read_text())]
    assert not set(loaders) - others, f"native libraries opened outside hw/libedgetpu.py: {loaders}"
    assert "edgetpu" not in (PKG / "hw" / "native_stderr.py").read_text().lower()
