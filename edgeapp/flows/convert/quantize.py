"""The one full-integer quantization every source format goes through.

A float model's batch-1 NHWC SavedModel, calibrated on the user's images preprocessed as
inference will preprocess them: TFLITE_BUILTINS_INT8 only (no Flex ops), per-channel weights,
uint8 (or int8) input and output; operators newer than compiler 16 replaced by older ones with
the same int8 result (core/tflite/patch.py). The result is validated and run through edgeapp's own `check`
before anything is written, so a failed conversion leaves no model behind; so is a model the
runtime refuses to run. A tensor whose calibrated range is finer than one step of the products
that make it (a branch no calibration image fires: its range 0..0) would get an int8 step of
1e-9 and a requantization the CPU runtime refuses; such ranges are floored to that step (no
resolution is lost: the accumulator has none finer) and named.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np

from edgeapp.core.edgetpu.check_report import check_model
from edgeapp.core.tflite.model import TfliteModel, parse_model
from edgeapp.core.tflite.patch import older_equivalents
from edgeapp.errors import ConvertError
from edgeapp.flows.convert import requantize as rq
from edgeapp.flows.convert.data import write_atomic
from edgeapp.flows.sources.base import FloatModel, first_line
from edgeapp.hw.native_stderr import filtered_native_stderr


@dataclass
class Quantized:
    flatbuffer: bytes
    model: TfliteModel  # the parsed, validated graph
    checked: object  # core.check_report.CheckResult: what edgetpu_compiler 16 will map
    swapped: list  # operators replaced by older equivalents the compiler knows
    floored: list = field(default_factory=list)  # tensors whose silent range was floored (requantize.Floored)


@contextlib.contextmanager
def exported(model: FloatModel) -> Iterator[str]:
    """The float model as a batch-1 NHWC SavedModel in a temporary folder, for the block."""
    with tempfile.TemporaryDirectory(prefix="edgeapp-export-") as tmp:
        try:
            model.export(tmp)
        except MemoryError:
            raise ConvertError("not enough memory to export the float model") from None
        except Exception as e:  # TensorFlow's tracing raises many types
            raise ConvertError(f"cannot export the float model for TensorFlow Lite (the source converter "
                               f"made a graph TensorFlow cannot run): {first_line(e)}") from None
        yield tmp


def quantize(saved_model: str, calibration: np.ndarray, out: Path, io_type: str = "uint8",
             progress: Optional[Callable[[], None]] = None) -> Quantized:
    """Full-integer post-training quantization; `out` is written only when the result is fully
    int8 (through a temporary file and a rename), after `check` has read it."""
    converter = rq.make_converter(saved_model, calibration, io_type, progress)
    try:
        with filtered_native_stderr():
            flatbuffer = converter.convert()
    except MemoryError:
        raise ConvertError("not enough memory to quantize this model") from None
    except Exception as e:  # the converter raises ConverterError and friends
        raise ConvertError(f"TFLite converter failed: {first_line(e)}") from None
    floored: list = []
    if finer_than_products(parse_model(flatbuffer, str(out))):
        floored_data, floored = rq.floor_ranges(rq.calibrate(saved_model, calibration, io_type).data)
        flatbuffer = rq.requantize(floored_data, io_type)
    flatbuffer, swapped = older_equivalents(flatbuffer)
    tflite = parse_model(flatbuffer, str(out))
    bad = non_integer_ops(tflite, io_type)
    if bad:
        raise ConvertError(f"the converted model is not fully int8 ({out} not written): float "
                           f"tensors in {', '.join(bad)}; these operations have no int8 kernel")
    checked = check_model(tflite, flatbuffer)
    write_runnable(out, flatbuffer)
    return Quantized(flatbuffer, parse_model(flatbuffer, str(out)), checked, swapped, floored)


WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV")


def finer_than_products(model: TfliteModel) -> list:
    """Weighted ops whose output int8 step is finer than one input step times one weight step
    (a requantization multiplier above 1): a range the calibration images never opened."""
    found = []
    for op in model.operators:
        if op.op not in WEIGHTED or len(op.inputs) < 2 or not op.outputs:
            continue
        data = op.inputs[2] if op.op == "TRANSPOSE_CONV" else op.inputs[0]
        tensors = [model.tensors[i] for i in (data, op.inputs[1], op.outputs[0]) if i >= 0]
        if len(tensors) < 3 or not all(t.quantization and len(t.quantization.scale) for t in tensors):
            continue
        x, w, y = tensors
        step = float(x.quantization.scale[0]) * float(max(w.quantization.scale))
        if y.quantization.scale[0] > 0 and step / float(y.quantization.scale[0]) > 1.0 + 1e-6:
            found.append(op.index)
    return found


def write_runnable(out: Path, flatbuffer: bytes) -> None:
    """Write `out` only once the CPU runtime has opened and run the model once (through
    edgeapp's crash-safe check): a model the runtime refuses is a failed conversion (exit 6),
    never a file left without its sidecar."""
    from edgeapp.errors import EdgeappError
    from edgeapp.flows.convert.data import make_output_folder
    from edgeapp.hw.runtime import open_engine

    make_output_folder(out)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.stem}.") as tmp:
        trial = Path(tmp) / out.name
        trial.write_bytes(flatbuffer)
        try:
            engine = open_engine(trial, "cpu")
            engine.run(np.zeros(engine.input_shape, engine.input_dtype))
        except EdgeappError as e:
            raise ConvertError(f"the converted model cannot be run ({out} not written): "
                               f"{str(e).replace(str(trial), out.name)}") from None
    write_atomic(out, flatbuffer)


def non_integer_ops(model: TfliteModel, io_type: str = "uint8") -> list[str]:
    """Operators touching tensors that are not int8/uint8 (int32 allowed for bias and shapes)."""
    io = set(model.inputs) | set(model.outputs)
    bad = []
    for op in model.operators:
        for t in (model.tensors[i] for i in op.inputs + op.outputs if i >= 0):
            if t.dtype in ("int8", "uint8", "int32"):
                continue
            if io_type == "float32" and t.index in io and op.op in ("QUANTIZE", "DEQUANTIZE"):
                continue
            bad.append(f"{op.op} #{op.index}")
            break
    return bad

