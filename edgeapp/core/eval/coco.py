"""COCO's own evaluation of detections and keypoints (the `eval` extra): mAP50-95, mAP50 and
per-class AP of boxes, OKS AP of poses, exactly as pycocotools computes them.

Through faster-coco-eval (Apache-2.0, Python 3.10+), which reproduces pycocotools' numbers
(the tests compare them with pycocotools' own) about five times faster, so the metric stays a
small part of an `eval` run; pycocotools (BSD-2-Clause) where faster-coco-eval has no wheels
(Python 3.9).

Its defaults stand (maxDets 1/10/100, the OKS sigmas of COCO's 17 keypoints), so anyone can
recompute the numbers from the results list `eval --save-predictions` writes.
"""

from __future__ import annotations

import contextlib
import io
import sys
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import numpy as np
from typing_extensions import TypedDict

from edgeapp.errors import MissingDependency

if TYPE_CHECKING:
    from edgeapp.core.eval.schema import CocoTruth


class BoxMetrics(TypedDict, total=False):
    """COCO box AP: map (IoU 0.50:0.95), map50, AP50-95 per class by name; `*_model_classes`:
    over the model's classes only (data with classes the model has not)."""
    map: float
    map50: float
    per_class: Dict[str, float]
    map_model_classes: float
    map50_model_classes: float


class KeypointMetrics(TypedDict):
    oks_ap: float  # AP at OKS 0.50:0.95
    oks_ap50: float

INSTALL = "pip install 'edgeapp[eval]'"
OLDEST = (3, 9)  # the oldest Python the eval extra installs an evaluator on (pycocotools)


def cocotools():
    """(COCO, COCOeval) of faster-coco-eval, else pycocotools, or MissingDependency saying
    what to do here (`missing`)."""
    try:
        from faster_coco_eval import COCO
        from faster_coco_eval import COCOeval_faster as COCOeval
    except ImportError:
        try:
            from pycocotools.coco import COCO
            from pycocotools.cocoeval import COCOeval
        except ImportError:
            raise MissingDependency(missing()) from None
    return COCO, COCOeval


def available() -> bool:
    """Whether COCO's evaluation can run here."""
    try:
        cocotools()
    except MissingDependency:
        return False
    return True


def missing(python: Tuple[int, int] = tuple(sys.version_info[:2])) -> str:  # type: ignore[assignment]
    """Why detection and pose metrics cannot be computed here, and the way that works on this
    `python`: the eval extra where it brings an evaluator; below 3.9 (the Coral Dev Board's
    3.7) predictions saved here and measured on any machine that has one."""
    if tuple(python) >= OLDEST:
        return f"detection and pose metrics need faster-coco-eval (or pycocotools): {INSTALL}"
    return ("detection and pose metrics need faster-coco-eval or pycocotools, which the eval "
            f"extra installs only on Python {OLDEST[0]}.{OLDEST[1]}+ (this is "
            f"{python[0]}.{python[1]}): add --save-predictions DIR here, then run `edgeapp eval "
            "--predictions DIR/MODEL.json --data DATA` on a machine with Python "
            f"{OLDEST[0]}.{OLDEST[1]}+ (docs/eval.md)")


def _ground_truth(gt: dict):
    COCO, _ = cocotools()
    coco = COCO()
    coco.dataset = gt
    with contextlib.redirect_stdout(io.StringIO()):  # "creating index..." is pycocotools' chatter
        coco.createIndex()
    return coco


def coco_evaluate(gt: CocoTruth, results: List[dict], iou_type: str = "bbox",
             image_ids: Optional[Sequence] = None) -> Optional[object]:
    """The accumulated COCOeval of `results` against `gt` on `image_ids` (default: all), or
    None when there is no result at all (pycocotools cannot load an empty list)."""
    _, COCOeval = cocotools()
    truth = _ground_truth(gt)
    if not results:
        return None
    with contextlib.redirect_stdout(io.StringIO()):
        found = truth.loadRes([dict(r) for r in results])  # loadRes adds fields to what it gets
        ev = COCOeval(truth, found, iou_type)
        if image_ids is not None:
            ev.params.imgIds = sorted(image_ids)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev


def box_metrics(gt: CocoTruth, results: List[dict], image_ids: Optional[Sequence] = None) -> BoxMetrics:
    """map (AP at IoU 0.50:0.95), map50 and per_class AP50-95 by category name: pycocotools'
    stats[0], stats[1] and its precision array per category (-1: no ground truth, left out)."""
    return box_summary(coco_evaluate(gt, results, "bbox", image_ids), gt)


def box_summary(ev, gt: CocoTruth) -> BoxMetrics:
    """box_metrics of an accumulated COCOeval (None: no result at all)."""
    names = {c["id"]: c["name"] for c in gt.get("categories", [])}
    if ev is None:
        return {"map": 0.0, "map50": 0.0, "per_class": {}}
    return {"map": _stat(ev.stats[0]), "map50": _stat(ev.stats[1]),
            "per_class": per_class_ap(ev, names)}


def means_over(ev, categories: Sequence) -> Optional[tuple]:
    """(AP50-95, AP50) averaged over `categories` only, as stats[0] and stats[1] average over
    every category with ground truth (all areas, the largest maxDets); None when none of them
    has ground truth."""
    if ev is None:
        return None
    precision = ev.eval["precision"]  # [T iou, R recall, K category, A area, M maxDets]
    keep = [k for k, cat in enumerate(ev.params.catIds) if cat in set(categories)]
    p = precision[:, :, keep, 0, -1]
    if not (p > -1).any():
        return None
    p50 = p[0]
    return float(np.mean(p[p > -1])), float(np.mean(p50[p50 > -1])) if (p50 > -1).any() else 0.0


def keypoint_metrics(gt: CocoTruth, results: List[dict],
                     image_ids: Optional[Sequence] = None) -> KeypointMetrics:
    """oks_ap (AP at OKS 0.50:0.95) and oks_ap50: pycocotools' keypoint stats[0] and stats[1]."""
    ev = coco_evaluate(gt, results, "keypoints", image_ids)
    if ev is None:
        return {"oks_ap": 0.0, "oks_ap50": 0.0}
    return {"oks_ap": _stat(ev.stats[0]), "oks_ap50": _stat(ev.stats[1])}


def per_class_ap(ev, names: Dict[int, str]) -> Dict[str, float]:
    """AP50-95 of each category with ground truth (all areas, the largest maxDets)."""
    precision = ev.eval["precision"]  # [T iou, R recall, K category, A area, M maxDets]
    out = {}
    for k, cat in enumerate(ev.params.catIds):
        p = precision[:, :, k, 0, -1]
        p = p[p > -1]
        if p.size:
            out[str(names.get(cat, cat))] = float(np.mean(p))
    return out


def pr_curves(ev, names: Dict[int, str]) -> Dict[str, np.ndarray]:
    """Precision at COCO's 101 recall points, IoU 0.5, per category with ground truth (plots)."""
    if ev is None:
        return {}
    precision = ev.eval["precision"]
    out = {}
    for k, cat in enumerate(ev.params.catIds):
        p = precision[0, :, k, 0, -1]
        if (p > -1).any():
            out[str(names.get(cat, cat))] = np.clip(p, 0, None)
    return out


def _stat(value: float) -> float:
    """pycocotools' -1 (nothing to measure) as 0.0, so metrics always compare."""
    return max(0.0, float(value))
