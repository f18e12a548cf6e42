"""Which system this is, for the install plan: /etc/os-release, dpkg's architecture, Python.

Read under an injectable `root` (doctor's --root; tests use fake trees); nothing here fails:
missing files give empty fields.
"""

from __future__ import annotations

import platform
import struct
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from edgeapp.core.install.debian import native_architecture, parse_dpkg_status
from edgeapp.core.install.plan import Platform, debian_arch
from edgeapp.hw.sysroot import under


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def read_platform(root: Path | str = "/", machine: Optional[str] = None,
                  python: Optional[Tuple[int, int]] = None, system: Optional[str] = None) -> Platform:
    """core.install_plan.Platform of the system at `root`: os-release, dpkg's architecture, Python.

    Arguments left out describe this process (platform.machine(), sys.version_info, ...); the
    architecture comes from dpkg's database when there is one (a 32-bit Raspberry Pi OS on a
    64-bit kernel is armhf, though the kernel says aarch64).
    """
    r = Path(root)
    release = _read(r / "etc/os-release") or _read(r / "usr/lib/os-release") or ""
    arch = native_architecture(parse_dpkg_status(_read(r / "var/lib/dpkg/status") or ""))
    here = r.resolve() == Path("/").resolve()
    if arch is None:
        bits = struct.calcsize("P") * 8 if here and machine is None else 64
        arch = debian_arch(machine or platform.machine(), bits)
    version = python or (sys.version_info[0], sys.version_info[1])
    exe = sys.executable if here and python is None and sys.executable else "python3"
    return Platform.from_os_release(release, system=system or platform.system(), arch=arch,
                                    python=version, python_exe=exe)


# Google's apt host and path as Coral's guides and Mendel wrote them into apt's sources; matched
# to warn that they now fail `apt-get update` (the host alone would match Google Cloud's own).
_CORAL_APT = "cloud.google.com/apt"


def coral_apt_sources(root: Path | str = "/") -> List[str]:
    """apt source files (as paths on that system) with an active line naming Coral's repository."""
    etc = under(str(root), "/etc/apt")
    files = [etc / "sources.list"] + sorted((etc / "sources.list.d").glob("*.list")) + \
        sorted((etc / "sources.list.d").glob("*.sources"))
    found = []
    for f in files:
        text = _read(f) or ""
        if any(_CORAL_APT in ln and not ln.lstrip().startswith("#") for ln in text.splitlines()):
            found.append("/" + str(f.relative_to(under(str(root), "/"))))
    return found
