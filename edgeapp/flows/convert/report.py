"""`convert --report`: per layer, how much the int8 model loses and why.

TensorFlow Lite's own QuantizationDebugger runs the calibrated model with every quantized op
checked against its float twin fed the same (dequantized) inputs, so each layer's error is its
own, not an accumulation of the layers before it. edgeapp adds, through the debugger's
direct-compare hook, what the debugger does not aggregate: SQNR over all samples, the activation
histogram (max vs 99.99th percentile), plus from the quantized model the weights' per-channel
ranges and the inputs' scales of Add/Concat. Worst layer first, with the cause and the fix.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Dict, List, Optional

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core.edgetpu.ops import constant_reader
from edgeapp.core.quant.report import (
    LayerAccumulator,
    attribute_shared_ranges,
    channel_range_ratio,
    diagnose,
    harm_candidates,
    rank,
    source_name,
)
from edgeapp.core.tflite.model import TfliteModel
from edgeapp.core.tflite.patch import EQUIVALENT_OLDER_OPS
from edgeapp.errors import ConvertError
from edgeapp.flows.convert import requantize as rq
from edgeapp.flows.sources.base import first_line, tensorflow
from edgeapp.hw.native_stderr import filtered_native_stderr

WEIGHTED_OPS = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0, "TRANSPOSE_CONV": 0}
HARM_LAYERS = 12  # layers measured at the model's output (each: one quantization, one run)


class _Collector:
    """The debugger's direct-compare metric: called once per layer per sample, in the same layer
    order every sample; `next_sample` (called by the dataset) restarts the order."""

    def __init__(self) -> None:
        self.layers: list = []
        self.position = 0

    def next_sample(self) -> None:
        self.position = 0

    def __call__(self, f, q, scale, zero_point) -> float:
        if self.position == len(self.layers):
            self.layers.append(LayerAccumulator())
        acc = self.layers[self.position]
        self.position += 1
        acc.add(f, q, float(scale), int(zero_point))
        return 0.0



class TensorContext(TypedDict, total=False):
    """The written model's facts about the op that makes a tensor (_model_context)."""
    op: str
    op_index: int
    weights_name: str
    weight_range_ratio: float  # per-channel weight ranges, largest over smallest
    classes: int  # a Softmax's
    input_scale_ratio: float  # a mixing op's input scales, largest over smallest


class SilentLayer(TypedDict):
    """A layer whose range was floored: it stays within `recorded` on every calibration image."""
    layer: str
    tensor: str
    recorded: List[float]  # low, high
    floored: List[float]

def layer_report(saved_model: str, calibration: np.ndarray, tflite: TfliteModel, data: bytes,
                 layer_names: Optional[dict] = None, samples: int = 32) -> list:
    """The rows of the report, worst first: name, op, sqnr_db, rel_rmse, outlier figures,
    cause, fix (and `source`, the ONNX node, when known)."""
    tf = tensorflow()
    x = calibration[:samples]
    collector = _Collector()

    def dataset():
        for i in range(len(x)):
            collector.next_sample()
            yield [x[i:i + 1]]

    cal = rq.calibrate(saved_model, calibration, "float32")
    try:
        with filtered_native_stderr():
            debug = tf.lite.experimental
            # The debugger runs the debug model from its bytes: only then does its interpreter keep
            # every intermediate tensor (and skip XNNPACK, which does not write them), so the float
            # values the direct comparison reads are real, not a reused buffer's. Made here from
            # the calibrated model with the written model's floored ranges (quantize.py).
            debugger = debug.QuantizationDebugger(
                quant_debug_model_content=rq.debug_model(rq.floor_ranges(cal.data)[0]), debug_dataset=dataset,
                debug_options=debug.QuantizationDebugOptions(layer_direct_compare_metrics={"edgeapp": collector}))
            debugger.run()
    except MemoryError:
        raise ConvertError("not enough memory for the quantization report") from None
    except Exception as e:  # the debugger's conversion or run
        raise ConvertError(f"TensorFlow Lite's quantization debugger failed: {first_line(e)}") from None
    dump = io.StringIO()
    debugger.layer_statistics_dump(dump)
    rows = list(csv.DictReader(io.StringIO(dump.getvalue())))
    context = _model_context(tflite, data)
    written = {op.op for op in tflite.operators}
    layers = []
    if len(rows) != len(collector.layers) or any(
            not np.isclose(float(r["scale"]), a.scale, rtol=1e-5) for r, a in zip(rows, collector.layers)):
        raise ConvertError("TensorFlow Lite's quantization debugger reported its layers in another order "
                           "than it ran them: no per-layer report")
    for index, (row, acc) in enumerate(zip(rows, collector.layers)):
        layer = {"name": row["tensor_name"], "op": row["op_name"], "index": index, **acc.result(),
                 "scale": float(row["scale"]), "zero_point": int(float(row["zero_point"]))}
        layer.update(_context_for(context, row["tensor_name"], layer["op"]))
        if layer["op"] not in written and layer["op"] in EQUIVALENT_OLDER_OPS:  # swapped after the debugger
            layer["debugged_as"], layer["op"] = layer["op"], EQUIVALENT_OLDER_OPS[layer["op"]][0]
        weights = layer.pop("weights_name", None)
        position = layer.pop("op_index", None)
        layer["source"] = (source_layer(row["tensor_name"], layer_names or {})
                           or source_layer(weights or "", layer_names or {})
                           or source_name(row["tensor_name"], weights)
                           or _by_position(layer["op"], position, index))
        layers.append(layer)
    attribute_shared_ranges(layers)
    try:
        output_harm(cal, calibration, layers, samples)
    except ConvertError:  # the ranking falls back to each layer's own error
        pass
    for layer in layers:
        layer["cause"], layer["fix"] = diagnose(layer)
    return rank(layers)


def output_harm(cal: rq.Calibrated, calibration: np.ndarray, layers: list, samples: int) -> None:
    """Per layer (the worst few and every outlier): the harm at the model's output. The model
    with only that layer quantized (at the ranges its values really take) is run against the
    float model; what the layer adds over the inputs it reads (each measured alone the same
    way) is its `output_sqnr_db`. A layer's own error says little about what it costs: an error
    the next layers amplify or ignore, an outlier the output never sees."""
    x = calibration[:samples]
    rq.measure_ranges(cal, x)
    ranged = rq.floor_ranges(rq.with_ranges(cal)[0])[0]
    reference = rq.run_float(cal.data, x)
    signal = sum(float(np.sum(np.square(r, dtype=np.float64))) for r in reference)
    noise = {}
    for name in harm_candidates(layers, HARM_LAYERS):
        if name not in cal.producers:
            continue
        try:
            got = rq.run_float(rq.requantize(ranged, "float32", denylisted=[n for n in cal.op_outputs if n != name]), x)
        except ConvertError:
            continue
        noise[name] = sum(float(np.sum(np.square(r - g, dtype=np.float64))) for r, g in zip(reference, got))
    for row in layers:
        if row["name"] not in noise or signal <= 0:
            continue
        own = noise[row["name"]]
        added = max(own - max((noise.get(p, 0.0) for p in cal.producers[row["name"]]), default=0.0), signal * 1e-12)
        row["output_sqnr_alone_db"] = round(10 * math.log10(signal / own), 2) if own > 0 else None
        row["output_sqnr_db"] = round(10 * math.log10(signal / added), 2)


def source_layer(tensor_name: str, layer_names: dict) -> Optional[str]:
    """The source model's layer (an ONNX node) behind a TFLite tensor name such as
    `model_5/block2/conv/Relu;model_5/tf.math.add_3/Add;...`: the first fused part whose scope
    is a TF layer onnx2tf named (the longest such layer name wins)."""
    for part in tensor_name.split(";"):
        rest = part.partition("/")[2]
        best = max((k for k in layer_names if rest == k or rest.startswith(k + "/")), key=len, default=None)
        if best:
            return layer_names[best]
    return None


def _by_position(op: str, position: Optional[int], index: int) -> str:
    """A layer no source name is known for (a Softmax or a Reshape without weights, whose TFLite
    tensor is named after TensorFlow's signature, `StatefulPartitionedCall:0`): its op and its
    position in the written model (`SOFTMAX #7`), else in the report's order."""
    return f"{op} #{position}" if position is not None else f"{op} (layer {index} of the report)"


def _context_for(context: Dict[str, TensorContext], name: str, op: str) -> TensorContext:
    """The written model's facts about a debugger row: by tensor name, else (a model output,
    which the converter renames `X:01` before the final QUANTIZE makes `X:0`) the same op whose
    output name extends it."""
    info = context.get(name)
    if info is not None and info.get("op") in (None, op):
        return {k: v for k, v in info.items() if k != "op"}
    for key, value in context.items():
        if key.startswith(name) and value.get("op") == op:
            return {k: v for k, v in value.items() if k != "op"}
    return {}


def _model_context(tflite: TfliteModel, data: bytes) -> Dict[str, TensorContext]:
    """Per output tensor name: the weights' per-channel range ratio, a Softmax's class count,
    the input scale ratio of a mixing op."""
    read = constant_reader(data)
    out = {}
    for op in tflite.operators:
        if not op.outputs or op.outputs[0] < 0:
            continue
        name = tflite.tensors[op.outputs[0]].name
        info: TensorContext = {"op": op.op, "op_index": op.index}
        if len(op.inputs) > 1 and op.inputs[1] >= 0 and tflite.tensors[op.inputs[1]].is_constant:
            info["weights_name"] = tflite.tensors[op.inputs[1]].name
        if op.op in WEIGHTED_OPS and len(op.inputs) > 1 and op.inputs[1] >= 0:
            ratio = _weight_ratio(tflite.tensors[op.inputs[1]], read, WEIGHTED_OPS[op.op])
            if ratio is not None:
                info["weight_range_ratio"] = round(ratio, 1)
        if op.op == "SOFTMAX":
            info["classes"] = int(tflite.tensors[op.outputs[0]].shape[-1])
        scales = [tflite.tensors[i].quantization.per_tensor[0] for i in op.inputs
                  if i >= 0 and tflite.tensors[i].quantization and not tflite.tensors[i].is_constant]
        scales = [s for s in scales if s > 0]
        if len(scales) >= 2:
            info["input_scale_ratio"] = round(max(scales) / min(scales), 2)
        out[name] = info
    return out


def _weight_ratio(tensor, read, axis: int) -> Optional[float]:
    raw = read(tensor)
    if raw is None or tensor.dtype != "int8" or not tensor.quantization:
        return None
    values = np.frombuffer(raw, np.int8).astype(np.float64).reshape(tensor.shape)
    scales = np.asarray(tensor.quantization.scale, np.float64)
    q_axis = tensor.quantization.quantized_dimension if len(scales) > 1 else axis
    if len(scales) > 1:
        shape = [1] * values.ndim
        shape[q_axis] = len(scales)
        values = values * scales.reshape(shape)
    return channel_range_ratio(values, q_axis)


def silent_layers(floored: list, layer_names: dict) -> List[SilentLayer]:
    """The layers whose range quantize.py floored (requantize.Floored), named by their source:
    a branch no calibration image fires, worth saying whatever --report says."""
    rows: List[SilentLayer] = []
    for f in floored:
        name = (source_layer(f.tensor, layer_names) or source_name(f.tensor)
                or f.tensor.split(";")[0])
        rows.append({"layer": name, "tensor": f.tensor, "recorded": [round(v, 6) for v in f.recorded],
                     "floored": [float(f"{v:.4g}") for v in f.floored]})
    return rows


def silent_line(row: SilentLayer) -> str:
    """One silent layer as `convert` says it."""
    low, high = row["recorded"]
    return (f"warning: layer {row['layer']} stays within {low:g}..{high:g} on every calibration image "
            f"(a branch they never fire): its int8 range floored to {row['floored'][0]:g}.."
            f"{row['floored'][1]:g} so that the model runs; calibrate on images that exercise it")


def mark_silent(layers: list, silent: List[SilentLayer]) -> None:
    """The --report rows of silent layers say so, as their cause."""
    tensors = {s["tensor"]: s for s in silent}
    for layer in layers:
        s = tensors.get(layer["name"])
        if s is not None:
            layer["silent"] = True
            layer["cause"] = (f"it stays within {s['recorded'][0]:g}..{s['recorded'][1]:g} on every "
                              "calibration image: its range was floored so that the model runs")
            layer["fix"] = "calibrate on images that exercise this branch"
