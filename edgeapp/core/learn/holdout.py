"""Holding images out and scoring a retrained head: the split, per-class accuracy, confusion.

The split is stratified and decided by each image's content hash, not by a random draw or file
names: the same photos always fall on the same side, renaming changes nothing, and adding
photos to a class moves few of the old ones.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def stratified_split(keys: Sequence[str], labels: Sequence[int], val_fraction: float
                     ) -> tuple[list[int], list[int]]:
    """(train indices, validation indices): per class, round(val_fraction x n) images, those with
    the smallest keys (content hashes), but always at least one left to train on."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), not {val_fraction}")
    train: list[int] = []
    val: list[int] = []
    by_class: dict[int, list[int]] = {}
    for i, c in enumerate(labels):
        by_class.setdefault(int(c), []).append(i)
    for c in sorted(by_class):
        members = sorted(by_class[c], key=lambda i: (keys[i], i))
        k = min(int(np.floor(val_fraction * len(members) + 0.5)), len(members) - 1)
        val += members[:k]
        train += members[k:]
    return sorted(train), sorted(val)


def confusion_matrix(truth: Sequence[int], predicted: Sequence[int], classes: int) -> np.ndarray:
    """[classes, classes] counts: row = true class, column = predicted class."""
    cm = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(cm, (np.asarray(truth, dtype=np.int64), np.asarray(predicted, dtype=np.int64)), 1)
    return cm


def per_class_accuracy(cm: np.ndarray) -> list[Optional[float]]:
    """Recall of each class (its diagonal share of its row); None for a class with no image."""
    totals = cm.sum(axis=1)
    return [float(cm[i, i] / t) if t else None for i, t in enumerate(totals)]


def overall_accuracy(cm: np.ndarray) -> Optional[float]:
    total = int(cm.sum())
    return float(np.trace(cm) / total) if total else None
