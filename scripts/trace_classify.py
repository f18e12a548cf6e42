#!/usr/bin/env python3
"""How far one `edgeapp classify` travels through edgeapp's files: a readability measure.

    python scripts/trace_classify.py [--list] [-- classify ARGS...]

Runs `edgeapp classify models/digits_int8.tflite models/samples` (or the given arguments) in
this process under a profile hook on every thread, and prints
  files        edgeapp files whose functions ran
  calls        function calls counted per file (--list prints them)
  edges        distinct caller file -> callee file pairs between edgeapp files (the caller is the
               nearest edgeapp frame up the stack, so a call through Typer, threading or a
               library's callback counts from the edgeapp code that started it)
Module and class bodies (imports) are excluded, and so are the calls they make: a call whose
nearest edgeapp frame is a module or class body is import-time work, not the command's.
  upward       edges from a lower layer into a higher one, by tests/test_layers.py's order
               (cli, api > flows > sinks > tasks, execution > hw > core > errors): a callback
               that reaches back up (a notice function, a resolver handed down)
The command's own stdout (its results) is dropped, so stdout holds only these numbers.
Two static counts of the same readability follow:
  params>10    functions (self and cls not counted) with more than 10 parameters, outside cli/
               and api.py, and in all
  by-name      option values read by name in cli/ (ctx.params, params.get(...), params[...],
               and the same through `p = ctx.params`: p.get(...), p["..."])
"""

import argparse
import ast
import collections
import contextlib
import inspect
import io
import re
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "edgeapp"
RANK = {"cli": 6, "api": 6, "__main__": 6, "__init__": 6, "flows": 5, "sinks": 4, "tasks": 3,
        "execution": 3, "hw": 2, "core": 1, "errors": 0}


def layer(relative: str) -> str:
    first = relative.split("/")[0]
    return first[:-3] if first.endswith(".py") else first


def trace(argv: list) -> tuple:
    """(calls per file, {(caller file, callee file)}) of running `edgeapp argv` here."""
    sys.path.insert(0, str(ROOT))
    from edgeapp.cli.app import app

    prefix = str(PKG) + "/"
    calls: collections.Counter = collections.Counter()
    edges: set = set()
    lock = threading.Lock()

    def ours(code) -> str:
        name = code.co_filename
        return name[len(prefix):] if name.startswith(prefix) else ""

    def function(code) -> bool:
        return bool(code.co_flags & inspect.CO_OPTIMIZED)  # not a module or class body

    def hook(frame, event, arg):
        if event != "call" or not function(frame.f_code):
            return
        callee = ours(frame.f_code)
        if not callee:
            return
        up = frame.f_back
        while up is not None and not ours(up.f_code):
            up = up.f_back
        if up is not None and not function(up.f_code):
            return  # called by a module or class body: an import
        caller = ours(up.f_code) if up is not None else ""
        with lock:
            calls[callee] += 1
            if caller and caller != callee:
                edges.add((caller, callee))

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            app(argv, standalone_mode=False)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return calls, edges


def many_parameters() -> list:
    """(file, function, parameters) of every function with more than 10."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in getattr(a, "posonlyargs", []) + a.args + a.kwonlyargs]
                n = len(names) + bool(a.vararg) + bool(a.kwarg) - (names[:1] in (["self"], ["cls"]))
                if n > 10:
                    found.append((path.relative_to(PKG).as_posix(), node.name, n))
    return found


def read_by_name() -> list:
    """file:line of each option value read by name in cli/."""
    pattern = re.compile(r"ctx\.params|\bparams\.get\(|\bparams\[|\bp\.get\(|\bp\[\"")
    return [f"cli/{p.name}:{n}" for p in sorted((PKG / "cli").glob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if pattern.search(line.split("#")[0])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--list", action="store_true", help="print calls per file and the edges")
    parser.add_argument("args", nargs="*", help="classify's arguments (default: the bundled model "
                                                "and its samples)")
    options = parser.parse_args()
    args = options.args or [str(ROOT / "models/digits_int8.tflite"), str(ROOT / "models/samples")]
    calls, edges = trace(["classify", *args])
    upward = sorted((a, b) for a, b in edges if RANK[layer(a)] < RANK[layer(b)])
    print(f"files: {len(calls)}")
    print(f"calls: {sum(calls.values())}")
    print(f"edges: {len(edges)}")
    print(f"upward: {len(upward)}")
    for a, b in upward:
        print(f"  {a} -> {b}")
    many = many_parameters()
    outside = [m for m in many if not (m[0].startswith("cli/") or m[0] == "api.py")]
    print(f"params>10: {len(outside)} outside cli/ and api.py, {len(many)} in all")
    by_name = read_by_name()
    print(f"by-name: {len(by_name)}")
    if options.list:
        for where, name, n in many:
            print(f"  {n:3d} params  {where} {name}")
        for where in by_name:
            print(f"  by name  {where}")
        for name, count in sorted(calls.items()):
            print(f"{count:8d}  {name}")
        for a, b in sorted(edges):
            print(f"  edge {a} -> {b}")


if __name__ == "__main__":
    main()
