"""How close an int8 model's outputs are to its float original's: pure numpy.

Cosine similarity and SQNR (signal-to-quantization-noise ratio, dB) per output, float vs
dequantized int8; top-1 agreement and top-k accuracy for class vectors. Outputs are matched by
shape, allowing the channels-first → channels-last move a converter makes (NCHW → NHWC).
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

import numpy as np
from typing_extensions import TypedDict


class OutputAgreement(TypedDict):
    """One model output, float vs int8: cosine (mean and min over samples) and SQNR."""
    name: str
    shape: List[int]
    cosine: Optional[float]
    cosine_min: Optional[float]
    sqnr_db: Optional[float]


class ClassAgreement(TypedDict):
    """Top-1 agreement float vs int8; accuracy of both when the labels are known (else None)."""
    agreement: Optional[float]
    float_accuracy: Optional[float]
    int8_accuracy: Optional[float]
    float_top5: Optional[float]
    int8_top5: Optional[float]


def sqnr_db(reference: np.ndarray, test: np.ndarray) -> float:
    """10·log10(Σ ref² / Σ (ref − test)²) over all elements; inf when they are equal."""
    ref = np.asarray(reference, np.float64).ravel()
    noise = float(np.sum((ref - np.asarray(test, np.float64).ravel()) ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def cosine_per_sample(reference: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Cosine similarity of each sample's flattened output (1.0 when both are all zero)."""
    a = np.asarray(reference, np.float64).reshape(len(reference), -1)
    b = np.asarray(test, np.float64).reshape(len(test), -1)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    dot = np.sum(a * b, axis=1)
    out = np.where((na == 0) & (nb == 0), 1.0, dot / np.maximum(na * nb, 1e-300))
    return np.clip(out, -1.0, 1.0)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest scores per sample, best first; a tie goes to the higher index,
    as `classify` ranks classes (core/vision/classify.get_classes_from_scores), so an accuracy measured
    here is the one `classify` gets on the same images."""
    s = np.asarray(scores).reshape(len(scores), -1)
    k = min(k, s.shape[1])
    last = s.shape[1] - 1
    return last - np.argsort(-s[:, ::-1], axis=1, kind="stable")[:, :k]


def is_class_vector(shape: Sequence[int]) -> bool:
    """A per-sample vector of 2+ scores: (N, K) or (N, 1, 1, K)-like."""
    dims = [d for d in shape[1:] if d != 1]
    return len(dims) == 1 and dims[0] >= 2


def align(reference: np.ndarray, test: np.ndarray) -> Optional[np.ndarray]:
    """`test` reshaped to `reference`'s layout: as is, channels-last back to channels-first
    (a converter's NHWC output of an NCHW model), or flattened alike; None when they differ."""
    if test.shape == reference.shape:
        return test
    if test.ndim == reference.ndim and test.ndim >= 3:
        moved = np.moveaxis(test, -1, 1)
        if moved.shape == reference.shape:
            return moved
    if test.size == reference.size and max(test.ndim, reference.ndim) <= 2:
        return test.reshape(reference.shape)
    if test.size == reference.size and all(d == 1 for d in test.shape[1:-1]):
        return test.reshape(reference.shape)
    return None


def match_outputs(reference: list, test: list) -> list[tuple[int, int]]:
    """(reference index, test index) pairs: same position when it fits, else the first unused
    test output that aligns."""
    pairs, used = [], set()
    for i, ref in enumerate(reference):
        order = ([i] if i < len(test) else []) + [j for j in range(len(test)) if j != i]
        for j in order:
            if j not in used and align(ref, test[j]) is not None:
                pairs.append((i, j))
                used.add(j)
                break
    return pairs


def compare_outputs(reference: list, test: list, names: Sequence[str]) -> List[OutputAgreement]:
    """Per matched output: cosine (mean, min over samples) and SQNR, float vs int8."""
    rows: List[OutputAgreement] = []
    for i, j in match_outputs(reference, test):
        ref, got = reference[i], align(reference[i], test[j])
        cos = cosine_per_sample(ref, got)
        rows.append({"name": names[i] if i < len(names) else f"output_{i}", "shape": list(ref.shape[1:]),
                     "cosine": rounded(float(np.mean(cos))), "cosine_min": rounded(float(np.min(cos))),
                     "sqnr_db": rounded(sqnr_db(ref, got), 2)})
    return rows


def class_agreement(reference: np.ndarray, test: np.ndarray,
                    labels: Optional[np.ndarray] = None) -> ClassAgreement:
    """Top-1 agreement float vs int8, and top-1/top-5 accuracy of both when labels are known."""
    f1, q1 = top_k(reference, 1)[:, 0], top_k(test, 1)[:, 0]
    out: ClassAgreement = {"agreement": rounded(float(np.mean(f1 == q1))), "float_accuracy": None,
                           "int8_accuracy": None, "float_top5": None, "int8_top5": None}
    if labels is not None and len(labels) == len(f1) and (labels >= 0).all():
        f5, q5 = top_k(reference, 5), top_k(test, 5)
        out.update(float_accuracy=rounded(float(np.mean(f1 == labels))),
                   int8_accuracy=rounded(float(np.mean(q1 == labels))),
                   float_top5=rounded(float(np.mean((f5 == labels[:, None]).any(axis=1)))),
                   int8_top5=rounded(float(np.mean((q5 == labels[:, None]).any(axis=1)))))
    return out


def rounded(x: float, digits: int = 4) -> Optional[float]:
    """Rounded for reports; None for inf/NaN, which JSON cannot hold (SQNR of identical data)."""
    return None if math.isinf(x) or math.isnan(x) else round(x, digits)
