"""The one root every system file is read under: /sys, /dev, /proc, /boot, /etc, /lib, /var.

`EDGEAPP_SYSROOT` (or `--root` of `devices` and `doctor`) points edgeapp at another tree: tests
build fake ones (a hot PCIe card, a USB 2 link, a Raspberry Pi 5 without its PCIe overlay), and
a container can look at the host's files mounted elsewhere. Functions in hw/ take `root=None`
and resolve it here, so one variable moves every read at once. `EDGEAPP_SYSFS_ROOT`, the name
bench's power sensors once read, still works when `EDGEAPP_SYSROOT` is not set.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional, Union

SYSROOT_ENV = "EDGEAPP_SYSROOT"
LEGACY_ENV = "EDGEAPP_SYSFS_ROOT"  # bench's power sensors read this name before the one root

Root = Union[str, Path, None]


def sysroot(root: Root = None, env: Optional[Mapping[str, str]] = None) -> Path:
    """`root` when given, else $EDGEAPP_SYSROOT (else the old $EDGEAPP_SYSFS_ROOT), else /."""
    if root is not None and str(root) != "":
        return Path(root)
    env = os.environ if env is None else env
    return Path(env.get(SYSROOT_ENV) or env.get(LEGACY_ENV) or "/")


def is_real(root: Root = None) -> bool:
    """Reading this machine's own files (so os-level fallbacks such as os.uname() apply)."""
    return sysroot(root) == Path("/")


def under(root: Root, path: str) -> Path:
    """`path` (absolute, as on the real system) inside the tree at `root`."""
    return sysroot(root) / path.lstrip("/")


def read_text(path: Path) -> Optional[str]:
    """A small system file's text, stripped; None when it cannot be read."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def read_at(root: Root, path: str) -> Optional[str]:
    """read_text(under(root, path))."""
    return read_text(under(root, path))
