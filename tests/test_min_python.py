"""Python 3.7 is the floor for every command but convert: the Coral Dev Board runs Python 3.7.

No Python 3.7 runs here, so this is checked statically with vermin (a dev dependency), so that
no change breaks the Dev Board silently. Python 3.9 itself runs the whole suite in
scripts/test_oldest_python.sh; Python-3.7-only pitfalls in third-party APIs are not covered.
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "edgeapp"
FLOOR = "3.7"

# Modules allowed a newer Python, each with why: optional extras only. Add yours here.
NEWER_PYTHON = {
    **{f"edgeapp/flows/convert/{m}.py": "convert needs TensorFlow, whose own floor is Python 3.9"
       for m in ("__init__", "data", "job", "quantize", "agreement", "report")},
    **{f"edgeapp/flows/sources/{m}.py": "convert needs TensorFlow, whose own floor is Python 3.9"
       for m in ("base", "keras")},
    **{f"edgeapp/flows/convert/{m}.py": "ONNX conversion: the onnx extra needs Python 3.10"
       for m in ("onnx", "onnx_graph")},
}

VERMIN = "import sys, vermin; sys.argv[0] = 'vermin'; sys.exit(vermin.main())"


def vermin(*args: str) -> subprocess.CompletedProcess:
    pytest.importorskip("vermin", reason="vermin is a dev dependency: pip install -e '.[dev]'")
    return subprocess.run([sys.executable, "-c", VERMIN, f"-t={FLOOR}-", "--violations", "--no-tips",
                           "--no-config-file", *args], capture_output=True, text=True, cwd=ROOT)


def future_annotations(path: Path) -> bool:
    """`from __future__ import annotations`: annotations stay strings, never evaluated."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
               and any(a.name == "annotations" for a in n.names) for n in tree.body)


def floor_modules() -> list:
    return sorted(str(p.relative_to(ROOT)) for p in PKG.rglob("*.py")
                  if str(p.relative_to(ROOT)) not in NEWER_PYTHON)


def test_exemptions_name_real_modules():
    stale = [m for m in NEWER_PYTHON if not (ROOT / m).is_file()]
    assert not stale, f"NEWER_PYTHON lists modules that no longer exist: {stale}"


def test_pyproject_declares_the_floor():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^requires-python\s*=\s*">=' + re.escape(FLOOR) + '"', text, re.M)


def test_package_runs_on_the_floor():
    """Stdlib modules, functions and syntax newer than 3.7 (math.prod, walrus, ...)."""
    proc = vermin(*floor_modules())
    assert proc.returncode == 0, f"needs Python > {FLOOR}:\n{proc.stdout}{proc.stderr}"


def test_evaluated_annotations_run_on_the_floor():
    """Where annotations are evaluated (no `from __future__ import annotations`): no list[int],
    no X | Y."""
    evaluated = [m for m in floor_modules() if not future_annotations(ROOT / m)]
    proc = vermin("--eval-annotations", "--feature", "union-types", *evaluated)
    assert proc.returncode == 0, f"needs Python > {FLOOR}:\n{proc.stdout}{proc.stderr}"


# str methods newer than the floor that vermin cannot see (it does not know a value is a str)
NEWER_STR_METHODS = {"removeprefix": "3.9", "removesuffix": "3.9"}


def newer_str_methods(source: str) -> list:
    tree = ast.parse(source)
    return [(n.lineno, n.attr) for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr in NEWER_STR_METHODS]


def test_no_str_methods_newer_than_the_floor():
    found = [f"{m}:{line} .{name}() needs Python {NEWER_STR_METHODS[name]}"
             for m in floor_modules() for line, name in newer_str_methods((ROOT / m).read_text())]
    assert not found, "\n".join(found)
    assert newer_str_methods("x = 'ab'.removeprefix('a')\n") == [(1, "removeprefix")]


def test_cli_annotations_are_evaluated():
    """On Python < 3.10 Typer does not evaluate string annotations: under the __future__ import
    every Annotated[..., typer.Option(...)] of a command would be silently ignored."""
    stringly = [str(p.relative_to(ROOT)) for p in sorted((PKG / "cli").rglob("*.py")) if future_annotations(p)]
    assert not stringly, f"CLI modules with `from __future__ import annotations` (breaks Typer < 3.10): {stringly}"


@pytest.mark.parametrize("code, evaluated, found", [
    ("if (n := 3):\n    pass\n", False, "named expressions"),
    ("import math\nmath.prod([2, 3])\n", False, "math.prod"),
    ("from importlib import metadata\n", False, "importlib.metadata"),
    ("def f(x: list[int]) -> None:\n    pass\n", True, "list[..]"),
])
def test_the_check_catches_newer_python(tmp_path, code, evaluated, found):
    """The checks above can fail: what 3.8+/3.9+ code looks like to them."""
    f = tmp_path / "newer.py"
    f.write_text(code)
    proc = vermin(*(["--eval-annotations", "--feature", "union-types"] if evaluated else []), str(f))
    assert proc.returncode != 0 and found in proc.stdout, proc.stdout
