"""What a camera output reads of its source's running statistics (`on_frame(stats=...)`).

The camera loop (flows/camera/loop.CameraStats) passes its own statistics, updated as frames
go; the outputs (live view, clips, metrics) sit below it, so they name what they read here.
"""

from __future__ import annotations

from typing import List

from typing_extensions import Protocol


class StreamStats(Protocol):
    """One source's statistics so far, as the loop keeps them."""

    source: str
    policy: str  # "newest" (drop stale frames) or "every" (every frame)
    captured: int
    processed: int
    dropped: int
    reconnects: int
    stop: str  # "" while running
    inference_ms: List[float]
    frame_ms: List[float]
