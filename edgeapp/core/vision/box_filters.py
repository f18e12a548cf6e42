"""Object filters over detected boxes, pure (Frigate's min_area/max_area, min_ratio/max_ratio):
boxes too small, too large, too flat or too tall for what is watched go before anything counts
them. Int8 models flicker more than float ones, and a leaf's one-frame box is usually small or
oddly shaped.

An area is in pixels of the image, or a fraction of its area when the value is at most 1 (0.01:
a box covering 1% of the frame). A ratio is the box's width over its height.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from edgeapp.errors import UsageError

NAMES = ("min_area", "max_area", "min_ratio", "max_ratio")


@dataclass(frozen=True)
class BoxFilters:
    min_area: Optional[float] = None
    max_area: Optional[float] = None
    min_ratio: Optional[float] = None
    max_ratio: Optional[float] = None

    @property
    def active(self) -> bool:
        return any(getattr(self, n) is not None for n in NAMES)

    def check(self) -> "BoxFilters":
        """Bounds that could keep nothing are a usage error (one line, naming the flags)."""
        for name in NAMES:
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise UsageError(f"--{name.replace('_', '-')} must be above 0, not {value:g}")
        for low, high in (("min_area", "max_area"), ("min_ratio", "max_ratio")):
            a, b = getattr(self, low), getattr(self, high)
            same_unit = low == "min_ratio" or (a is not None and b is not None and (a <= 1) == (b <= 1))
            if a is not None and b is not None and same_unit and a > b:
                raise UsageError(f"--{low.replace('_', '-')} {a:g} is above "
                                 f"--{high.replace('_', '-')} {b:g}: no box could pass")
        return self


def area_in_pixels(value: Optional[float], width: int, height: int) -> Optional[float]:
    """An area as given (pixels, or a fraction of the frame when at most 1) in pixels."""
    if value is None:
        return None
    return value * width * height if value <= 1.0 else value


def filter_boxes(objects: Sequence[dict], width: int, height: int,
                 filters: BoxFilters) -> Tuple[List[dict], Dict[str, int]]:
    """(the objects kept, how many each filter removed). A box is counted against the first
    filter it fails, in the order min_area, max_area, min_ratio, max_ratio. `objects` carry a
    `bbox` [xmin, ymin, xmax, ymax] in the image's pixels."""
    lo = area_in_pixels(filters.min_area, width, height)
    hi = area_in_pixels(filters.max_area, width, height)
    removed = {n: 0 for n in NAMES if getattr(filters, n) is not None}
    kept = []
    for o in objects:
        x0, y0, x1, y1 = o["bbox"]
        w, h = max(0.0, x1 - x0), max(0.0, y1 - y0)
        area, ratio = w * h, (w / h if h > 0 else float("inf"))
        tests = (("min_area", lo is not None and area < lo), ("max_area", hi is not None and area > hi),
                 ("min_ratio", filters.min_ratio is not None and ratio < filters.min_ratio),
                 ("max_ratio", filters.max_ratio is not None and ratio > filters.max_ratio))
        failed = next((name for name, bad in tests if bad), None)
        if failed is None:
            kept.append(o)
        else:
            removed[failed] += 1
    return kept, removed
