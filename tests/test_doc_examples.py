"""Every ```python block of the README and docs/ runs as pasted from the repository root, on a
machine without an Edge TPU or network: no traceback, and no expression whose value is thrown
away unseen (a bare `model.classify(...)` line that prints nothing in a script).

A block that needs what the suite cannot have (PyTorch, Ultralytics, the network) says so in an
HTML comment on the line before it, `<!-- example: needs torch (why) -->`, and is skipped with
that reason: keep these few, each a real need (ALLOWED_NEEDS). Each block runs in its own process, in a temporary
copy of the repository's `models/`, with edgeapp from this checkout and private cache and
home folders, so nothing is written into the repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

NEEDS = re.compile(r"<!--\s*example:\s*needs\s+([\w-]+)[^>]*-->\s*$")
ALLOWED_NEEDS = {"torch", "ultralytics"}  # not in the suite's environment (CONTRIBUTING.md)

# Runs the block with every expression statement's value checked: a value other than None
# thrown away means the reader sees nothing where the example shows a result.
RUNNER = r"""
import ast, sys
source = open(sys.argv[1]).read()

class Checked(ast.NodeTransformer):
    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant):
            return node
        call = ast.Call(ast.Name("_shown", ast.Load()), [node.value, ast.Constant(node.lineno)], [])
        return ast.copy_location(ast.Expr(call), node)

def _shown(value, line):
    if value is not None:
        raise SystemExit(f"line {line}: the value of this expression is thrown away unseen "
                         f"({type(value).__name__}): print it")

tree = ast.fix_missing_locations(Checked().visit(ast.parse(source)))
exec(compile(tree, "<example>", "exec"), {"__name__": "__main__", "_shown": _shown})
"""


def python_blocks(page: Path) -> list:
    """(line number, code, what it needs or None) of each ```python block."""
    lines = page.read_text().splitlines()
    found = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            before = next((ln for ln in reversed(lines[:i]) if ln.strip()), "")
            need = NEEDS.search(before)
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            found.append((i + 1, "\n".join(lines[i + 1:end]) + "\n", need.group(1) if need else None))
            i = end
        i += 1
    return found


PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
BLOCKS = [(page, line, code, need) for page in PAGES for line, code, need in python_blocks(page)]


def test_the_docs_have_examples_to_run_and_few_exceptions():
    runnable = [b for b in BLOCKS if b[3] is None]
    assert any(p.name == "python-api.md" for p, *_ in runnable)
    needs = [(p.name, line, need) for p, line, _, need in BLOCKS if need]
    assert all(need in ALLOWED_NEEDS for _, _, need in needs), needs
    assert len(needs) <= 4, needs


@pytest.mark.parametrize("page, line, code, need", BLOCKS,
                         ids=[f"{p.name}:{line}" for p, line, _, _ in BLOCKS])
def test_python_examples_run_as_pasted(page, line, code, need, tmp_path):
    if need:
        pytest.skip(f"{page.name}:{line} needs {need}")
    shutil.copytree(ROOT / "models", tmp_path / "models")
    (tmp_path / "example.py").write_text(code)
    (tmp_path / "runner.py").write_text(RUNNER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path / "home"),
           "EDGEAPP_CACHE_DIR": str(tmp_path / "cache"), "XDG_CACHE_HOME": str(tmp_path / "xdg"),
           "EDGEAPP_MODELS_URL": "http://127.0.0.1:9/{path}"}  # no network: a model by name fails fast
    for name in ("EDGEAPP_DEVICE", "EDGEAPP_EDGETPU_LIB"):
        env.pop(name, None)
    r = subprocess.run([sys.executable, "runner.py", "example.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr, f"{page.name}:{line}\n{r.stdout}\n{r.stderr}"
    assert r.stdout.strip(), f"{page.name}:{line} shows nothing when run"
