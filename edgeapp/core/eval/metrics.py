"""Accuracy on labelled data, the plain numpy part: top-1/top-5 and per-class accuracy of a
classifier, mIoU, pixel accuracy and per-class IoU of a segmenter, and matching a data set's
class names to a model's labels.

Detection mAP and pose OKS AP are COCO's own evaluation (core/eval/coco.py, pycocotools).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core.eval.coco import BoxMetrics, KeypointMetrics


class ClassificationMetrics(TypedDict, total=False):
    """Top-1/top-5 accuracy, per class top-1 by name; `*_model_classes`: without the images
    whose class the model has not (when there are some)."""
    top1: float
    top5: float
    per_class: Dict[str, float]
    top1_model_classes: float
    top5_model_classes: float


class SegmentationMetrics(TypedDict):
    miou: float
    pixel_accuracy: float
    per_class: Dict[str, float]  # IoU by class name


# What a task's scorer measures (tasks/base.Scorer.metrics): one of these, by the task
TaskMetrics = Union[ClassificationMetrics, BoxMetrics, KeypointMetrics, SegmentationMetrics]

IGNORE = 255  # a segmentation mask's "not labelled" value, left out of every count


def norm_name(name: object) -> str:
    """How class names are compared: case and surrounding spaces do not count."""
    return str(name).strip().lower()


def match_names(model_labels: Optional[Dict[int, str]], names: Dict[object, str]
                ) -> Tuple[Dict[int, object], List[str]]:
    """({model class id: data class key}, data class names the model does not know), matching
    names case-insensitively. Without model labels, the model's class i is the data's i-th
    class (keys in order), as a YOLO export's contiguous ids are."""
    keys = list(names)
    if not model_labels:
        return {i: k for i, k in enumerate(keys)}, []
    by_name: Dict[str, object] = {}
    for k in keys:
        by_name.setdefault(norm_name(names[k]), k)
    mapping = {int(i): by_name[norm_name(n)] for i, n in model_labels.items()
               if norm_name(n) in by_name}
    found = set(mapping.values())
    return mapping, [names[k] for k in keys if k not in found]


# ----------------------------------------------------------------------------- classification


def classification_metrics(truth: Sequence[int], ranked: Sequence[Sequence[int]],
                           names: Dict[int, str]) -> ClassificationMetrics:
    """top1, top5 and per-class top-1 accuracy (by name) of images whose true class is the
    model's class `truth[i]`, with the model's classes `ranked[i]` best first."""
    truth_a = np.asarray(truth, dtype=np.int64)
    if truth_a.size == 0:
        return {"top1": 0.0, "top5": 0.0, "per_class": {}}
    first = np.array([r[0] if len(r) else -1 for r in ranked], dtype=np.int64)
    top5 = np.array([t in list(r)[:5] for t, r in zip(truth_a.tolist(), ranked)])
    hit = first == truth_a
    per_class = {}
    for c in sorted(set(truth_a.tolist())):
        if c < 0:  # the data's classes the model has not: misses in top-1, no class of the model's
            continue
        mine = truth_a == c
        per_class[str(names.get(c, c))] = float(hit[mine].mean())
    return {"top1": float(hit.mean()), "top5": float(top5.mean()), "per_class": per_class}


def confusion(truth: Sequence[int], predicted: Sequence[int], classes: int) -> np.ndarray:
    """(classes, classes) counts, rows the true class, columns the predicted one; values
    outside 0..classes-1 are left out."""
    t = np.asarray(truth, dtype=np.int64).ravel()
    p = np.asarray(predicted, dtype=np.int64).ravel()
    ok = (t >= 0) & (t < classes) & (p >= 0) & (p < classes)
    return np.bincount(t[ok] * classes + p[ok], minlength=classes * classes).reshape(classes, classes)


# ----------------------------------------------------------------------------- segmentation


def add_masks(counts: np.ndarray, truth: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Add one image's pixels to the confusion counts (IGNORE pixels of the truth left out)."""
    classes = counts.shape[0]
    t = truth.astype(np.int64).ravel()
    keep = t != IGNORE
    counts += confusion(t[keep], predicted.astype(np.int64).ravel()[keep], classes)
    return counts


def segmentation_metrics(counts: np.ndarray, names: Dict[int, str]) -> SegmentationMetrics:
    """miou (mean over the classes present in the truth or the predictions), pixel_accuracy
    and per-class IoU (by name) from confusion counts."""
    inter = np.diag(counts).astype(np.float64)
    union = counts.sum(0) + counts.sum(1) - np.diag(counts)
    present = union > 0
    iou = np.divide(inter, union, out=np.zeros_like(inter), where=present)
    total = counts.sum()
    return {"miou": float(iou[present].mean()) if present.any() else 0.0,
            "pixel_accuracy": float(inter.sum() / total) if total else 0.0,
            "per_class": {str(names.get(c, c)): float(iou[c]) for c in np.flatnonzero(present)}}
