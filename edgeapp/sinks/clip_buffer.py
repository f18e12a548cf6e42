"""The clips' memory: the last `--pre` seconds of annotated frames, kept as JPEG (DeGirum's
ClipSavingAnalyzer keeps raw frames; JPEG at quality 80 is 10 to 30 times smaller), and the
frames of a clip being collected until its post-roll ends.

The bound, in frames: `ring_frames(pre, fps)` = ceil(pre x fps) + 2 (the frame `pre` seconds
before the newest one, the newest one, and one for a timestamp that falls between frames). In
bytes, at most

    memory = (ceil((pre + post) x fps) + 2) x J  +  QUEUE x W x H x 3

where J is the mean JPEG size of a frame (about W x H x 0.07 bytes for a 1280x720 camera scene
at quality 80; `jpeg_bytes` measures it), the first term the ring plus an open clip's post-roll
(a clip shares the ring's JPEG bytes, it does not copy them), and the second the raw frames
waiting for the encoder (sinks/clips.py's QUEUE). docs/alerts.md states the figure for 720p;
scripts/bench_alerts.py checks peak RSS against it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional

QUALITY = 80  # JPEG quality of buffered frames


@dataclass
class Buffered:
    """One frame as the ring keeps it: its index and timestamp (s), the JPEG, and the score of
    each track it shows (for the snapshot of a track's best frame) with their boxes."""

    index: int
    timestamp: float
    jpeg: bytes
    tracks: Dict[int, tuple] = field(default_factory=dict)  # track id -> (score, bbox)


def ring_frames(pre: float, fps: float) -> int:
    """How many frames the ring keeps for `pre` seconds at `fps`."""
    return int(math.ceil(max(0.0, pre) * max(fps, 1e-6))) + 2


def memory_bound(pre: float, post: float, fps: float, jpeg: float, width: int, height: int,
                 queue: int) -> int:
    """The documented bound in bytes (see the module doc)."""
    return int((math.ceil((pre + post) * fps) + 2) * jpeg + queue * width * height * 3)


class Ring:
    """The newest frames, at most `frames` of them and none older than `pre` seconds before
    the newest beyond the one frame at or before that instant (a clip starts at least `pre`
    seconds before its trigger). Used by one thread (the clips' encoder)."""

    def __init__(self, pre: float, frames: int) -> None:
        self.pre = pre
        self.frames: Deque[Buffered] = deque(maxlen=frames)
        self.bytes = 0
        self.peak_bytes = 0

    def add(self, item: Buffered) -> None:
        if len(self.frames) == self.frames.maxlen:
            self.bytes -= len(self.frames[0].jpeg)
        self.frames.append(item)
        self.bytes += len(item.jpeg)
        limit = item.timestamp - self.pre
        while len(self.frames) > 1 and self.frames[1].timestamp <= limit + 1e-6:
            self.bytes -= len(self.frames.popleft().jpeg)  # its successor is old enough
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def since(self, t: float) -> List[Buffered]:
        """The frames from the last one at or before `t` (or the oldest kept) on."""
        items = list(self.frames)
        start = 0
        for i, item in enumerate(items):
            if item.timestamp <= t + 1e-6:
                start = i
        return items[start:]

    def best(self, track_ids: List[int]) -> Optional[Buffered]:
        """The frame where these tracks score best (the newest on ties), if any shows them."""
        best, best_score = None, -1.0
        for item in self.frames:
            scores = [item.tracks[t][0] for t in track_ids if t in item.tracks]
            if scores and max(scores) >= best_score:
                best, best_score = item, max(scores)
        return best


def jpeg_bytes(frames: List[Buffered]) -> float:
    """The mean JPEG size of these frames (J in the bound)."""
    return sum(len(f.jpeg) for f in frames) / len(frames) if frames else 0.0
