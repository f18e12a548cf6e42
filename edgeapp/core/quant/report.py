"""Where an int8 model loses accuracy, layer by layer, and why: pure numpy.

Per layer (each quantized op's output tensor), float vs dequantized int8 on the calibration
images: SQNR and relative RMSE; the activation's largest value vs its 99.99th percentile; the
spread of the weights' per-channel ranges; the op's own int8 weak spots (a Softmax over many
classes, an Add/Concat of inputs at very different scales). Each finding gets a cause in words
and the fix. The statistics are accumulated one sample at a time (the quantization debugger
hands them over that way) in bounded memory: sums and a histogram of |x| over the calibrated range.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core.quant.metrics import rounded

BINS = 4096  # histogram of |x| over [0, calibrated extent]: percentiles to 1/4096 of the range
OUTLIER_RATIO = 4.0  # max / 99.99th percentile above this: 2 of int8's 8 bits spent on outliers
WEIGHT_RANGE_RATIO = 100.0  # per-channel weight ranges this far apart
SCALE_RATIO = 10.0  # Add/Concat/Mul inputs whose scales differ this much
SOFTMAX_CLASSES = 100  # int8 Softmax over more classes: most probabilities fall below 1/256
LOW_SQNR_DB = 30.0  # below this a layer is worth a cause even without a specific finding
WORTH_A_CAUSE_DB = 40.0  # above this a layer loses too little for its findings to matter
MIXING_OPS = ("ADD", "SUB", "MUL", "CONCATENATION")



class TensorError(TypedDict):
    """A tensor's quantization error over the samples: SQNR, relative RMSE, the largest value
    against the 99.99th percentile (outliers), the recorded range against it (inflation)."""
    sqnr_db: Optional[float]
    rel_rmse: Optional[float]
    max_abs: Optional[float]
    p99_99: Optional[float]
    outlier_ratio: Optional[float]
    range_inflation: Optional[float]

@dataclass
class LayerAccumulator:
    """Float vs dequantized int8 statistics of one tensor over many samples."""

    count: int = 0
    signal: float = 0.0  # Σ f²
    noise: float = 0.0  # Σ (f − deq)²
    max_abs: float = 0.0
    extent: float = 0.0  # the calibrated range's largest magnitude (from scale, zero point)
    scale: float = 0.0  # the tensor's quantization scale (identifies it across samples)
    hist: np.ndarray = field(default_factory=lambda: np.zeros(BINS, np.int64))

    def add(self, f: np.ndarray, q: np.ndarray, scale: float, zero_point: int,
            qmin: int = -128, qmax: int = 127) -> None:
        f = np.asarray(f, np.float64).ravel()
        deq = (np.asarray(q, np.float64).ravel() - zero_point) * scale
        self.count += f.size
        self.signal += float(np.sum(f * f))
        self.noise += float(np.sum((f - deq) ** 2))
        a = np.abs(f)
        if a.size:
            self.max_abs = max(self.max_abs, float(a.max()))
        if not self.extent:
            self.scale = float(scale)
            self.extent = float(scale) * max(qmax - zero_point, zero_point - qmin) or 1.0
        idx = np.minimum((a / self.extent * BINS).astype(np.int64), BINS - 1)
        self.hist += np.bincount(idx, minlength=BINS)

    def percentile(self, q: float) -> float:
        """The q-th percentile (0..100) of |x|, to the histogram's resolution (a bin's top)."""
        if self.count == 0:
            return 0.0
        cum = np.cumsum(self.hist)
        i = int(np.searchsorted(cum, math.ceil(self.count * q / 100.0)))
        return min(i + 1, BINS) * self.extent / BINS

    def result(self) -> TensorError:
        p = self.percentile(99.99)
        sqnr = (math.inf if self.noise == 0 else -math.inf if self.signal == 0
                else 10 * math.log10(self.signal / self.noise))
        rel = math.sqrt(self.noise / self.signal) if self.signal else (0.0 if self.noise == 0 else math.inf)
        return {"sqnr_db": rounded(sqnr, 2), "rel_rmse": rounded(rel, 5), "max_abs": rounded(self.max_abs, 5),
                "p99_99": rounded(p, 5), "outlier_ratio": rounded(self.max_abs / p, 2) if p > 0 else None,
                "range_inflation": rounded(self.extent / p, 2) if p > 0 else None}


def channel_range_ratio(weights: np.ndarray, axis: int) -> Optional[float]:
    """Largest / smallest per-channel max|w| (channels along `axis`), ignoring all-zero ones."""
    w = np.moveaxis(np.abs(np.asarray(weights, np.float64)), axis, 0).reshape(weights.shape[axis], -1)
    ranges = w.max(axis=1)
    ranges = ranges[ranges > 0]
    if len(ranges) < 2:
        return None
    return float(ranges.max() / ranges.min())


def attribute_shared_ranges(layers: list) -> None:
    """The converter gives some tensors their consumer's int8 grid (an Add's input takes the
    Add's range): then an outlier in the Add shows up as rounding error in the layer before it.
    Tensors on one grid (same scale and zero point) whose own values fill far less than it are
    credited to the tensor whose values set it: that one's `sqnr_db` becomes the worst of the
    grid (its own stays in `local_sqnr_db`), and the others say `range_set_by`."""
    groups: dict = {}
    for row in layers:
        groups.setdefault((row.get("scale"), row.get("zero_point")), []).append(row)
    for row in layers:
        row["local_sqnr_db"] = row.get("sqnr_db")
    for rows in groups.values():
        if len(rows) < 2:
            continue
        owner = max(rows, key=lambda r: r.get("max_abs") or 0.0)
        widened = [r for r in rows if r is not owner and _widened(r, owner)]
        for r in widened:
            r["range_set_by"] = r_name(owner)
        values = [r["local_sqnr_db"] for r in [owner, *widened] if r.get("local_sqnr_db") is not None]
        if values and widened:
            owner["sqnr_db"] = min(values)
            owner["rel_rmse"] = max(r.get("rel_rmse") or 0.0 for r in [owner, *widened])


def _widened(row: dict, owner: dict) -> bool:
    own, other = row.get("max_abs") or 0.0, owner.get("max_abs") or 0.0
    return other > 0 and own * OUTLIER_RATIO < other


def source_name(tensor_name: str, weights_name: Optional[str] = None) -> Optional[str]:
    """A layer's name from TensorFlow's tensor names when no source map knows it: the Keras
    layer in `model_1/conv3_1/Relu;...` (conv3), else the one in its weights' name (an output
    tensor is named after the signature: `StatefulPartitionedCall:0`)."""
    for name in (tensor_name, weights_name or ""):
        part = name.split(";")[0]
        scopes = part.split("/")
        if len(scopes) < 2 or "PartitionedCall" in scopes[1] or (len(scopes) == 2 and "PartitionedCall" in part):
            continue  # the signature's name, not a layer's
        return re.sub(r"_\d+$", "", scopes[1])
    return None


def r_name(row: dict) -> str:
    """A layer as people know it: the source model's name (ONNX node) when known."""
    return row.get("source") or row["name"].split(";")[0]


def diagnose(layer: dict) -> tuple:
    """(cause, fix) in words for a layer row, or (None, None) when nothing stands out."""
    sqnr = layer.get("sqnr_db")
    if sqnr is not None and sqnr > WORTH_A_CAUSE_DB:
        return None, None
    if layer.get("range_set_by"):
        return (f"its int8 range is shared with {layer['range_set_by']}, whose values reach "
                "far beyond this layer's own, so it keeps few int8 levels",
                f"fix the range of {layer['range_set_by']} (see its cause)")
    ratio = max(layer.get("range_inflation") or 0.0, layer.get("outlier_ratio") or 0.0)
    if ratio > OUTLIER_RATIO:
        return (f"its range is {ratio:.0f}x what 99.99% of its values need: one outlier sets the int8 "
                f"step (max {layer['max_abs']:.4g}, 99.99th percentile {layer['p99_99']:.4g}), so its "
                "usual values keep few of int8's 256 levels",
                "clip this activation in the model (ReLU6, torch.clamp, Hardtanh) to the range its "
                "values normally take; or `convert --max-drop X`, which re-measures and clips ranges, "
                "rescales an outlier channel between two layers (equalization) and, when the outlier "
                "carries information, keeps the layers from here on in float")
    spread = layer.get("weight_range_ratio")
    if spread is not None and spread > WEIGHT_RANGE_RATIO:
        return (f"weight channels whose ranges differ {spread:.0f}x: the small channels keep few "
                "int8 levels",
                "equalize the channels (cross-layer equalization), train with weight decay, or keep "
                "a BatchNorm after this layer so the ranges are folded per channel")
    if layer.get("op") == "SOFTMAX" and (layer.get("classes") or 0) > SOFTMAX_CLASSES:
        return (f"Softmax over {layer['classes']} classes in int8: probabilities below 1/256 become 0",
                "end the model at the logits (drop the Softmax): the ranking, and so classify's "
                "top-k, stays the same")
    scales = layer.get("input_scale_ratio")
    if layer.get("op") in MIXING_OPS and scales is not None and scales > SCALE_RATIO:
        return (f"{layer['op']} of inputs at scales {scales:.0f}x apart: the smaller input keeps "
                "few int8 levels in the result",
                "bound the larger branch (ReLU6, clamp) or rescale one branch before the "
                f"{layer['op'].lower()}")
    sqnr = layer.get("sqnr_db")
    if sqnr is not None and sqnr < LOW_SQNR_DB:
        return ("int8 rounding error large against this layer's values (no single cause found)",
                "calibrate on more, and more representative, images (--calibration-size)")
    return None, None


def rank(layers: list) -> list:
    """Worst first. Layers whose harm at the model's output was measured (`output_sqnr_db`: the
    output's SQNR when that layer alone is quantized) first, lowest first; then the others by the
    lowest SQNR their int8 range causes (their own, or that of a layer they widened: the cause
    before the layer it harmed); layers without a number (identical, or no signal) last."""
    def key(row):
        out = row.get("output_sqnr_db")
        if out is not None:
            return (0, out, 0)
        s = row.get("sqnr_db")
        return (2, 0.0, 0) if s is None else (1, s, 1 if row.get("range_set_by") else 0)

    return sorted(layers, key=key)


def harm_candidates(layers: list, limit: int) -> list:
    """The rows worth measuring at the output (each costs a quantization and a run): the
    `limit` worst by their own error, and every one whose range an outlier sets."""
    ranked = rank([dict(r, output_sqnr_db=None) for r in layers])
    names = [r["name"] for r in ranked[:limit]]
    names += [r["name"] for r in layers if (r.get("range_inflation") or 0.0) > OUTLIER_RATIO]
    return list(dict.fromkeys(names))
