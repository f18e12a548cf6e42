#!/usr/bin/env python3
"""How well edgeapp's seams are typed and its rooms found: the counts of issue 45, rerunnable.

    python scripts/structure_counts.py [--json] [--list] [--no-trace]

Counted with `ast` over edgeapp/ (no import of edgeapp, so any layout counts the same way):
  any_params         parameters whose annotation mentions `Any` (a string annotation is parsed)
  dict_returns       functions whose return annotation is a bare `dict`/`Dict` or `dict[...]`/`Dict[...]`
  yolo_branches      `X.yolo` read (what a branch on YOLO reads: `if p.yolo is not None`, or its
                     fields inside such a branch) in convert's orchestrator modules: the files of
                     flows/convert/ that are not a source or YOLO module (SOURCE_MODULES, or "yolo"
                     in the file's name)
  task_literals      string literals equal to a task name (classify, detect, pose, segment, embed)
                     outside tasks/, where a task is meant. Not counted, explicitly:
                       - docstrings;
                       - dict keys and subscripts: a record's field name, not a task (a pipeline
                         record's "segment" number);
                       - inside an f-string: a column heading written out;
                       - Ultralytics' metadata vocabulary: a literal in a statement that reads an
                         `ultralytics...` name or attribute (its metadata's `task: detect`);
                       - NOT_TASKS: a word that is a task's name but means something else there
  convert_importers  modules of flows/ outside flows/convert/ that import edgeapp.flows.convert
  duplicate_names    public top-level functions and classes (not starting with `_`; `__init__.py`
                     not counted) defined in more than one module, listed
  duplicate_assigned public top-level assigned names (constants, Typer option aliases, each
                     command's `app`, each task's `KIND`) in more than one module: reported, no target
  zone_parsers       modules that parse counting lines or zones: those calling a `parse_line`,
                     `parse_lines`, `parse_zone` or `parse_zones` (the module defining them aside)
  core_modules       modules directly in edgeapp/core/ (*.py but __init__.py; subpackages count 0)
  classify trace     files, edges, upward calls of scripts/trace_classify.py (runs classify on the
                     bundled model, a few seconds; --no-trace skips it)

Baselines (this script, main at 30347b0):
  any_params 251, dict_returns 136, yolo_branches 19 (flows/convert/job.py: 17 `p.yolo`, 2
  `prepared.yolo`; the issue's 18 counted `p.yolo` tests), task_literals 6 (flows/convert/job.py
  twice, flows/retrain.py, cli/retrain.py twice, core's EMBED_TASK (the embedding module); the issue's 3 left
  "embed" out), convert_importers 1 (flows/evaluate.py), duplicate_names 28 (duplicate_assigned
  24), zone_parsers 2 (api.py, cli/camera.py: parse_line, parse_zone), core_modules 45,
  classify trace 30 files, 48 edges, 0 upward.
Targets (issue 45): any_params <= 60, dict_returns <= 50, yolo_branches 0, task_literals 0,
  convert_importers 0, duplicate_names <= 5, zone_parsers 1, core_modules <= 15; the trace unchanged.
"""

import argparse
import ast
import collections
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "edgeapp"
TASKS = {"classify", "detect", "pose", "segment", "embed"}
# flows/convert modules that are a model format's source or YOLO's own (not orchestrators)
SOURCE_MODULES = {"base", "keras", "onnx", "onnx_graph", "float_engine", "source_format",
                  "attention", "detection"}
NOT_TASKS = {("core/registry.py", "segment"): "a pipeline segment file's role in the registry",
             ("cli/models.py", "segment"): "the registry's pipeline segment files, listed"}
ZONE_PARSERS = {"parse_line", "parse_lines", "parse_zone", "parse_zones"}


def modules() -> list:
    """(path relative to edgeapp/, ast tree) of every module."""
    return [(p.relative_to(PKG).as_posix(), ast.parse(p.read_text(), str(p)))
            for p in sorted(PKG.rglob("*.py"))]


def functions(tree: ast.AST) -> list:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _mentions(node: ast.AST, name: str) -> bool:
    """Whether an annotation names `name` (as X or typing.X, in a string annotation too)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id == name or isinstance(n, ast.Attribute) and n.attr == name:
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            try:
                if _mentions(ast.parse(n.value, mode="eval"), name):
                    return True
            except SyntaxError:
                pass
    return False


def any_params(trees: list) -> list:
    found = []
    for rel, tree in trees:
        for f in functions(tree):
            a = f.args
            every = getattr(a, "posonlyargs", []) + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]
            found += [f"{rel}:{f.lineno} {f.name}({x.arg})" for x in every
                      if x.annotation is not None and _mentions(x.annotation, "Any")]
    return found


def _bare_dict(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _bare_dict(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return False
    if isinstance(node, ast.Subscript):
        node = node.value
    return (isinstance(node, ast.Name) and node.id in ("dict", "Dict")
            or isinstance(node, ast.Attribute) and node.attr == "Dict")


def dict_returns(trees: list) -> list:
    return [f"{rel}:{f.lineno} {f.name}" for rel, tree in trees for f in functions(tree)
            if f.returns is not None and _bare_dict(f.returns)]


def _parents(tree: ast.AST) -> dict:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def yolo_branches(trees: list) -> list:
    found = []
    for rel, tree in trees:
        parts = rel.split("/")
        if parts[:2] != ["flows", "convert"] or len(parts) != 3:
            continue
        stem = parts[2][:-3]
        if "yolo" in stem or stem in SOURCE_MODULES:
            continue
        found += [f"{rel}:{n.lineno}" for n in ast.walk(tree)
                  if isinstance(n, ast.Attribute) and n.attr == "yolo" and isinstance(n.ctx, ast.Load)]
    return sorted(found, key=lambda s: (s.split(":")[0], int(s.split(":")[1])))


def _docstrings(tree: ast.AST) -> set:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _statement(node: ast.AST, parents: dict) -> ast.AST:
    while node in parents and not isinstance(node, ast.stmt):
        node = parents[node]
    return node


def _reads_ultralytics(node: ast.AST) -> bool:
    part = node.test if isinstance(node, (ast.If, ast.While)) else node
    return any(isinstance(n, ast.Name) and "ultralytics" in n.id.lower()
               or isinstance(n, ast.Attribute) and "ultralytics" in n.attr.lower() for n in ast.walk(part))


def task_literals(trees: list) -> list:
    found = []
    for rel, tree in trees:
        if rel.startswith("tasks/"):
            continue
        parents, docs = _parents(tree), _docstrings(tree)
        for n in ast.walk(tree):
            if not (isinstance(n, ast.Constant) and n.value in TASKS) or id(n) in docs:
                continue
            up = parents.get(n)
            if isinstance(up, ast.Dict) and any(k is n for k in up.keys) or (
                    isinstance(up, ast.Subscript) and n is up.slice) or (
                    isinstance(up, ast.Index) and isinstance(parents.get(up), ast.Subscript)):
                continue  # a field name
            if isinstance(up, ast.FormattedValue) or isinstance(parents.get(up), ast.FormattedValue):
                continue
            if (rel, n.value) in NOT_TASKS or _reads_ultralytics(_statement(n, parents)):
                continue
            found.append(f"{rel}:{n.lineno} {n.value!r}")
    return found


def _imported(rel: str, tree: ast.AST) -> set:
    """Dotted modules a module imports (relative imports resolved), anywhere in it."""
    package = ["edgeapp"] + rel[:-3].split("/")[:-1]
    if rel.endswith("__init__.py"):
        package = ["edgeapp"] + rel.split("/")[:-1]
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                base = ".".join(package[:len(package) - n.level + 1] + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in n.names}
    return out


def convert_importers(trees: list) -> list:
    return [rel for rel, tree in trees if rel.startswith("flows/") and not rel.startswith("flows/convert/")
            and any(m == "edgeapp.flows.convert" or m.startswith("edgeapp.flows.convert.")
                    for m in _imported(rel, tree))]


def _top_level_names(tree: ast.Module) -> set:
    names = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                names |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
    return {x for x in names if not x.startswith("_")}


def _defined(trees: list, pick) -> dict:
    where = collections.defaultdict(list)
    for rel, tree in trees:
        if not rel.endswith("__init__.py"):
            for name in pick(tree):
                where[name].append(rel)
    return {k: v for k, v in sorted(where.items()) if len(v) > 1}


def duplicate_names(trees: list) -> dict:
    """Public functions and classes defined at the top of more than one module."""
    return _defined(trees, lambda tree: {n.name for n in tree.body if isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not n.name.startswith("_")})


def duplicate_assigned(trees: list) -> dict:
    """Public names assigned at the top of more than one module (constants, aliases, `app`, `KIND`)."""
    return {k: v for k, v in _defined(trees, _top_level_names).items() if k not in duplicate_names(trees)}


def zone_parsers(trees: list) -> dict:
    """{module: [parser functions it calls]} for modules parsing lines or zones."""
    defined = {rel for rel, tree in trees for n in tree.body
               if isinstance(n, ast.FunctionDef) and n.name in ZONE_PARSERS}
    out = {}
    for rel, tree in trees:
        if rel in defined:
            continue
        called = sorted({(f.id if isinstance(f, ast.Name) else f.attr) for c in ast.walk(tree)
                         if isinstance(c, ast.Call) for f in [c.func]
                         if isinstance(f, ast.Name) and f.id in ZONE_PARSERS
                         or isinstance(f, ast.Attribute) and f.attr in ZONE_PARSERS})
        if called:
            out[rel] = called
    return out


def core_modules() -> list:
    return sorted(p.name for p in (PKG / "core").glob("*.py") if p.name != "__init__.py")


def classify_trace() -> dict:
    """files, edges, upward of scripts/trace_classify.py (None each if it fails)."""
    try:
        out = subprocess.run([sys.executable, str(ROOT / "scripts/trace_classify.py")], cwd=str(ROOT),
                             capture_output=True, text=True, timeout=300).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    found = dict(re.findall(r"^(files|edges|upward): (\d+)", out, re.M))
    return {k: int(found[k]) if k in found else None for k in ("files", "edges", "upward")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object (with the lists)")
    parser.add_argument("--list", action="store_true", help="print where each count comes from")
    parser.add_argument("--no-trace", action="store_true", help="skip running classify's trace")
    options = parser.parse_args()
    trees = modules()
    lists = {"any_params": any_params(trees), "dict_returns": dict_returns(trees),
             "yolo_branches": yolo_branches(trees), "task_literals": task_literals(trees),
             "convert_importers": convert_importers(trees), "duplicate_names": duplicate_names(trees),
             "duplicate_assigned": duplicate_assigned(trees),
             "zone_parsers": zone_parsers(trees), "core_modules": core_modules()}
    counts = {k: len(v) for k, v in lists.items()}
    if not options.no_trace:
        counts.update({f"trace_{k}": v for k, v in classify_trace().items()})
    if options.json:
        print(json.dumps({"counts": counts, "lists": lists}, indent=1))
        return
    for key, value in counts.items():
        print(f"{key}: {value}")
        if key == "duplicate_names" or options.list and key == "duplicate_assigned":
            for name, where in lists[key].items():
                print(f"  {name}: {', '.join(where)}")
        elif key == "zone_parsers":
            for rel, called in lists[key].items():
                print(f"  {rel}: {', '.join(called)}")
        elif options.list and key in lists:
            for item in lists[key]:
                print(f"  {item}")


if __name__ == "__main__":
    main()
