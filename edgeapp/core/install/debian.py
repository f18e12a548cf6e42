"""Two Debian text formats edgeapp reads: /etc/os-release and dpkg's status database.

Pure parsers; the files are read under an injectable root by edgeapp/hw (hostinfo, libedgetpu).
"""

from __future__ import annotations

import shlex
from typing import Dict, List, Optional


def parse_os_release(text: str) -> Dict[str, str]:
    """KEY=value lines (os-release(5)), values unquoted: {"ID": "debian", "VERSION_CODENAME": ...}."""
    fields = {}
    for line in (text or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if not sep or not key or key.startswith("#"):
            continue
        try:
            words = shlex.split(value)
        except ValueError:  # an unbalanced quote: keep the raw text
            words = [value.strip().strip("\"'")]
        fields[key.strip()] = " ".join(words)
    return fields


def parse_dpkg_status(text: str) -> List[Dict[str, str]]:
    """The stanzas of /var/lib/dpkg/status as dicts ("Package", "Status", "Architecture", "Version").

    Continuation lines (starting with a space) belong to the field before them and are dropped:
    none of the fields edgeapp reads spans lines.
    """
    stanzas, current, last = [], {}, None
    for line in (text or "").splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current, last = {}, None
        elif line[0] in " \t":
            continue
        else:
            key, sep, value = line.partition(":")
            if sep:
                last = key.strip()
                current[last] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def installed_version(stanzas: List[Dict[str, str]], package: str,
                      architecture: Optional[str] = None) -> Optional[str]:
    """Version of an installed package (Status ... installed), optionally of one architecture."""
    for s in stanzas:
        if s.get("Package") != package or not s.get("Status", "").endswith(" installed"):
            continue
        if architecture and s.get("Architecture") not in (architecture, "all"):
            continue
        return s.get("Version") or None
    return None


def native_architecture(stanzas: List[Dict[str, str]]) -> Optional[str]:
    """dpkg's own architecture is the system's (what `dpkg --print-architecture` says)."""
    for s in stanzas:
        if s.get("Package") == "dpkg" and s.get("Architecture"):
            return s["Architecture"]
    return None
