"""Counting lines and zones over tracked objects: parsing them as users write them, and the
geometry (which side of a line a point is on, whether a point is inside a polygon).

A line is `NAME:x1,y1,x2,y2`, a zone `NAME:x1,y1,x2,y2,x3,y3,...` (3 points or more), in the
source's pixels or, when every number is between 0 and 1, in fractions of its width and height.
An object is where its box's centre is.

Directions: facing from a line's first point to its second, `in` is crossing from its left to
its right, as seen on the screen (image y grows downwards): a line drawn left to right counts
objects moving down as `in`, and up as `out`. A side is taken only when the centre is more than
`margin` pixels from the line (2 px, or 1% of the line's length if longer), so a box jittering
on the line does not count.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from edgeapp.errors import UsageError

Point = Tuple[float, float]
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")


@dataclass(frozen=True)
class Line:
    name: str
    points: Tuple[Point, Point]
    fractions: bool = False  # given in 0..1 of the frame

    def at(self, width: int, height: int) -> "Line":
        """This line in a frame's pixels."""
        return Line(self.name, _scaled(self.points, width, height, self.fractions))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Zone:
    name: str
    points: Tuple[Point, ...]
    fractions: bool = False

    def at(self, width: int, height: int) -> "Zone":
        return Zone(self.name, _scaled(self.points, width, height, self.fractions))


def _scaled(points: Sequence[Point], width: int, height: int, fractions: bool) -> tuple:
    if not fractions:
        return tuple(points)
    return tuple((x * width, y * height) for x, y in points)


def _parse(text: str, flag: str, what: str) -> tuple[str, List[Point], bool]:
    """NAME:numbers -> (name, points, fractions); a UsageError naming the flag otherwise."""
    name, sep, rest = text.partition(":")
    if not sep or not _NAME.match(name.strip()):
        raise UsageError(f"{flag} {text!r}: write NAME:{what} (NAME of letters, digits, _ . -)")
    try:
        values = [float(v) for v in rest.replace(" ", "").split(",") if v != ""]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: the coordinates must be numbers: NAME:{what}") from None
    if len(values) % 2 or any(not math.isfinite(v) for v in values):
        raise UsageError(f"{flag} {text!r}: coordinates come in x,y pairs: NAME:{what}")
    if any(v < 0 for v in values):
        raise UsageError(f"{flag} {text!r}: a coordinate is negative (outside the frame)")
    fractions = all(v <= 1.0 for v in values)
    points = [(values[i], values[i + 1]) for i in range(0, len(values), 2)]
    return name.strip(), points, fractions


def parse_line(text: str) -> Line:
    """`--count-line NAME:x1,y1,x2,y2`."""
    name, points, fractions = _parse(text, "--count-line", "x1,y1,x2,y2")
    if len(points) != 2:
        raise UsageError(f"--count-line {text!r}: a line is two points, NAME:x1,y1,x2,y2 "
                         f"({len(points)} given)")
    if points[0] == points[1]:
        raise UsageError(f"--count-line {text!r}: its two points are the same")
    return Line(name, (points[0], points[1]), fractions)


def parse_zone(text: str) -> Zone:
    """`--zone NAME:x1,y1,x2,y2,x3,y3,...`."""
    name, points, fractions = _parse(text, "--zone", "x1,y1,x2,y2,x3,y3,...")
    if len(points) < 3:
        raise UsageError(f"--zone {text!r}: a zone is a polygon of 3 points or more "
                         f"({len(points)} given)")
    if abs(polygon_area(points)) < 1e-9:
        raise UsageError(f"--zone {text!r}: its points enclose no area")
    return Zone(name, tuple(points), fractions)


def check_names(lines: Sequence[Line], zones: Sequence[Zone]) -> None:
    """Each line and zone has its own name (they key the counts and the MQTT entities)."""
    seen: set = set()
    for flag, item in [("--count-line", x) for x in lines] + [("--zone", z) for z in zones]:
        if item.name in seen:
            raise UsageError(f"{flag} {item.name}: the name is used twice; give each line and "
                             "zone its own")
        seen.add(item.name)


def check_inside(items: Sequence, width: int, height: int) -> None:
    """Pixel lines and zones must lie in a frame of this size."""
    for item in items:
        flag = "--count-line" if isinstance(item, Line) else "--zone"
        if item.fractions:
            continue
        for x, y in item.points:
            if x > width or y > height:
                raise UsageError(f"{flag} {item.name}: point ({x:g}, {y:g}) is outside the "
                                 f"{width}x{height} frame (give pixels of the source, or 0..1 "
                                 "fractions of it)")


def polygon_area(points: Sequence[Point]) -> float:
    """Signed area (shoelace)."""
    return 0.5 * sum(x0 * y1 - x1 * y0 for (x0, y0), (x1, y1)
                     in zip(points, list(points[1:]) + [points[0]]))


def inside(point: Point, polygon: Sequence[Point]) -> bool:
    """Whether `point` is inside `polygon` (even-odd rule; the edge counts as inside for the
    lower-left edges, as the ray casting rule has it)."""
    x, y = point
    result = False
    n = len(polygon)
    for i in range(n):
        (x0, y0), (x1, y1) = polygon[i], polygon[(i + 1) % n]
        if (y0 > y) != (y1 > y):
            cross_x = x0 + (y - y0) * (x1 - x0) / (y1 - y0)
            if x < cross_x:
                result = not result
    return result


def side(point: Point, line: Line) -> int:
    """+1 right of the line (facing from its first point to its second, on screen), -1 left,
    0 within the margin of it or beyond its ends."""
    (x1, y1), (x2, y2) = line.points
    dx, dy = x2 - x1, y2 - y1
    length = math.hypot(dx, dy)
    px, py = point[0] - x1, point[1] - y1
    along = (px * dx + py * dy) / (length * length)
    if along < 0.0 or along > 1.0:
        return 0  # beyond the segment's ends: not a crossing of this line
    distance = (dx * py - dy * px) / length
    margin = max(2.0, 0.01 * length)
    if abs(distance) <= margin:
        return 0
    return 1 if distance > 0 else -1


def crossing(before: Optional[int], now: int) -> Optional[str]:
    """The direction of a move from side `before` to side `now` (sides as `side` gives them,
    0s already skipped), or None."""
    if before is None or now == 0 or before == now:
        return None
    return "in" if now > 0 else "out"


def centre(bbox: Sequence[float]) -> Point:
    return ((bbox[0] + bbox[2]) / 2.0, (bbox[1] + bbox[3]) / 2.0)
