"""Does a co-compiled model give what its solo compile gives? The comparison, on arrays.

On the Edge TPU a model compiled alone gives the outputs of its CPU int8 model (the twin
`compile` keeps beside it) up to the chip's rounding: a step or two of the output's
quantization. edgetpu#85 reports co-compiled models giving wrong outputs, which are tens of
steps off. So one input through both, and the largest difference in quantized steps against
`TOLERANCE_STEPS`, tells a co-compile that went wrong from one that did not.

A float output (dequantized by the model, or a post-process's boxes and scores) has no steps
of its own: its step is 1/255 of the CPU output's range. Such outputs are compared as sorted
values too: detections whose scores tie within the rounding may swap places, which is no
wrong output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

TOLERANCE_STEPS = 8  # a rounding difference moves an output a step or two; a wrong one, tens


@dataclass(frozen=True)
class TwinAgreement:
    """How far the outputs of a run are from the reference's, output by output."""

    max_steps: float  # the largest difference, in quantized steps
    output: int  # the output it is in
    tolerance: float

    @property
    def agree(self) -> bool:
        return self.max_steps <= self.tolerance


def check_input(shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """One deterministic input for a model: smooth waves over the whole range of its quantized
    type (an image-like pattern, not noise, so the outputs are not ties), the same on every
    machine."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    grid = np.indices(shape, dtype=np.float64)
    wave = sum(np.sin((k + 1.7) * 2.1 * g / max(1, n)) for k, (g, n) in enumerate(zip(grid, shape)))
    unit = (wave - wave.min()) / max(1e-12, float(wave.max() - wave.min())) if wave.size else wave
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        low, high = max(info.min, -128), min(info.max, 255)
        return np.round(low + unit * (high - low)).astype(dtype)
    return unit.astype(dtype)  # a float input (the model quantizes it): 0..1, as images are fed


def steps_apart(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference between two outputs, in quantized steps (see the module)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return float("inf")
    if got.size == 0:
        return 0.0
    if np.issubdtype(want.dtype, np.integer):
        return float(np.max(np.abs(got.astype(np.int64) - want.astype(np.int64))))
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not (np.all(np.isfinite(g)) and np.all(np.isfinite(w))):
        return 0.0 if np.array_equal(g, w, equal_nan=True) else float("inf")
    step = max(float(w.max() - w.min()) / 255, 1e-6)
    apart = float(np.max(np.abs(g - w))) / step
    reordered = float(np.max(np.abs(np.sort(g, axis=None) - np.sort(w, axis=None)))) / step
    return min(apart, reordered)


def compare_with_twin(got: Sequence[np.ndarray], want: Sequence[np.ndarray],
                    tolerance: float = TOLERANCE_STEPS) -> TwinAgreement:
    """`got` (the co-compiled model's outputs) against `want` (its CPU model's)."""
    if len(got) != len(want):
        return TwinAgreement(float("inf"), 0, tolerance)
    apart = [steps_apart(g, w) for g, w in zip(got, want)]
    worst = int(np.argmax(apart)) if apart else 0
    return TwinAgreement(apart[worst] if apart else 0.0, worst, tolerance)
