"""Option values read exactly as Typer reads them, without its validation library.

Typer 0.29 converts and checks every value through a pydantic TypeAdapter; importing pydantic
costs a command more start-up time than anything of edgeapp's but numpy, so `cli/command.py`
converts plainly valid values of edgeapp's plain option types itself (`PlainValues`, a
parameter's `process_value`) and hands the rest to Typer. Here every parameter of every
command, given values of each kind (valid, invalid, odd), must come out the same both ways
(ours, and the parameter class's own `process_value`): same value and type, or the same usage
error. Run it first against each new Typer: it is why pyproject.toml need not cap Typer.
"""

import subprocess
import sys
from enum import Enum
from pathlib import Path

import pytest
import typer

from edgeapp.cli.app import app
from edgeapp.cli.command import declared, plain_values


def every_parameter():
    """(command path, parameter, its declaration) of the group, its groups and every command,
    lazy ones too."""
    group = typer.main.get_command(app)
    found = []

    def walk(command, name):
        ctx = typer.Context(command)
        declarations = declared(command, ctx)
        found.extend((name, p, declarations.get(p.name)) for p in command.get_params(ctx))
        if hasattr(command, "list_commands"):
            for sub in command.list_commands(ctx):
                walk(command.get_command(ctx, sub), f"{name} {sub}")

    walk(group, "edgeapp")
    return found


PARAMETERS = every_parameter()
if all(getattr(p, "type", None) is not None for _, p, _ in PARAMETERS):
    pytest.skip("this Typer checks values with click's types", allow_module_level=True)


def kinds_of(parameters):
    """One parameter per kind of value (type, range, one value or several)."""
    seen = {}
    for where, p, declaration in parameters:
        kind, info = declaration or (None, None)
        key = (repr(kind), getattr(info, "min", None), getattr(info, "max", None), p.multiple, p.nargs)
        seen.setdefault(key, (where, p, declaration))
    return list(seen.values())


KINDS = kinds_of(PARAMETERS)


def samples(kind, tmp_path: Path) -> list:
    if isinstance(kind, type) and issubclass(kind, Enum):
        first = list(kind)[0]
        return [m.value for m in kind] + [first, first.value.upper(), "nope", "", 3]
    return {
        bool: [True, False, "true", "0", "", None],
        str: ["auto", "", "usb:0,usb:1", " spaced ", 5, b"bytes", None],
        int: ["0", "1", "-3", "+4", "007", " 5", "1.0", "1e3", "1_000", "x", "", 5, 2 ** 40, 2.5,
              True, None],
        float: ["0", "1.5", "-2.", "+.5", "1e-3", "1E3", "nan", "inf", "-inf", "x", "", "1_0", 3,
                2.5, True, None],
        Path: ["", "a/b.tflite", str(tmp_path), str(tmp_path / "missing"), Path("x"), 5, None],
    }.get(kind, [])


def outcome(process, value, ctx):
    try:
        result = process(ctx, value)
    except typer.BadParameter as e:
        return ("error", e.message)
    except typer.Exit:  # an eager flag's callback (--version)
        return ("exit",)
    items = result if isinstance(result, (list, tuple)) else [result]
    return ("ok", type(result), [(type(v), repr(v)) for v in items])  # repr: nan == nan


@pytest.mark.parametrize("where,param,declaration", KINDS, ids=[f"{w} {p.name}" for w, p, _ in KINDS])
def test_plain_values_read_as_typer_reads_them(where, param, declaration, tmp_path):
    ours = plain_values(param, declaration)
    many = param.multiple or param.nargs == -1
    if ours is None:
        pytest.skip(f"{declaration} is left to Typer")
    kind = declaration[0]
    ctx = typer.Context(typer.main.get_command(app))
    values = samples(kind.__args__[0] if many else kind, tmp_path)
    if many:
        values = [[v] for v in values if v is not None] + [["a", "b"], ("a",), [], "a", None]
    assert values, f"no sample values for {kind}"
    for value in values:
        assert outcome(ours, value, ctx) == outcome(ours.typers, value, ctx), value


def test_every_parameter_of_the_commands_is_read_plainly():
    """The plain reading covers what the commands declare (else pydantic comes back)."""
    left = sorted({f"{w} --{p.name}: {d}" for w, p, d in PARAMETERS if plain_values(p, d) is None})
    assert left == []


def test_classify_runs_without_the_validation_library(tiny_model, color_images):
    code = ("import sys\nfrom edgeapp.cli.app import app\n"
            f"try:\n    app(['classify', {str(tiny_model)!r}, {str(color_images['red'])!r}, "
            "'--workers', '1', '--format', 'jsonl'])\n"
            "except SystemExit as e:\n    print('exit', e.code)\n"
            "print('pydantic' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip().splitlines()[-2:] == ["exit 0", "False"], r.stderr


def test_no_private_typer_api():
    """Nothing of edgeapp imports a private module or name of Typer (its internals change
    between releases; the public API is what pyproject.toml's unbounded pin relies on)."""
    import ast

    private = []
    for path in sorted((Path(__file__).resolve().parent.parent / "edgeapp").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            for module in modules:
                parts = module.split(".")
                if parts[0] == "typer" and (any(p.startswith("_") for p in parts)
                                            or any(n.startswith("_") for n in names)):
                    private.append(f"{path.name}:{node.lineno} {module} {names}")
            if isinstance(node, ast.Attribute) and node.attr in ("_runtime_param", "_coercion"):
                private.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert private == []


def test_cli_reads_option_values_as_typed_values():
    """A command's values are one typed value (or its parameters), not looked up by name in
    click's context (a handful of such reads at most)."""
    import re

    cli = Path(__file__).resolve().parent.parent / "edgeapp" / "cli"
    found = [f"{p.name}:{n}" for p in sorted(cli.glob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"ctx\.params|\bparams\.get\(|\bparams\[", line.split("#")[0])]
    assert len(found) <= 3, found
