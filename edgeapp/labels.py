"""Label files as Coral writes them: `0 cat`, `0:cat`, `0  cat`, or one label per line."""

from __future__ import annotations

import re
from pathlib import Path

from .errors import UsageError

_NUMBERED = re.compile(r"^\s*(\d+)\s*[:\s]\s*(.*?)\s*$")


def parse_labels(text: str) -> dict[int, str]:
    """Numbered when every non-empty line starts with an id; otherwise the line index is the id."""
    lines = text.splitlines()
    if lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:]
    matches = [_NUMBERED.match(line) for line in lines if line.strip()]
    if matches and all(matches):
        return {int(m.group(1)): m.group(2) for m in matches}
    return {i: line.strip() for i, line in enumerate(lines) if line.strip()}


def read_labels(path: str | Path) -> dict[int, str]:
    p = Path(path)
    try:
        return parse_labels(p.read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        raise UsageError(f"labels file not found: {p}") from None
    except OSError as e:
        raise UsageError(f"cannot read labels file {p}: {e.strerror or e}") from None
