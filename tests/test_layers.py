"""The package's architecture, checked: layers import only downward and no modules form a cycle.

cli/ and api.py (the faces) -> flows/ (use cases) -> sinks/ (where results go) -> tasks/
(what each task does with a model's outputs) and execution/ (where and how inferences run) ->
hw/ (the hardware boundary) -> core/ (pure) -> errors.py. Imports inside functions count too:
a lazy import is still a dependency.
"""

import ast
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


def edgeapp_imports(path: Path) -> set:
    """Every edgeapp module this file imports, at module level or inside functions."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("edgeapp"))
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (use absolute edgeapp.<layer>...)"
            if node.module and node.module.startswith("edgeapp"):
                for a in node.names:  # `from edgeapp.core import stats` imports edgeapp.core.stats
                    sub = f"{node.module}.{a.name}"
                    found.add(sub if _exists(sub) else node.module)
    return found


def _exists(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PKG.parent / rel).with_suffix(".py").exists() or (PKG.parent / rel / "__init__.py").exists()


def layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "edgeapp"


def graph() -> dict:
    return {module_name(p): edgeapp_imports(p) for p in PKG.rglob("*.py")}


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


def test_no_import_cycles():
    full = graph()
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
    others = {"hw/native_stderr.py"}  # Pillow's libtiff, already loaded (RTLD_NOLOAD), to quiet it
    loaders = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
               if p.name != "libedgetpu.py" and ("CDLL(" in p.read_text() or "LoadLibrary" in p.read_text())]
    assert not set(loaders) - others, f"native libraries opened outside hw/libedgetpu.py: {loaders}"
    assert "edgetpu" not in (PKG / "hw" / "native_stderr.py").read_text().lower()
