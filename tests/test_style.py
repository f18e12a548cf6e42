"""House habits a reader relies on, checked: ruff's rules (pyproject.toml: pyflakes, pycodestyle,
import order, complexity), and sizes a newcomer can hold in their head: no module in edgeapp/
over 500 lines, no function over 80.
"""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "edgeapp"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
MAX_CLI_FUNCTION_LINES = 60
# Data tables may run longer than code: module -> why (none today).
SIZE_EXEMPT: dict = {}


def _ruff() -> list:
    try:
        import ruff  # noqa: F401  (the PyPI package carries the binary)

        return [sys.executable, "-m", "ruff"]
    except ImportError:
        found = shutil.which("ruff")
        if found is None:
            pytest.skip("ruff is not installed: pip install ruff (it is in the dev extra)")
        return [found]


def test_ruff_passes():
    proc = subprocess.run(_ruff() + ["check", "--no-cache", "--output-format", "concise",
                                     "edgeapp", "tests", "scripts"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _modules():
    return sorted(p for p in PKG.rglob("*.py") if str(p.relative_to(PKG)) not in SIZE_EXEMPT)


def test_no_module_over_500_lines():
    sizes = {str(p.relative_to(PKG)): len(p.read_text().splitlines()) for p in _modules()}
    long = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by idea): {long}"


def test_no_function_over_80_lines():
    """And none over 60 in cli/: a command parses, calls a flow and renders."""
    long = []
    for p in _modules():
        limit = MAX_CLI_FUNCTION_LINES if p.relative_to(PKG).parts[0] == "cli" else MAX_FUNCTION_LINES
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    long.append(f"{p.relative_to(PKG)}:{node.lineno} {node.name} ({n} lines, limit {limit})")
    assert not long, "functions over the limit:\n" + "\n".join(long)


def _test_sources() -> dict:
    """Every module of tests/ (not the data under it) by name: its parsed source."""
    here = Path(__file__).resolve().parent
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(here.glob("*.py"))}


def _fixtures(tree: ast.Module) -> set:
    def is_fixture(d) -> bool:
        d = d.func if isinstance(d, ast.Call) else d
        return isinstance(d, ast.Attribute) and d.attr == "fixture"

    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and any(map(is_fixture, n.decorator_list))}


def test_tests_share_through_plugins_and_helpers_not_test_modules():
    """A test module imports no other test module, and no module imports a fixture: shared
    fixtures are found through conftest.py's `pytest_plugins`, shared code is a helper module."""
    sources = _test_sources()
    fixtures = {name: _fixtures(tree) for name, tree in sources.items()}
    wrong = []
    for name, tree in sources.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found = [(node.module, a.name) for a in node.names]
            else:
                continue
            for module, what in found:
                if module.startswith("test_") and module in sources:
                    wrong.append(f"{name}.py:{node.lineno} imports the test module {module}")
                elif what in fixtures.get(module, ()):
                    wrong.append(f"{name}.py:{node.lineno} imports the fixture {module}.{what}")
    assert not wrong, "\n".join(wrong)
    # and each plugin conftest.py names is a module here
    plugins = next(ast.literal_eval(n.value) for n in sources["conftest"].body if isinstance(n, ast.Assign)
                   and [getattr(t, "id", None) for t in n.targets] == ["pytest_plugins"])
    assert set(plugins) <= set(sources), set(plugins) - set(sources)
