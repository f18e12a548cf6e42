"""Tiles for small objects: a detector run on overlapping windows of a large image, and the
boxes of every window merged into one set.

A 320-pixel detector sees a 1080p frame shrunk six times: a car 40 pixels wide becomes 7. Cut
into COLS x ROWS windows that overlap, each window reaches the model closer to its own size;
the whole frame is run once more so that objects larger than a window are still seen whole
(SAHI's slicing with its standard prediction). Boxes of all windows, in the image's pixels,
are merged per class: a box is dropped when a better box of its class covers most of it
(intersection over the smaller box), which also removes the halves of an object cut by a
window's edge that the whole frame or a neighbour saw whole.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Tuple

if TYPE_CHECKING:  # numpy only where boxes are merged: the runtime layer imports Tiles at start-up
    import numpy as np

Window = Tuple[int, int, int, int]  # x0, y0, x1, y1 in the image's pixels (x1, y1 exclusive)
DEFAULT_OVERLAP = 0.2
MERGE_COVER = 0.6  # a box covered this much (of its own area) by a better one of its class goes
_GRAMMAR = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*(?::\s*([0-9.]+)\s*)?$")
MAX_SIDE = 16


@dataclass(frozen=True)
class TileGrid:
    """COLS x ROWS windows overlapping by `overlap` (a fraction of a window's side)."""

    cols: int
    rows: int
    overlap: float = DEFAULT_OVERLAP

    @property
    def count(self) -> int:
        return self.cols * self.rows

    def text(self) -> str:
        return f"{self.cols}x{self.rows}:{self.overlap:g}"


def parse_tiles(text: str) -> TileGrid:
    """`COLSxROWS[:OVERLAP]` as users write it (`2x2`, `3x2:0.25`); ValueError says what is wrong."""
    m = _GRAMMAR.match(str(text))
    if not m:
        raise ValueError(f"--tiles {text!r}: write COLSxROWS[:OVERLAP], e.g. 2x2 or 3x2:0.25")
    cols, rows = int(m.group(1)), int(m.group(2))
    overlap = float(m.group(3)) if m.group(3) is not None else DEFAULT_OVERLAP
    if not (1 <= cols <= MAX_SIDE and 1 <= rows <= MAX_SIDE) or cols * rows < 2:
        raise ValueError(f"--tiles {text!r}: columns and rows from 1 to {MAX_SIDE}, at least 2 "
                         "tiles in all (1x1 is the whole frame: leave --tiles out)")
    if not 0.0 <= overlap < 0.9 or not math.isfinite(overlap):
        raise ValueError(f"--tiles {text!r}: the overlap is a fraction of a tile, from 0 to below 0.9")
    return TileGrid(cols, rows, overlap)


def _spans(length: int, count: int, overlap: float) -> List[Tuple[int, int]]:
    """`count` windows over `length` pixels, each `size` long, overlapping by `overlap`."""
    if count == 1:
        return [(0, length)]
    size = max(1, int(math.ceil(length / (count - (count - 1) * overlap))))
    size = min(size, length)
    step = (length - size) / (count - 1)
    return [(int(round(i * step)), int(round(i * step)) + size) for i in range(count)]


def windows(width: int, height: int, grid: TileGrid) -> List[Window]:
    """The grid's windows over a width x height image, row by row, then the whole image."""
    xs, ys = _spans(width, grid.cols, grid.overlap), _spans(height, grid.rows, grid.overlap)
    return [(x0, y0, x1, y1) for y0, y1 in ys for x0, x1 in xs] + [(0, 0, width, height)]


def merge(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
          cover: float = MERGE_COVER, max_det: int = 300) -> np.ndarray:
    """Indices kept, best score first: greedy, per class, a box is dropped when a kept box of its
    class covers more than `cover` of the box's own area."""
    import numpy as np

    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    c = np.asarray(classes)
    areas = np.maximum(b[:, 2] - b[:, 0], 0) * np.maximum(b[:, 3] - b[:, 1], 0)
    kept: List[int] = []
    for i in order.tolist():
        if len(kept) >= max_det:
            break
        same = [k for k in kept if c[k] == c[i]]
        if same:
            k = np.array(same)
            iw = np.clip(np.minimum(b[k, 2], b[i, 2]) - np.maximum(b[k, 0], b[i, 0]), 0, None)
            ih = np.clip(np.minimum(b[k, 3], b[i, 3]) - np.maximum(b[k, 1], b[i, 1]), 0, None)
            smaller = np.minimum(areas[k], areas[i])
            with np.errstate(divide="ignore", invalid="ignore"):
                covered = np.where(smaller > 0, iw * ih / smaller, 1.0)
            if (covered > cover).any():
                continue
        kept.append(i)
    return np.array(kept, dtype=np.intp)


@dataclass(frozen=True)
class Tiles:
    """A payload of several input tensors for one image, one per window: a runner invokes the
    model on each in turn and hands back the list of their outputs (hw/runtime.run_payload)."""

    tensors: Tuple[np.ndarray, ...]
