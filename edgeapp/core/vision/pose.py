"""Pose estimation post-processing: pure functions over output arrays.

MoveNet single-pose (lightning 192, thunder 256) gives one tensor [1, 1, 17, 3]: for each of
the 17 COCO keypoints (y, x, score), y and x normalized to the model input (0..1). The image
got into that input by a `boxes.Fit`, so a keypoint goes back to the original image's pixels
exactly as a detection box does.

PoseNet models end in Coral's `PosenetDecoderOp` custom op: four outputs, keypoints [1, N, 17,
2] as (y, x) in input pixels, keypoint scores [1, N, 17], pose scores [1, N] and the count [1].
No stock TFLite runtime has that op; `posenet_poses` decodes its outputs when one does.
"""

from __future__ import annotations

from typing import List, NamedTuple, Sequence

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core.vision.boxes import BBox, Fit, to_original
from edgeapp.core.vision.classify import dequantize


class KeypointItem(TypedDict):
    name: str
    x: float  # pixels, to 0.1
    y: float
    score: float


class PoseItem(TypedDict):
    """A pose in a record: its score and the keypoints that scored at least the threshold."""
    score: float
    keypoints: List[KeypointItem]


KEYPOINTS = ("nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder",
             "right_shoulder", "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip",
             "right_hip", "left_knee", "right_knee", "left_ankle", "right_ankle")
# Limbs drawn between keypoints (indices into KEYPOINTS): face, arms, torso, legs.
SKELETON = ((0, 1), (0, 2), (1, 3), (2, 4), (5, 7), (7, 9), (6, 8), (8, 10), (5, 6), (5, 11),
            (6, 12), (11, 12), (11, 13), (13, 15), (12, 14), (14, 16))
POSENET_OP = "PosenetDecoderOp"


class Keypoint(NamedTuple):
    name: str
    x: float  # original image pixels
    y: float
    score: float


class Pose(NamedTuple):
    score: float
    keypoints: list[Keypoint]  # all 17, in KEYPOINTS order


def is_pose_output(shape: Sequence[int]) -> bool:
    """MoveNet single-pose's [1, 1, 17, 3]."""
    return tuple(shape) == (1, 1, len(KEYPOINTS), 3)


def keypoints_to_original(yx: np.ndarray, fit: Fit) -> np.ndarray:
    """(N, 2) normalized (y, x) to (N, 2) original-image (x, y) pixels, clipped to the image."""
    out = np.empty((len(yx), 2), dtype=np.float64)
    for i, (y, x) in enumerate(np.asarray(yx, dtype=np.float64)):
        b = to_original(BBox(x, y, x, y), fit)
        out[i] = (b.xmin, b.ymin)
    return out


def movenet_pose(output: np.ndarray, fit: Fit, scale: float = 0.0, zero_point: int = 0) -> Pose:
    """The one pose of a MoveNet output; its score is the mean keypoint score (MoveNet gives
    none of its own)."""
    kp = dequantize(np.asarray(output), scale, zero_point).reshape(len(KEYPOINTS), 3)
    xy = keypoints_to_original(kp[:, :2], fit)
    scores = kp[:, 2].astype(np.float64)
    points = [Keypoint(n, float(x), float(y), float(s))
              for n, (x, y), s in zip(KEYPOINTS, xy, scores)]
    return Pose(float(scores.mean()), points)


def posenet_poses(outputs: Sequence[np.ndarray], fit: Fit) -> list[Pose]:
    """The poses of a PosenetDecoderOp's four float outputs (keypoints in input pixels)."""
    yx, kscores, pscores, count = (np.asarray(o, dtype=np.float64) for o in outputs[:4])
    n_kp = len(KEYPOINTS)
    yx = yx.reshape(-1, n_kp, 2)
    kscores = kscores.reshape(-1, n_kp)
    pscores = pscores.reshape(-1)
    n = int(np.clip(np.rint(count.reshape(-1)[0]), 0, min(len(yx), len(pscores))))
    poses = []
    for i in range(n):
        norm = yx[i] / np.array([fit.dst_h, fit.dst_w], dtype=np.float64)
        xy = keypoints_to_original(norm, fit)
        poses.append(Pose(float(pscores[i]), [Keypoint(name, float(x), float(y), float(s))
                                              for name, (x, y), s in zip(KEYPOINTS, xy, kscores[i])]))
    return poses


def pose_fields(poses: Sequence[Pose], threshold: float = 0.0) -> List[PoseItem]:
    """The JSON form of poses: keypoints scoring at least `threshold`, pixels to 0.1; a pose
    with no keypoint left is dropped."""
    out: List[PoseItem] = []
    for p in poses:
        kept: List[KeypointItem] = [{"name": k.name, "x": round(k.x, 1), "y": round(k.y, 1), "score": round(k.score, 6)}
                for k in p.keypoints if k.score >= threshold]
        if kept:
            out.append({"score": round(p.score, 6), "keypoints": kept})
    return out


def skeleton_lines(keypoints: Sequence[dict]) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """The limbs whose both ends are among `keypoints` (JSON form): ((x0, y0), (x1, y1))."""
    at = {k["name"]: (k["x"], k["y"]) for k in keypoints}
    return [(at[KEYPOINTS[a]], at[KEYPOINTS[b]]) for a, b in SKELETON
            if KEYPOINTS[a] in at and KEYPOINTS[b] in at]


def posenet_refusal(path: str) -> str:
    """Why a PoseNet model cannot run here, in one line."""
    return (f"{path} is a PoseNet model: it ends in Coral's {POSENET_OP} custom op, which this "
            "TFLite runtime does not have; use a MoveNet model (output [1, 1, 17, 3]) with "
            "`edgeapp pose`")
