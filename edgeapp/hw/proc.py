"""External commands: every one edgeapp runs is logged, and its own Python children run isolated.

A child `python` normally puts the working directory first on sys.path, so a `json.py` or a
fake `ai_edge_litert/` where the user stands would run inside it. Isolated mode (-I) drops the
working directory, PYTHON* variables and the user site folder; edgeapp's own folder (and the
user site folder when this process uses it, as a `pip install --user` does) are put back
explicitly, so the child imports the same edgeapp and runtime as this process.

Every command is logged on the "edgeapp.exec" logger, and echoed to stderr with EDGEAPP_DEBUG=1,
so users can audit what edgeapp runs on their machine.
"""

from __future__ import annotations

import logging
import os
import shlex
import site
import sys
from pathlib import Path
from typing import Sequence

log = logging.getLogger("edgeapp.exec")
PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)  # the folder holding edgeapp/


def isolated_python(code: str, *args: str) -> list[str]:
    """argv running `code` in `python -I` with edgeapp's folder (and user site) on sys.path."""
    paths = [PACKAGE_PARENT]
    try:
        user_site = site.getusersitepackages()
    except AttributeError:  # virtualenv's old site.py
        user_site = None
    if user_site and user_site in sys.path:
        paths.append(user_site)
    prelude = f"import sys; sys.path[:0] = {paths!r}; "
    return [sys.executable, "-I", "-c", prelude + code, *args]


_logged: set = set()


def log_command(argv: Sequence[str], once: bool = False) -> None:
    """Record a command about to run (stderr too when EDGEAPP_DEBUG is set); once: only its
    first run in this process (a sensor read four times a second)."""
    text = " ".join(shlex.quote(str(a)) for a in argv)
    if once:
        if text in _logged:
            return
        _logged.add(text)
    log.info("running %s", text)
    if os.environ.get("EDGEAPP_DEBUG"):
        try:
            sys.stderr.write(f"edgeapp: exec: {text}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
