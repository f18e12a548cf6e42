"""Label files as Coral writes them: `0 cat`, `0:cat`, `0  cat`, or one label per line."""

from __future__ import annotations

import re
from pathlib import Path

from edgeapp.errors import UsageError

_NUMBERED = re.compile(r"^\s*(\d+)\s*[:\s]\s*(.*?)\s*$")


def parse_labels(text: str) -> dict[int, str]:
    """Numbered when the first non-empty line starts with an id (as Coral's reader decides; lines
    without an id are then skipped); otherwise the line index is the id."""
    lines = text.splitlines()
    if lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:]
    first = next((line for line in lines if line.strip()), None)
    if first is not None and _NUMBERED.match(first):
        return {int(m.group(1)): m.group(2) for m in map(_NUMBERED.match, lines) if m}
    return {i: line.strip() for i, line in enumerate(lines) if line.strip()}


def read_labels(path: str | Path) -> dict[int, str]:
    p = Path(path)
    try:
        data = p.read_bytes()
        if b"\0" in data:
            raise UsageError(f"{p} is not a text labels file")
        return parse_labels(data.decode("utf-8", errors="replace"))
    except FileNotFoundError:
        raise UsageError(f"labels file not found: {p}") from None
    except OSError as e:
        raise UsageError(f"cannot read labels file {p}: {e.strerror or e}") from None
