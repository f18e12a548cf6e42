"""The retrained head as TFLite tensors, quantized by one stated rule.

After the extractor's embedding output come three CPU operators:

    embedding -> L2_NORMALIZATION -> FULLY_CONNECTED (weights, bias) -> SOFTMAX -> scores [1, K]

In the dtype of the embedding output (uint8 as in Coral's models, int8, or float32):
- L2_NORMALIZATION outputs scale 1/128 (zero point 128 for uint8, 0 for int8): TFLite's rule.
  It makes the head independent of the extractor's own output scale.
- weights: symmetric per-tensor, scale = max|W| / 127; int8 values in [-127, 127] (zero point
  0), uint8 values in [1, 255] (zero point 128);
- bias: int32 at scale (1/128) x weight scale, zero point 0 (TFLite's rule for FULLY_CONNECTED);
- logits: the range seen on the training images (0 included), widened by a quarter of its span
  on each side and never beyond what a unit-length embedding can give (|w_k| + |b_k|), mapped
  onto the 256 levels;
- SOFTMAX outputs scale 1/256, zero point 0 (uint8) or -128 (int8): TFLite's rule.
A float32 extractor gets a float32 head.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from edgeapp.core.learn.train import dense, l2_normalize
from edgeapp.core.tflite.append import NewOperator, NewTensor
from edgeapp.core.tflite.model import TfliteModel

NORM_SCALE = 1.0 / 128
SCORE_SCALE = 1.0 / 256
RANGE_MARGIN = 0.25
# operator versions by head dtype: the versions TFLite's converter gives these kernels
_VERSIONS = {"uint8": {"L2_NORMALIZATION": 1, "FULLY_CONNECTED": 1, "SOFTMAX": 1},
             "int8": {"L2_NORMALIZATION": 2, "FULLY_CONNECTED": 4, "SOFTMAX": 2},
             "float32": {"L2_NORMALIZATION": 1, "FULLY_CONNECTED": 1, "SOFTMAX": 1}}
HEAD_DTYPES = tuple(_VERSIONS)


def quantize_weights(weights: np.ndarray, dtype: str) -> tuple[np.ndarray, float, int]:
    """(values, scale, zero point) of the weights, symmetric per tensor."""
    w = np.asarray(weights, dtype=np.float64)
    top = float(np.abs(w).max()) if w.size else 0.0
    scale = top / 127 if top > 0 else 1.0
    q = np.clip(np.round(w / scale), -127, 127)
    if dtype == "uint8":
        return (q + 128).astype(np.uint8), scale, 128
    return q.astype(np.int8), scale, 0


def quantize_bias(bias: np.ndarray, weight_scale: float) -> np.ndarray:
    return np.round(np.asarray(bias, dtype=np.float64) / (NORM_SCALE * weight_scale)).astype(np.int32)


def logit_range(embeddings: np.ndarray, weights: np.ndarray, bias: np.ndarray,
                margin: float = RANGE_MARGIN) -> tuple[float, float]:
    """The logits' quantization range by the rule above (embeddings as the extractor gives them)."""
    z = dense(l2_normalize(embeddings), weights, bias)
    lo, hi = min(float(z.min()), 0.0), max(float(z.max()), 0.0)
    pad = margin * (hi - lo)
    bound = float(np.max(np.linalg.norm(weights, axis=1) + np.abs(bias)))
    return max(lo - pad, -bound), min(hi + pad, bound)


def range_quantization(lo: float, hi: float, dtype: str) -> tuple[float, int]:
    """(scale, zero point) putting [lo, hi] (which holds 0) on the 256 levels of `dtype`; the
    zero point is an integer, so 0 is exact."""
    scale = max(hi - lo, 1e-6) / 255
    low = -128 if dtype == "int8" else 0
    return scale, int(np.clip(np.round(low - lo / scale), low, low + 255))


def head_tensors(model: TfliteModel, weights: np.ndarray, bias: np.ndarray,
                 logits: Sequence[float]) -> tuple[list[NewTensor], list[NewOperator], int]:
    """(tensors, operators, new output index) that put the head after `model`'s one output.
    `logits`: the (low, high) range of the logits (logit_range)."""
    x = model.output_tensors[0]
    dtype = x.dtype
    if dtype not in HEAD_DTYPES:
        raise ValueError(f"no head for a {dtype} embedding")
    classes, depth = np.shape(weights)
    n = len(model.tensors)
    v = _VERSIONS[dtype]
    fc_options = {"fused_activation_function": 0}
    if dtype == "float32":
        tensors = [NewTensor("retrain/l2_norm", x.shape, dtype),
                   NewTensor("retrain/weights", (classes, depth), dtype,
                             np.asarray(weights, np.float32)),
                   NewTensor("retrain/bias", (classes,), dtype, np.asarray(bias, np.float32)),
                   NewTensor("retrain/logits", (1, classes), dtype),
                   NewTensor("retrain/scores", (1, classes), dtype)]
    else:
        wq, w_scale, w_zero = quantize_weights(weights, dtype)
        z_scale, z_zero = range_quantization(float(logits[0]), float(logits[1]), dtype)
        tensors = [NewTensor("retrain/l2_norm", x.shape, dtype, scale=(NORM_SCALE,),
                             zero_point=(128 if dtype == "uint8" else 0,)),
                   NewTensor("retrain/weights", (classes, depth), dtype, wq, (w_scale,), (w_zero,)),
                   NewTensor("retrain/bias", (classes,), "int32", quantize_bias(bias, w_scale),
                             (NORM_SCALE * w_scale,), (0,)),
                   NewTensor("retrain/logits", (1, classes), dtype, scale=(z_scale,),
                             zero_point=(z_zero,)),
                   NewTensor("retrain/scores", (1, classes), dtype, scale=(SCORE_SCALE,),
                             zero_point=(0 if dtype == "uint8" else -128,))]
    ops = [NewOperator("L2_NORMALIZATION", (x.index,), (n,), v["L2_NORMALIZATION"],
                       {"fused_activation_function": 0}),
           NewOperator("FULLY_CONNECTED", (n, n + 1, n + 2), (n + 3,), v["FULLY_CONNECTED"],
                       fc_options),
           NewOperator("SOFTMAX", (n + 3,), (n + 4,), v["SOFTMAX"], {"beta": 1.0})]
    return tensors, ops, n + 4
