"""Where edgeapp keeps what it learns about this machine (probe verdicts, CPU peak TOPS) and
what the user installs through it (the Edge TPU compiler)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

CACHE_ENV = "EDGEAPP_CACHE_DIR"


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """EDGEAPP_CACHE_DIR, else $XDG_CACHE_HOME/edgeapp, else ~/.cache/edgeapp."""
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(base) / "edgeapp"


DATA_ENV = "EDGEAPP_DATA_DIR"


def data_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where edgeapp keeps what the user installed through it (the Edge TPU compiler):
    EDGEAPP_DATA_DIR, else $XDG_DATA_HOME/edgeapp, else ~/.local/share/edgeapp. No root needed."""
    if env.get(DATA_ENV):
        return Path(env[DATA_ENV])
    home = env.get("HOME") or os.path.expanduser("~")
    base = env.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    return Path(base) / "edgeapp"
