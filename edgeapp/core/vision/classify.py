"""Classification post-processing: pure functions over output arrays."""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence

import numpy as np
from typing_extensions import TypedDict


class ClassItem(TypedDict):
    """A class in a record: its id, its label (None without labels), its score."""
    id: int
    label: Optional[str]
    score: float


class Class(NamedTuple):
    id: int
    score: float


def dequantize(values: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Real values of a quantized tensor: scale·(q − zero_point). Float tensors pass through."""
    if values.dtype.kind == "f" or not scale:
        return values.astype(np.float32, copy=False)
    return (values.astype(np.float32) - np.float32(zero_point)) * np.float32(scale)


def is_score_vector(shape: Sequence[int]) -> bool:
    """One score per class: at most one dimension larger than 1 ([1, N], [N], [1, 1, 1, N])."""
    return sum(1 for d in shape if d > 1) <= 1


def get_scores(output: np.ndarray, scale: float = 0.0, zero_point: int = 0) -> np.ndarray:
    """The flat, dequantized score vector of a classifier output of shape (1, N) or (N,)."""
    return dequantize(np.asarray(output).reshape(-1), scale, zero_point)


def get_classes_from_scores(scores: np.ndarray, top_k: int = 5, threshold: float = 0.0) -> list[Class]:
    """The top_k classes by score, then those scoring ≥ threshold.

    Quantized scores tie often (uint8 steps of 1/256). Ties go to the higher id, as TFLite's
    label_image (`argsort()[-k:][::-1]`) orders them, which also matches Coral's reference
    results (cat.bmp on MobileNet v1 0.25: Egyptian cat, tied with tiger cat on the CPU).
    """
    top_k = max(0, min(top_k, scores.size))
    order = np.lexsort((-np.arange(scores.size), -scores))[:top_k]  # score desc, then id desc
    return [Class(int(i), float(scores[i])) for i in order if scores[i] >= threshold]


def class_fields(classes: list[Class], labels: Optional[dict[int, str]]) -> List[ClassItem]:
    """The JSON form of classes, shared by classify and camera records."""
    return [{"id": c.id, "label": labels.get(c.id) if labels else None, "score": round(c.score, 6)}
            for c in classes]


def label_count_warning(labels: Optional[dict[int, str]], classes: int, source: str) -> Optional[str]:
    """One line when the labels do not fit the model's class count (labels for other classes
    mislabel silently), naming both counts; None when they fit or there are none."""
    if not labels or classes <= 0:
        return None
    beyond = [i for i in labels if i >= classes]
    if len(labels) == classes and not beyond:
        return None
    what = f"{len(labels)} label(s) from {source} for the model's {classes} class(es)"
    if beyond:
        return f"{what}; labels of ids {min(beyond)}..{max(beyond)} are never used: wrong labels file?"
    return f"{what}; classes without a label are shown by id: wrong labels file?"
