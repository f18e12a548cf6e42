"""--motion in the camera: each frame goes to the devices with the regions of it that moved.

The regions are found here, in capture order, before the frames are shared out (several Edge
TPUs run frames side by side, so the task's own threads see them out of order); the detector
then runs on those regions only (tasks/detect.py, core/vision/motion.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Hashable, Optional

from edgeapp.core.vision.motion import MotionFrame, MotionRegions
from edgeapp.execution.runner import Runner

if TYPE_CHECKING:
    import numpy as np


class MotionRunner:
    """A runner whose frames carry their moving regions; everything else is the runner's.
    `stream_of(key)`: which source a submitted frame is of (a run of several sources), each
    source's motion found against its own previous frames. Keys are the caller's, passed on."""

    def __init__(self, runner: Runner, side: int,
                 stream_of: Optional[Callable[[object], Hashable]] = None) -> None:
        self.runner, self.side, self.stream_of = runner, side, stream_of
        self.regions: Dict[Optional[Hashable], MotionRegions] = {}

    def submit(self, key: object, frame: np.ndarray) -> None:
        stream = self.stream_of(key) if self.stream_of is not None else None
        regions = self.regions.get(stream)
        if regions is None:
            regions = self.regions[stream] = MotionRegions(self.side)
        self.runner.submit(key, MotionFrame(frame, regions(frame)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)
