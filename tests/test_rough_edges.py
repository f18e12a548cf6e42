"""The rough edges a new user hit (issue 11, item 3, and the full-disk runs of item 4), each
through the CLI as the user met it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from edgeapp.errors import ExitCode

COMMANDS = ("convert", "check", "compile", "classify", "detect", "camera", "bench", "devices", "doctor")


def edgeapp(*args, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeapp", *map(str, args)], capture_output=True,
                          text=True, cwd=kw.pop("cwd", ROOT), env={**os.environ, **(env or {})}, **kw)


def flat(text: str) -> str:
    return " ".join(text.split())


# --- help texts ----------------------------------------------------------------------------------

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
