"""Which task (and so which command) a model's outputs are for, from their shapes alone.

classify: one score vector; detect: the four outputs of the detection post-process; pose:
MoveNet's [1, 1, 17, 3] or a PoseNet decoder op; segment: [1, H, W, C] scores or a [1, H, W]
class map. `convert` stores the guess in the sidecar, `camera` uses it when --task is not
given, and `classify` names the right command when it is handed another task's model.
"""

from __future__ import annotations

from typing import Optional, Sequence

from edgeapp.core.pose import POSENET_OP, is_pose_output
from edgeapp.core.segment import is_segmentation_output


def output_task(shapes: Sequence[Sequence[int]], op_names: Sequence[str] = ()) -> Optional[str]:
    """The task these output shapes (and operator names) are for; None when none fits."""
    if POSENET_OP in op_names:
        return "pose"
    if len(shapes) == 4:
        return "detect"
    if len(shapes) != 1:
        return None
    if is_pose_output(shapes[0]):
        return "pose"
    if is_segmentation_output(shapes[0]):
        return "segment"
    return "classify"
