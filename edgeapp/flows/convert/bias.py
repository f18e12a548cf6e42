"""Bias correction on the int8 flatbuffer: `--max-drop`'s fourth trial.

Rounding weights to int8 shifts each output channel's mean a little, and the shifts add up
layer after layer. Layer by layer in graph order, the int8 model (its earlier layers already
corrected) and the float model run on calibration images; the mean difference of each output
channel, in the int32 bias's units, is taken off that channel's bias. Only the bias bytes of
the file change (core/tflite/patch.py), nothing else.
"""

from __future__ import annotations

import numpy as np

from edgeapp.core.edgetpu.ops import constant_reader
from edgeapp.core.quant.tune import bias_shift
from edgeapp.core.tflite.model import parse_model
from edgeapp.core.tflite.patch import replace_constants
from edgeapp.flows.convert.requantize import interpreter

WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
SAMPLES = 32


def correct_biases(int8: bytes, float_model: bytes, x: np.ndarray) -> tuple:
    """(corrected flatbuffer, layers corrected). `float_model`: the calibrated float TFLite
    model the int8 one was quantized from (same tensor names); `x`: normalized inputs."""
    x = x[:SAMPLES]
    model = parse_model(int8, "int8")
    read = constant_reader(int8)
    reference = _float_means(float_model, x, [model.tensors[op.outputs[0]].name for op in model.operators
                                                if op.op in WEIGHTED])
    done = 0
    for op in model.operators:
        if op.op not in WEIGHTED or len(op.inputs) < 3 or op.inputs[2] < 0:
            continue
        out, bias = model.tensors[op.outputs[0]], model.tensors[op.inputs[2]]
        ref = reference.get(out.name)
        raw = read(bias)
        if ref is None or raw is None or bias.dtype != "int32" or not bias.quantization:
            continue
        scales = np.asarray(bias.quantization.scale, np.float64)
        if len(scales) != len(ref):
            scales = np.resize(scales, len(ref))
        got = _int8_mean(int8, x, out.index)
        shift = bias_shift(ref[None], got[None], scales)
        if not shift.any():
            continue
        values = np.frombuffer(raw, "<i4").astype(np.int64) - shift
        values = np.clip(values, np.iinfo(np.int32).min, np.iinfo(np.int32).max).astype("<i4")
        try:
            int8 = replace_constants(int8, {bias.index: values.tobytes()})
        except ValueError:  # a bias buffer shared with another tensor
            continue
        read = constant_reader(int8)
        done += 1
    return int8, done


def _float_means(data: bytes, x: np.ndarray, names: list) -> dict:
    """Per wanted tensor name (or the name the int8 model gives a model output, `X1` for `X`):
    the float model's mean of each output channel."""
    it = interpreter(data, keep_all=True)
    details = {d["name"]: d["index"] for d in it.get_tensor_details()}
    index = {}
    for n in names:
        found = n if n in details else (n[:-1] if n[:-1] in details else None)
        if found is not None:
            index[n] = details[found]
    sums: dict = {}
    feed = it.get_input_details()[0]["index"]
    for k in range(len(x)):
        it.set_tensor(feed, x[k:k + 1].astype(np.float32))
        it.invoke()
        for n, i in index.items():
            t = np.asarray(it.get_tensor(i), np.float64)
            sums[n] = sums.get(n, 0.0) + t.reshape(-1, t.shape[-1]).mean(axis=0)
    return {n: s / len(x) for n, s in sums.items()}


def _int8_mean(data: bytes, x: np.ndarray, tensor: int) -> np.ndarray:
    """The int8 model's dequantized mean of each output channel of one tensor."""
    it = interpreter(data, keep_all=True)
    feed = it.get_input_details()[0]
    scale, zero = feed["quantization"]
    dtype = feed["dtype"]
    detail = next(d for d in it.get_tensor_details() if d["index"] == tensor)
    out_scale, out_zero = detail["quantization"]
    total = 0.0
    for k in range(len(x)):
        q = x[k:k + 1]
        if np.dtype(dtype).kind != "f":
            info = np.iinfo(dtype)
            q = np.clip(np.rint(q / scale + zero), info.min, info.max).astype(dtype)
        it.set_tensor(feed["index"], q)
        it.invoke()
        t = (np.asarray(it.get_tensor(tensor), np.float64) - out_zero) * (out_scale or 1.0)
        total = total + t.reshape(-1, t.shape[-1]).mean(axis=0)
    return total / len(x)
