"""--motion in the camera: each frame goes to the devices with the regions of it that moved.

The regions are found here, in capture order, before the frames are shared out (several Edge
TPUs run frames side by side, so the task's own threads see them out of order); the detector
then runs on those regions only (tasks/detect.py, core/vision/motion.py).
"""

from __future__ import annotations

from typing import Any

from edgeapp.core.vision.motion import MotionFrame, MotionRegions
from edgeapp.execution.runner import Runner


class MotionRunner:
    """A runner whose frames carry their moving regions; everything else is the runner's."""

    def __init__(self, runner: Runner, side: int) -> None:
        self.runner = runner
        self.regions = MotionRegions(side)

    def submit(self, key: Any, frame: Any) -> None:
        self.runner.submit(key, MotionFrame(frame, self.regions(frame)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)
