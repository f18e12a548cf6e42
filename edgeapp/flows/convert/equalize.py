"""Equalization on the calibrated float flatbuffer: a `--max-drop` trial (maths: core/quant/equalize.py).

Applied where every source format meets, the calibrated float TFLite model (its weights are
float there, its tensors carry the ranges the quantizer reads), so Keras and ONNX sources get
the same: find the pairs of linear layers (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED) joined
only by positive-homogeneous ops, each intermediate tensor read by the next op alone; measure
each channel's range on the chain's tensors; where one channel sets a range (core/quant/equalize:
over 4x what 90% of the channels need), rescale the producer's output channels, the constants
added on the way and the consumer's input channels. The chain's recorded ranges are then set
to what the rescaled values take (each channel's measured range divided by its scale), so the
model is quantized again without calibrating again. How far to rescale (the exponent alpha)
is chosen by the quantized model's output error against the float model on calibration
images: the consumer's weights pay for every bit the activation gains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from edgeapp.core.edgetpu.ops import constant_reader
from edgeapp.core.quant import equalize as eq
from edgeapp.core.tflite.model import Operator, TfliteModel, parse_model
from edgeapp.core.tflite.patch import replace_constants, set_min_max
from edgeapp.errors import ConvertError
from edgeapp.flows.convert import requantize as rq

LINEAR = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
HOMOGENEOUS = ("RELU", "LEAKY_RELU", "MAX_POOL_2D", "AVERAGE_POOL_2D", "PAD", "ADD")
LINEAR_ACTIVATIONS = (0, 1)  # a fused NONE or RELU: f(x / s) = f(x) / s; RELU6 is not
SCORE_SAMPLES = 32  # calibration images each candidate's output error is measured on
GATE_SAMPLES = 32  # calibration images `worth_trying` calibrates and measures on


@dataclass(frozen=True)
class LayerPair:
    """Two linear layers the rescaling may pass between."""

    producer: Operator
    consumer: Operator
    chain: tuple  # activation tensors from the producer's output to the consumer's input
    constants: tuple  # constant tensors added to the channels on the way


@dataclass
class Equalized:
    """The chosen rescaling: the float model (for bias correction's reference), its int8 file,
    and what the sidecar records."""

    float_model: bytes
    int8: bytes
    settings: dict


def find_pairs(model: TfliteModel, structural: bool = False) -> list:
    """Every producer -> homogeneous ops -> consumer chain of the model's main graph; with
    `structural`, of any model (an int8 one too: whether equalization may apply at all)."""
    readers: dict = {}
    for op in model.operators:
        for i in op.inputs:
            if i >= 0:
                readers.setdefault(i, []).append(op)
    pairs = []
    for op in model.operators:
        if _float_weights(op, model, structural) and op.option("fused_activation_function") in LINEAR_ACTIVATIONS:
            pair = _follow(op, model, readers, structural)
            if pair is not None:
                pairs.append(pair)
    return pairs


def _float_weights(op: Operator, model: TfliteModel, structural: bool = False) -> bool:
    if op.op not in LINEAR or len(op.inputs) < 2 or len(op.outputs) != 1:
        return False
    w = model.tensors[op.inputs[1]]
    bias = model.tensors[op.inputs[2]] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    floats = structural or (w.dtype == "float32" and (bias is None or bias.dtype == "float32"))
    return w.is_constant and (bias is None or bias.is_constant) and floats


def _out_channels(op: Operator, model: TfliteModel) -> int:
    shape = model.tensors[op.inputs[1]].shape
    return shape[-1] if op.op == "DEPTHWISE_CONV_2D" else shape[0]


def _reads_channels(op: Operator, model: TfliteModel, channels: int) -> bool:
    shape = model.tensors[op.inputs[1]].shape
    if op.op == "DEPTHWISE_CONV_2D":
        return shape[-1] % channels == 0
    return shape[-1] == channels


def _follow(producer: Operator, model: TfliteModel, readers: dict, structural: bool = False) -> Optional[LayerPair]:
    channels = _out_channels(producer, model)
    t = producer.outputs[0]
    chain, constants = [t], []
    outputs = set(model.outputs)
    while True:
        users = readers.get(t, [])
        if t in outputs or len(users) != 1 or model.tensors[t].shape[-1:] != (channels,):
            return None
        op = users[0]
        if op.op in LINEAR and _float_weights(op, model, structural) and op.inputs[0] == t and t not in op.inputs[1:]:
            return LayerPair(producer, op, tuple(chain), tuple(constants)) \
                if _reads_channels(op, model, channels) else None
        added = _passes(op, t, model, channels, structural)
        if added is None or len(op.outputs) != 1:
            return None
        constants += added
        t = op.outputs[0]
        chain.append(t)


def _passes(op: Operator, t: int, model: TfliteModel, channels: int, structural: bool = False) -> Optional[list]:
    """The constants `op` adds to the channels when f(x / s) = f(x) / s for it, else None."""
    if op.op not in HOMOGENEOUS or op.inputs[0] != t:
        return None
    if op.op in ("MAX_POOL_2D", "AVERAGE_POOL_2D") and op.option("fused_activation_function") not in LINEAR_ACTIVATIONS:
        return None
    if op.op != "ADD":
        return []
    if len(op.inputs) != 2 or op.option("fused_activation_function") not in LINEAR_ACTIVATIONS:
        return None
    c = model.tensors[op.inputs[1]]
    if not c.is_constant or (c.dtype != "float32" and not structural) or c.shape[-1:] != (channels,):
        return None  # a constant the same for every channel cannot be scaled per channel
    return [c.index]


def channel_stats(data: bytes, tensors: list, x: np.ndarray) -> dict:
    """Per tensor: each channel's (min, max) over the images, from the float model."""
    it = rq.interpreter(data, keep_all=True)
    feed = it.get_input_details()[0]["index"]
    stats: dict = {}
    for k in range(len(x)):
        it.set_tensor(feed, x[k:k + 1].astype(np.float32))
        it.invoke()
        for t in tensors:
            v = np.asarray(it.get_tensor(t), np.float64)
            v = v.reshape(-1, v.shape[-1])
            low, high = v.min(axis=0), v.max(axis=0)
            if t in stats:
                low, high = np.minimum(stats[t][0], low), np.maximum(stats[t][1], high)
            stats[t] = (low, high)
    return stats


def rescaled(data: bytes, model: TfliteModel, pairs: list, scales: list, stats: dict) -> bytes:
    """`data` with each pair rescaled by its channel scales and the chains' ranges set to the
    rescaled values' (a layer between two pairs is rescaled on both sides)."""
    read = constant_reader(data)
    arrays: dict = {}

    def value(i: int) -> np.ndarray:
        if i not in arrays:
            t = model.tensors[i]
            arrays[i] = np.frombuffer(read(t), "<f4").reshape(t.shape).copy()
        return arrays[i]

    ranges = {}
    for pair, s in zip(pairs, scales):
        p = pair.producer
        bias = p.inputs[2] if len(p.inputs) > 2 and p.inputs[2] >= 0 else None
        w, b = eq.producer_scaled(p.op, value(p.inputs[1]), None if bias is None else value(bias), s)
        arrays[p.inputs[1]] = w
        if bias is not None:
            arrays[bias] = b
        for c in pair.constants:
            arrays[c] = eq.constant_scaled(value(c), s)
        arrays[pair.consumer.inputs[1]] = eq.consumer_scaled(pair.consumer.op, value(pair.consumer.inputs[1]), s)
        ranges.update({t: eq.scaled_range(*stats[t], s) for t in pair.chain})
    try:
        data = replace_constants(data, {i: a.astype("<f4").tobytes() for i, a in arrays.items()})
        return set_min_max(data, ranges)
    except ValueError as e:  # a weight buffer shared with another tensor, a tensor with no range
        raise ConvertError(f"cannot rescale: {e}") from None


def wide_pairs(source: bytes, calibration: np.ndarray, samples: int) -> tuple:
    """(model, pairs, their channel ranges, channel stats) of the pairs whose range a few
    channels set, measured on `samples` calibration images of the calibrated float model
    `source`; ConvertError (why) when there is none."""
    model = parse_model(source, "calibrated")
    pairs = find_pairs(model)
    if not pairs:
        raise ConvertError("no two linear layers joined only by ReLU, pooling, padding or a constant add")
    stats = channel_stats(source, sorted({t for p in pairs for t in p.chain}), calibration[:samples])
    ranges = [np.max([np.maximum(-stats[t][0], stats[t][1]) for t in p.chain], axis=0) for p in pairs]
    wide = [i for i, r in enumerate(ranges) if eq.is_outlier_dominated(r)]
    if not wide:
        raise ConvertError(f"no range between two linear layers is {eq.OUTLIER_RATIO:g}x what "
                           f"{eq.TARGET_PERCENTILE:g}% of its channels need")
    return model, [pairs[i] for i in wide], [ranges[i] for i in wide], stats


def worth_trying(saved_model: str, calibration: np.ndarray, io: str) -> Optional[str]:
    """None when equalization may help this model, else why not: a calibration on a few images
    (a fraction of the full one's time) shows whether any range between two linear layers is
    set by a few channels. Most models have none, and then pay no full second calibration."""
    try:
        few = rq.calibrate(saved_model, calibration[:GATE_SAMPLES], io)
        wide_pairs(few.data, calibration, GATE_SAMPLES)
    except ConvertError as e:
        return str(e)
    return None


def equalize(source: bytes, calibration: np.ndarray, io: str, samples: int) -> Equalized:
    """The rescaling with the least output error, quantized. `source`: the calibrated float
    model (the other tensors keep its recorded ranges); `samples`: calibration images the
    channel ranges are measured on. ConvertError when no pair has a range its outlier channels
    set."""
    model, pairs, ranges, stats = wide_pairs(source, calibration, samples)
    x = calibration[:SCORE_SAMPLES]
    want = rq.run_float(source, x)  # recorded ranges do not change the float function
    best = None
    for alpha in eq.ALPHAS:
        scales = [eq.scales_for(r, alpha) for r in ranges]
        data = rescaled(source, model, pairs, scales, stats)
        error = eq.output_error(want, rq.run_float(rq.requantize(data, "float32"), x))
        if best is None or error < best[0]:
            best = (error, alpha, data, scales)
    error, alpha, data, scales = best
    settings = {"pairs": [f"{p.producer.op} #{p.producer.index} -> {p.consumer.op} #{p.consumer.index}"
                          for p in pairs],
                "alpha": alpha, "max_scale": round(float(max(np.max(s) for s in scales)), 2),
                "output_sqnr_db": round(float(-10 * np.log10(max(error, 1e-12))), 2)}
    return Equalized(data, rq.requantize(data, io), settings)
