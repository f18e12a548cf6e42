"""Help texts and usage lines as a reader expects them: every command's --help free of Python
noise and backslashes, every word kept, arguments named plainly, bad choices listing the
choices, and the help saying what the docs say (docs/classify.md).
"""

from __future__ import annotations

import re

import pytest
from cli_run import IMAGE_COMMANDS, flat
from conftest import ROOT

from edgeapp.errors import ExitCode

COMMANDS = ("convert", "check", "compile", "classify", "detect", "camera", "bench", "devices", "doctor")


@pytest.mark.parametrize("command", ("",) + COMMANDS)
def test_help_keeps_every_word_and_shows_no_bool_metavar(cli, command):
    r = cli(*filter(None, [command]), "--help")
    assert r.exit_code == 0, r.stderr
    assert "<bool>" not in r.stdout and "Usage:" in r.stdout
    text = flat(r.stdout)
    if command == "convert":
        assert "pip install 'edgeapp[convert]'" in text
    if command == "detect":
        assert "[xmin, ymin, xmax, ymax]" in text
    if command == "camera":
        assert "--display / --no-display" in text or "--display/--no-display" in text


def commands() -> list[tuple[str, ...]]:
    """Every command and sub-command as the user reaches them, the lazily built ones included
    (each task's and the camera's)."""
    import typer

    from edgeapp.cli.app import app

    group = typer.main.get_command(app)
    ctx = group.make_context("edgeapp", ["--help"], resilient_parsing=True)
    found: list[tuple[str, ...]] = [()]
    for name in group.list_commands(ctx):
        found.append((name,))
        sub = group.get_command(ctx, name)
        if hasattr(sub, "list_commands"):
            found += [(name, inner) for inner in sub.list_commands(ctx)]
    return found


NOISE = re.compile(r"\\|<?list\[|<class |typing\.|NoneType|Optional\[|\{[A-Za-z_]+\}|PosixPath")


@pytest.mark.parametrize("command", commands(), ids=lambda c: " ".join(c) or "edgeapp")
def test_every_help_is_free_of_backslashes_and_python_noise(cli, command):
    r = cli(*command, "--help")
    assert r.exit_code == 0, r.stderr
    assert "Usage:" in r.stdout
    noise = [ln for ln in r.stdout.splitlines() if NOISE.search(ln)]
    assert noise == [], noise


def test_every_command_is_in_the_help_scan():
    scanned = {" ".join(c) for c in commands()}
    assert {"classify", "detect", "pose", "segment", "camera", "convert", "bench", "models list",
            "models pull", "models path", "doctor", "devices", "check", "compile"} <= scanned


def test_usage_lines_name_the_arguments_plainly(cli):
    r = cli("classify", "--help")
    assert "classify [OPTIONS] MODEL INPUTS..." in r.stdout
    assert re.search(r"^  INPUTS\.\.\.\s+Image files", r.stdout, re.M), r.stdout
    assert "models pull [OPTIONS] NAMES..." in cli("models", "pull", "--help").stdout


@pytest.mark.parametrize("args, expected", [
    (("classify", "m", "x", "--format", "xml"), "'xml' is not one of table, jsonl, csv"),
    (("--runtime", "foo", "classify", "m", "x"),
     "'foo' is not one of ai-edge-litert, tflite-runtime, tensorflow"),
    (("models", "list", "--task", "count"), "'count' is not one of classify, detect, pose, segment"),
    (("classify", "m", "x", "--cpu-kernels", "slow"), "'slow' is not one of fast, reference"),
])
def test_a_bad_choice_names_the_choices_plainly(cli, args, expected):
    r = cli(*args)
    assert r.exit_code == ExitCode.USAGE
    assert expected in r.stderr and "Value error" not in r.stderr, r.stderr


def test_threads_help_says_what_the_readme_says(cli):
    readme = " ".join((ROOT / "docs" / "classify.md").read_text().split())
    assert "without `--threads`, one one-thread interpreter per core runs side by side" in readme
    for command in IMAGE_COMMANDS:
        text = " ".join(cli(command, "--help").stdout.split())
        assert "Default: one single-thread interpreter per usable core" in text, command
        assert "the runtime's" not in text.split("--threads", 1)[1].split("--cpu-kernels")[0]


def test_serve_needs_its_address_as_the_help_says(cli, tiny_model):
    r = cli("camera", tiny_model, "--serve")
    assert r.exit_code == ExitCode.USAGE and "requires an argument" in r.stderr
    text = " ".join(cli("camera", "--help").stdout.split())
    serve = text.split("--serve ", 1)[1].split("--serve-fps")[0]
    assert "ADDRESS is required" in serve and "PORT to 8080" not in serve
