"""Calibrate once, quantize many times: what `--max-drop` and `--report` try.

TensorFlow Lite's converter calibrates (runs the float model on every calibration image and
records each tensor's min/max) and then quantizes from those ranges. Calibration is the slow
part; quantizing a calibrated model again is a fraction of a second. So the trials start from
one calibrated model and change only what they change: the recorded ranges (re-measured, or
clipped at a percentile), per-channel weights of dense layers, or nodes kept in float
(`denylisted_nodes`, the mechanism of TensorFlow's QuantizationDebugger).

Re-measuring matters: the calibrator logs a tensor after its consumer ran, so a tensor an ADD
overwrites in place is recorded with the ADD's range (a ReLU at 0..7 gets 0..400 when the ADD
adds an outlier); the float model run here keeps every tensor, so its ranges are the real ones.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core.quant.tune import RangeStats
from edgeapp.errors import ConvertError
from edgeapp.flows.sources.base import first_line, tensorflow
from edgeapp.hw.native_stderr import filtered_native_stderr


@dataclass
class Calibrated:
    """A calibrated float model (TFLite bytes whose tensors carry min/max) and what ran it."""

    data: bytes
    io: str
    samples: int
    op_outputs: list = field(default_factory=list)  # output tensor name of every op, in order
    producers: dict = field(default_factory=dict)  # op output name -> the op outputs it reads
    stats: dict = field(default_factory=dict)  # tensor index -> RangeStats (measure_ranges)


def make_converter(saved_model: str, calibration: np.ndarray, io_type: Optional[str],
                   progress: Optional[Callable[[], None]] = None):
    """TensorFlow Lite's converter set up for full-integer int8 (io_type None: float I/O, as
    the quantization debugger wants it)."""
    tf = tensorflow()

    def samples():
        for i in range(len(calibration)):
            yield [calibration[i:i + 1]]
            if progress is not None:
                progress()

    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = samples
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if io_type is not None:
        dtypes = {"uint8": tf.uint8, "int8": tf.int8, "float32": tf.float32}
        converter.inference_input_type = dtypes[io_type]
        converter.inference_output_type = dtypes[io_type]
    return converter


def calibrate(saved_model: str, calibration: np.ndarray, io: str) -> Calibrated:
    """The converter's calibration alone (`_experimental_calibrate_only`)."""
    converter = make_converter(saved_model, calibration, io)
    converter._experimental_calibrate_only = True
    try:
        with filtered_native_stderr():
            data = bytes(converter.convert())
    except MemoryError:
        raise ConvertError("not enough memory to calibrate this model") from None
    except Exception as e:  # the converter raises ConverterError and friends
        raise ConvertError(f"TFLite converter failed: {first_line(e)}") from None
    obj = _object(data)
    sg = obj.subgraphs[0]
    made = {int(op.outputs[0]): _name(sg.tensors[op.outputs[0]]) for op in sg.operators if len(op.outputs)}
    outputs = [_name(sg.tensors[op.outputs[0]]) for op in sg.operators if len(op.outputs)]
    producers = {_name(sg.tensors[op.outputs[0]]): [made[int(i)] for i in op.inputs if int(i) in made]
                 for op in sg.operators if len(op.outputs)}
    return Calibrated(data, io, len(calibration), outputs, producers)


def _object(data: bytes):
    from tensorflow.lite.tools import flatbuffer_utils

    return flatbuffer_utils.convert_bytearray_to_object(bytearray(data))


def _name(tensor) -> str:
    name = tensor.name
    return name.decode() if isinstance(name, bytes) else str(name)


def interpreter(data: bytes, keep_all: bool = False):
    """TensorFlow's own interpreter (the one its quantization debugger uses), quietly."""
    tf = tensorflow()
    with warnings.catch_warnings(), filtered_native_stderr():  # "INFO: Created ... XNNPACK delegate"
        warnings.simplefilter("ignore")  # its deprecation notice and the keep-all warning
        it = tf.lite.Interpreter(model_content=data, experimental_preserve_all_tensors=keep_all)
        it.allocate_tensors()
    return it


def measure_ranges(cal: Calibrated, calibration: np.ndarray) -> None:
    """Each recorded tensor's real values over the calibration images (min, max, |x| histogram),
    from the float model with every tensor kept."""
    obj = _object(cal.data)
    sg = obj.subgraphs[0]
    inputs = set(int(i) for i in sg.inputs)
    ranged = {}
    for i, t in enumerate(sg.tensors):
        q = t.quantization
        if i in inputs or q is None or q.min is None or q.max is None or len(q.min) != 1:
            continue
        ranged[i] = RangeStats(float(q.min[0]), float(q.max[0]))
    it = interpreter(cal.data, keep_all=True)
    feed = it.get_input_details()[0]["index"]
    for k in range(len(calibration)):
        it.set_tensor(feed, calibration[k:k + 1].astype(np.float32))
        it.invoke()
        for i, stats in ranged.items():
            stats.add(it.get_tensor(i))
    cal.stats = ranged


def with_ranges(cal: Calibrated, percentile: Optional[float] = None, ratio: float = 4.0) -> tuple:
    """(calibrated bytes, changed tensor names): every range re-measured; with `percentile`,
    the ranges `ratio` times wider than that percentile of |x| also clipped to it."""
    from tensorflow.lite.tools import flatbuffer_utils

    obj = _object(cal.data)
    sg = obj.subgraphs[0]
    changed = []
    for i, stats in cal.stats.items():
        low, high = stats.measured()
        if percentile is not None:
            low, high, clipped = stats.clipped(percentile, ratio, low, high)
            if clipped:
                changed.append(_name(sg.tensors[i]))
        q = sg.tensors[i].quantization
        q.min = np.array([low], np.float32)
        q.max = np.array([high], np.float32)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(obj)), changed


class Narrowed(TypedDict):
    """What re-measuring the ranges changed: tensors ranged, how many it narrowed by more than
    1%, and the most (the ratio of the spans, 1.0: none)."""

    tensors: int
    narrowed: int
    narrowed_most: float


def narrowed(cal: Calibrated) -> Narrowed:
    """How much re-measuring changes (after measure_ranges): of the `tensors` ranged, how many a
    re-measured range `narrowed` by more than 1%, and the most (the ratio of the spans)."""
    ratios = []
    for stats in cal.stats.values():
        low, high = stats.measured()
        span = high - low
        if span > 0 and (stats.cal_max - stats.cal_min) > 1.01 * span:
            ratios.append((stats.cal_max - stats.cal_min) / span)
    return {"tensors": len(cal.stats), "narrowed": len(ratios),
            "narrowed_most": round(max(ratios), 1) if ratios else 1.0}


@dataclass(frozen=True)
class Floored:
    """A tensor whose calibrated range was floored: its name, the range calibration recorded,
    the one it got."""

    tensor: str
    recorded: tuple
    floored: tuple


FLOORED_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def floor_ranges(calibrated: bytes) -> tuple:
    """(calibrated bytes, [Floored]): each weighted op's output range made at least 255 steps
    of one input step times its largest weight step (int8 steps: range / 255, |w| / 127), so the
    requantization multiplier stays at most 1. Only a range calibration never opened (a branch
    that stays at 0 on every image) is that narrow; the others are untouched."""
    from tensorflow.lite.tools import flatbuffer_utils

    obj = _object(calibrated)
    sg = obj.subgraphs[0]
    codes = {i: _op_name(c) for i, c in enumerate(obj.operatorCodes)}
    floored = []
    for op in sg.operators:
        if codes.get(op.opcodeIndex) not in FLOORED_OPS or len(op.inputs) < 2 or not len(op.outputs):
            continue
        x, w, y = (sg.tensors[int(i)] for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
        weights = obj.buffers[w.buffer].data if w.buffer < len(obj.buffers) else None
        if not _ranged(x) or not _ranged(y) or weights is None or not len(weights) or w.type != 0:  # 0: FLOAT32
            continue
        x_span = max(float(x.quantization.max[0]), 0.0) - min(float(x.quantization.min[0]), 0.0)
        w_max = float(np.max(np.abs(np.frombuffer(bytes(weights), "<f4"))))
        low, high = float(y.quantization.min[0]), float(y.quantization.max[0])
        need = x_span * w_max / 127.0
        if need <= 0 or max(high, 0.0) - min(low, 0.0) >= need:
            continue
        new = (0.0, need) if low >= 0 else ((-need, 0.0) if high <= 0 else (-need / 2, need / 2))
        y.quantization.min = np.array([new[0]], np.float32)
        y.quantization.max = np.array([new[1]], np.float32)
        floored.append(Floored(_name(y), (low, high), new))
    return bytes(flatbuffer_utils.convert_object_to_bytearray(obj)), floored


def _ranged(tensor) -> bool:
    q = tensor.quantization
    return q is not None and q.min is not None and q.max is not None and len(q.min) == 1


def _op_name(code) -> str:
    from tensorflow.lite.python import schema_py_generated as schema

    builtin = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    return names.get(builtin, "")


def requantize(calibrated: bytes, io: str, denylisted: Optional[list] = None,
               dense_per_channel: bool = True, per_channel: bool = True) -> bytes:
    """The calibrated model quantized as the converter would (same MLIR pass, same I/O type);
    `denylisted` ops (by output tensor name) stay float; `per_channel` False: one scale per
    weight tensor (what Ultralytics' TFLite export forces)."""
    from tensorflow.lite.python import convert as tf_convert

    tf = tensorflow()
    dtypes = {"uint8": tf.uint8, "int8": tf.int8, "float32": tf.float32}
    try:
        with filtered_native_stderr():
            return bytes(tf_convert.mlir_quantize(
                calibrated, input_data_type=dtypes[io], output_data_type=dtypes[io],
                denylisted_nodes=list(denylisted or []) or None, disable_per_channel=not per_channel,
                disable_per_channel_for_dense_layers=not dense_per_channel))
    except MemoryError:
        raise ConvertError("not enough memory to quantize this model") from None
    except Exception as e:  # the MLIR quantizer's errors
        raise ConvertError(f"TFLite quantizer failed: {first_line(e)}") from None


def debug_model(calibrated: bytes) -> bytes:
    """The calibrated model quantized with TensorFlow's NumericVerify ops after each quantized op
    (float I/O): what its QuantizationDebugger runs (`QuantizationDebugger._get_quantized_model`)."""
    from tensorflow.lite.python import convert as tf_convert

    try:
        with filtered_native_stderr():
            return bytes(tf_convert.mlir_quantize(calibrated, enable_numeric_verify=True))
    except MemoryError:
        raise ConvertError("not enough memory to quantize this model") from None
    except Exception as e:  # the MLIR quantizer's errors
        raise ConvertError(f"TFLite quantizer failed: {first_line(e)}") from None


def run_float(data: bytes, x: np.ndarray) -> list:
    """Outputs of a float (or partly quantized, float-I/O) TFLite model, one (N, ...) per output."""
    it = interpreter(data)
    feed = it.get_input_details()[0]
    outs = it.get_output_details()
    got = []
    for k in range(len(x)):
        it.set_tensor(feed["index"], x[k:k + 1].astype(np.float32))
        it.invoke()
        got.append([np.array(it.get_tensor(o["index"]), np.float32) for o in outs])
    return [np.concatenate([g[j] for g in got]) for j in range(len(outs))]
