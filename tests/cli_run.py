"""Running edgeapp as a user does, for the tests: `edgeapp(...)` in a subprocess from the
repository, its one-line errors, and Ctrl-C as a terminal delivers it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from conftest import ROOT

IMAGE_COMMANDS = ("classify", "detect", "pose", "segment")


def edgeapp(*args, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """`python -m edgeapp ARGS...` from the repository, with `env` over this environment."""
    return subprocess.run([sys.executable, "-m", "edgeapp", *map(str, args)], capture_output=True,
                          text=True, cwd=kw.pop("cwd", ROOT), env={**os.environ, **(env or {})}, **kw)


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("edgeapp: error:")]


def flat(text: str) -> str:
    """Help text with its line breaks and runs of spaces as single spaces."""
    return " ".join(text.split())


def default_sigint() -> None:
    """Ctrl-C as a terminal delivers it (a `preexec_fn`): a test run started in the background
    (SIGINT ignored, which children inherit and Python keeps) must not change what the command
    does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

