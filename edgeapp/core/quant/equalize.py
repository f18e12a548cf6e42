"""Equalization (cross-layer / activation equalization): pure numpy.

An int8 tensor has one step for all its channels, so a channel whose values reach 60x the
others' sets a step the others lose their precision to. Between two linear layers joined by
positive-homogeneous ops (ReLU, max/average pooling, zero padding, a per-channel constant added
and scaled alike), channel k of the producer's output can be divided by s_k > 0 and the
consumer's input channel k multiplied by s_k: f(x / s) = f(x) / s for those ops, so the float
function is unchanged and the activation's range shrinks towards what the other channels need
(Nagel et al. 2019, "Data-Free Quantization Through Weight Equalization and Bias Correction";
AIMET and Hailo call it equalization). The cost is the consumer's weights: multiplied by s_k,
its per-output-channel int8 step grows. So s_k = (range_k / target) ** alpha for channels over
the target (a high percentile of the channel ranges), 1 for the others, and alpha is chosen by
measuring the quantized model's output error (as AWQ searches its scales).

Weight layouts are TFLite's: CONV_2D [out, h, w, in], DEPTHWISE_CONV_2D [1, h, w, in * mult],
FULLY_CONNECTED [out, in].
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

OUTLIER_RATIO = 4.0  # a range this many times the target is set by its outlier channel(s)
TARGET_PERCENTILE = 90.0  # of the channel ranges: what the channels but the outliers need
ALPHAS = tuple(i / 16 for i in range(4, 17))  # the exponents tried, 0.25 .. 1


def channel_ranges(x: np.ndarray) -> np.ndarray:
    """Each channel's (last axis) largest |x|."""
    x = np.asarray(x)
    return np.abs(x.reshape(-1, x.shape[-1])).max(axis=0).astype(np.float64)


def target_of(ranges: np.ndarray, percentile: float = TARGET_PERCENTILE) -> float:
    """The range the channels but a few need: a high percentile of the nonzero channel ranges
    (the nearest one below, never a value between the normal channels and an outlier)."""
    live = np.sort(np.asarray(ranges, np.float64).ravel())
    live = live[live > 0]
    return float(live[int(percentile / 100.0 * (live.size - 1))]) if live.size else 0.0


def is_outlier_dominated(ranges: np.ndarray, ratio: float = OUTLIER_RATIO) -> bool:
    """The widest channel is more than `ratio` times the target: a few channels set the step."""
    target = target_of(ranges)
    return target > 0 and float(np.max(ranges)) > ratio * target


def scales_for(ranges: np.ndarray, alpha: float, target: Optional[float] = None) -> np.ndarray:
    """s_k = max(1, range_k / target) ** alpha: channels over the target brought towards it
    (alpha 1: all the way, the consumer's weights taking all of it; 0: unchanged)."""
    ranges = np.asarray(ranges, np.float64)
    target = target_of(ranges) if target is None else target
    if target <= 0:
        return np.ones_like(ranges)
    return np.maximum(1.0, ranges / target) ** float(alpha)


def scaled_range(low: np.ndarray, high: np.ndarray, s: np.ndarray) -> tuple:
    """(low, high) of a whole tensor whose channels had [low_k, high_k] and are divided by s_k
    (0 kept inside, as the quantizer wants)."""
    return (min(0.0, float(np.min(np.asarray(low) / s))), max(0.0, float(np.max(np.asarray(high) / s))))


def producer_scaled(op: str, weights: np.ndarray, bias: Optional[np.ndarray], s: np.ndarray) -> tuple:
    """(weights, bias) of the producer with output channel k divided by s_k."""
    s = np.asarray(s, np.float64)
    if op == "DEPTHWISE_CONV_2D":
        w = weights / s.reshape((1,) * (weights.ndim - 1) + (-1,))
    else:  # CONV_2D [out, h, w, in], FULLY_CONNECTED [out, in]
        w = weights / s.reshape((-1,) + (1,) * (weights.ndim - 1))
    b = None if bias is None else bias / s
    return w.astype(weights.dtype), (None if b is None else b.astype(bias.dtype))


def consumer_scaled(op: str, weights: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The consumer's weights with input channel k multiplied by s_k."""
    s = np.asarray(s, np.float64)
    if op == "DEPTHWISE_CONV_2D":  # output channel k * mult + m reads input channel k
        s = np.repeat(s, weights.shape[-1] // len(s))
    return (weights * s).astype(weights.dtype)  # the input channel is the last axis


def constant_scaled(constant: np.ndarray, s: np.ndarray) -> np.ndarray:
    """A constant added to the channels (last axis), scaled alike."""
    return (constant / np.asarray(s, np.float64)).astype(constant.dtype)


def output_error(reference: Sequence[np.ndarray], test: Sequence[np.ndarray]) -> float:
    """The outputs' error relative to their power (1 / SQNR), summed over the outputs."""
    total = 0.0
    for r, t in zip(reference, test):
        r = np.asarray(r, np.float64)
        signal = float(np.sum(r ** 2)) or 1.0
        total += float(np.sum((r - np.asarray(t, np.float64)) ** 2)) / signal
    return total
