"""Regions that moved: where a detector needs to look in a video from a still camera.

A frame is compared with a running average of the frames before it (the background), on a
copy shrunk `SHRINK` times (noise averages out, and it costs little); the pixels where a colour
channel changed by more than `THRESHOLD` levels (so a red object on a grey of the same
brightness moves too) are grouped into boxes, padded by `PAD` pixels and merged while they
overlap, then each is grown to at least the model's input side (so the object reaches the model
at its native resolution, not shrunk with the whole frame: Frigate's motion regions; grown
windows that overlap stay apart, as tiles do). The detector then runs on each region (windows, as `--tiles` has them:
core/vision/tiles.py), and the boxes of all regions are merged as tiles' are.

Nothing moved: no region, no inference. The first frame, and a frame where most of the picture
changed (the camera moved, the light switched), is the whole frame. An object that stops
becomes background after a few frames and is not looked for until it moves again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence

from edgeapp.core.vision.tiles import Window

if TYPE_CHECKING:
    import numpy as np

THRESHOLD = 25  # levels a pixel's colour channel must change by to count as motion
SHRINK = 4  # the difference is taken on a frame this many times smaller
LEARN = 0.2  # the background's running average takes this much of each frame
PAD = 16  # pixels added around a moving blob (its edges move less than its middle)
WHOLE = 0.5  # regions covering more of the frame than this: the whole frame instead
MAX_REGIONS = 8  # more: the whole frame (one inference is cheaper than that many)


@dataclass(frozen=True)
class MotionFrame:
    """A camera frame with the regions of it that moved (in capture order, before the frames
    go to the devices): what the detector runs on with --motion."""

    image: np.ndarray
    regions: List[Window]  # [] nothing moved; [(0, 0, w, h)] the whole frame


def grow(box: Window, side: int, width: int, height: int) -> Window:
    """`box` grown around its centre to at least `side` x `side` (or the frame, if smaller)."""
    x0, y0, x1, y1 = box
    w, h = min(max(x1 - x0, side), width), min(max(y1 - y0, side), height)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    nx0 = int(round(min(max(cx - w / 2, 0), width - w)))
    ny0 = int(round(min(max(cy - h / 2, 0), height - h)))
    return (nx0, ny0, nx0 + w, ny0 + h)


def merge_overlapping(boxes: Sequence[Window]) -> List[Window]:
    """Boxes that overlap (or touch) replaced by the box around them, until none do."""
    out = [tuple(b) for b in boxes]
    merged = True
    while merged:
        merged = False
        for i in range(len(out)):
            for j in range(i + 1, len(out)):
                a, b = out[i], out[j]
                if a[0] <= b[2] and b[0] <= a[2] and a[1] <= b[3] and b[1] <= a[3]:
                    out[i] = (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))
                    del out[j]
                    merged = True
                    break
            if merged:
                break
    return sorted(out, key=lambda b: (b[1], b[0]))  # type: ignore[return-value]


def regions_of(mask: np.ndarray, scale: int, width: int, height: int, side: int,
               pad: int = PAD) -> List[Window]:
    """The windows of the frame to run the detector on, from a motion mask `scale` times
    smaller than the frame: blobs padded and merged, then grown to `side`; the whole frame when they
    are too many or cover most of it."""
    import cv2
    import numpy as np

    mask = cv2.dilate(mask.astype(np.uint8), np.ones((3, 3), np.uint8), iterations=2)
    count, _labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    blobs = [(max(0, x * scale - pad), max(0, y * scale - pad),
              min(width, (x + w) * scale + pad), min(height, (y + h) * scale + pad))
             for x, y, w, h, _area in stats[1:count].tolist()]
    # grown after merging, and not merged again: grown windows that overlap stay apart (their
    # boxes are merged as tiles' are), where their union would shrink the objects again
    boxes = [grow(b, side, width, height) for b in merge_overlapping(blobs)]
    covered = sum((b[2] - b[0]) * (b[3] - b[1]) for b in boxes)
    if len(boxes) > MAX_REGIONS or covered > WHOLE * width * height:
        return [(0, 0, width, height)]
    return boxes


class MotionRegions:
    """The regions that moved in each frame of one video, against the background of the
    frames before it. Call it with the frames in order (it is safe from several threads, but
    the background is only as good as the order it sees)."""

    def __init__(self, side: int, threshold: float = THRESHOLD, shrink: int = SHRINK,
                 learn: float = LEARN) -> None:
        self.side, self.threshold, self.shrink, self.learn = int(side), threshold, max(1, shrink), learn
        self._background: Optional[np.ndarray] = None
        self._lock = threading.Lock()

    def __call__(self, frame: np.ndarray) -> List[Window]:
        """The windows of `frame` (BGR or grey) to run the detector on; [] when nothing moved."""
        import cv2
        import numpy as np

        height, width = frame.shape[:2]
        small = cv2.resize(frame, (max(1, width // self.shrink), max(1, height // self.shrink)),
                           interpolation=cv2.INTER_AREA).astype(np.float32)
        with self._lock:
            background = self._background
            if background is None or background.shape != small.shape:
                self._background = small
                return [(0, 0, width, height)]
            change = np.abs(small - background)
            mask = (change.max(axis=2) if change.ndim == 3 else change) > self.threshold
            self._background = background * (1 - self.learn) + small * self.learn
        if not mask.any():
            return []
        return regions_of(mask, self.shrink, width, height, self.side)
