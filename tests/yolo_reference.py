"""Comparing detections with the references in tests/fixtures/yolo (Ultralytics' decoding of
each file on the outputs of ai-edge-litert's default kernels).

With that runtime the comparison is exact: the same number of boxes, in order, same class,
IoU >= 0.9, scores within one output step. Another runtime's kernels (tflite-runtime 2.14 on
Python 3.9) round some outputs a step or two differently, which can move a box across the 0.25
threshold; there every box clear of the threshold must still be found on both sides.
"""

from __future__ import annotations

from typing import Sequence

from conftest import default_runtime

CONF = 0.25
SLACK_STEPS = 10  # output steps another runtime's kernels may move a score (7 seen: tflite-runtime 2.14)
NMS_FLIP = 0.5  # overlap at which rounding may decide which of two boxes NMS keeps (limit 0.7)


def exact_runtime() -> bool:
    return default_runtime()[0] == "ai-edge-litert"


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def assert_same_detections(got: list, expected: list, step: float, where: str = "") -> None:
    """`got`: (class id, score, [x0, y0, x1, y1]) best first; `expected`: the JSON records."""
    if exact_runtime():
        assert len(got) == len(expected), (where, got, expected)
        for (cid, score, box), ref in zip(got, expected):
            assert cid == ref["class"], (where, cid, ref)
            assert iou(box, ref["box"]) >= 0.9, (where, box, ref)
            assert abs(score - ref["score"]) <= step * 1.0001, (where, score, ref)
        return
    tol = SLACK_STEPS * step
    theirs = [(r["class"], r["score"], r["box"]) for r in expected]
    _each_found(theirs, got, tol, where)
    _each_found(got, theirs, tol, where)


def _each_found(these: list, those: list, tol: float, where: str) -> None:
    """Every box of `these` clear of the threshold is among `those` (same class, IoU >= 0.9,
    score within `tol`), or NMS may have kept a neighbour instead: a same-class box of `those`
    overlapping it beyond NMS_FLIP (near the IoU limit, a step of rounding moves which one
    stays)."""
    for cid, score, box in (b for b in these if b[1] >= CONF + tol):
        same = [b for b in those if b[0] == cid and iou(b[2], box) >= 0.9]
        if same:
            assert min(abs(b[1] - score) for b in same) <= tol, (where, box, score, same)
        else:
            assert any(b[0] == cid and iou(b[2], box) > NMS_FLIP for b in those), (where, box, those)
