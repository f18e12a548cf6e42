"""Plain-text tables that fit the terminal: when a table is wider than the terminal, the least
important columns are left out (and named, so the reader knows where to find them) rather than
each row wrapping into a second line.

The width is `$COLUMNS` when set, else the terminal's when stdout is one; piped output (a
file, another program) keeps every column.
"""

import os
import shutil
import sys
from typing import List, Optional, Sequence, Tuple

GAP = 2  # spaces between columns


def output_width() -> Optional[int]:
    """The width to fit, or None for no limit (stdout is not a terminal and $COLUMNS is unset)."""
    env = os.environ.get("COLUMNS", "")
    if env.strip().isdigit() and int(env) > 0:
        return int(env)
    try:
        if sys.stdout.isatty():
            return shutil.get_terminal_size().columns
    except (AttributeError, ValueError, OSError):
        pass
    return None


def fit_columns(widths: Sequence[int], priority: Sequence[int], width: Optional[int],
                gap: int = GAP) -> List[int]:
    """The indices of the columns to show, in table order: the most important first (`priority`
    lists every index, most important first) while the row stays within `width`. The first of
    `priority` is always shown."""
    if width is None:
        return list(range(len(widths)))
    kept: List[int] = []
    used = 0
    for i in priority:
        need = widths[i] + (gap if kept else 0)
        if kept and used + need > width:
            continue
        kept.append(i)
        used += need
    return sorted(kept)


def render(header: Sequence[str], rows: Sequence[Sequence[str]], priority: Sequence[int],
           right: Sequence[int] = (), width: Optional[int] = None,
           gap: int = GAP) -> Tuple[List[str], List[str]]:
    """(lines, names of the columns left out). `right`: indices of right-aligned columns; the
    last column shown is not padded."""
    table = [list(header)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    shown = fit_columns(widths, priority, width, gap)
    lines = []
    for r in table:
        cells = [r[i].rjust(widths[i]) if i in right else r[i].ljust(widths[i]) for i in shown]
        lines.append((" " * gap).join(cells).rstrip())
    return lines, [header[i] for i in range(len(header)) if i not in shown]


def left_out_note(names: Sequence[str], width: Optional[int], json_hint: str) -> Optional[str]:
    """The line saying which columns a narrow terminal left out, or None."""
    if not names:
        return None
    return (f"{', '.join(names)} left out to fit {width} columns: {json_hint} has every column, "
            "as has a wider terminal (or COLUMNS=200)")
