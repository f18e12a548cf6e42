"""Label files as Coral writes them: `0 cat`, `0:cat`, `0  cat`, or one label per line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

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


def label_count_warning(labels: Optional[dict[int, str]], classes: int, source: str) -> Optional[str]:
    """One line when the labels do not fit the model's class count (labels for other classes
    mislabel silently), naming both counts; None when they fit or there are none."""
    if not labels or classes <= 0:
        return None
    beyond = [i for i in labels if i >= classes]
    if len(labels) == classes and not beyond:
        return None
    what = f"{len(labels)} label(s) from {source} for the model's {classes} class(es)"
    if beyond:
        return f"{what}; labels of ids {min(beyond)}..{max(beyond)} are never used: wrong labels file?"
    return f"{what}; classes without a label are shown by id: wrong labels file?"
