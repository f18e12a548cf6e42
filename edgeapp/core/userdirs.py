"""Where edgeapp keeps what it learns about this machine (probe verdicts, CPU peak TOPS)."""

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
