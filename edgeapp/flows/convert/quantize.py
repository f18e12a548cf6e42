"""The one full-integer quantization every source format goes through.

A float model's batch-1 NHWC SavedModel, calibrated on the user's images preprocessed as
inference will preprocess them: TFLITE_BUILTINS_INT8 only (no Flex ops), per-channel weights,
uint8 (or int8) input and output; operators newer than compiler 16 replaced by older ones with
the same int8 result (core/tflite/patch.py). The result is validated and run through edgeapp's own `check`
before anything is written, so a failed conversion leaves no model behind.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np

from edgeapp.core.edgetpu.check_report import check_model
from edgeapp.core.tflite.model import TfliteModel, parse_model
from edgeapp.core.tflite.patch import older_equivalents
from edgeapp.errors import ConvertError
from edgeapp.flows.convert.data import write_atomic
from edgeapp.flows.sources.base import FloatModel, first_line, tensorflow
from edgeapp.hw.native_stderr import filtered_native_stderr


@dataclass
class Quantized:
    flatbuffer: bytes
    model: TfliteModel  # the parsed, validated graph
    checked: object  # core.check_report.CheckResult: what edgetpu_compiler 16 will map
    swapped: list  # operators replaced by older equivalents the compiler knows


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


def quantize(saved_model: str, calibration: np.ndarray, out: Path, io_type: str = "uint8",
             progress: Optional[Callable[[], None]] = None) -> Quantized:
    """Full-integer post-training quantization; `out` is written only when the result is fully
    int8 (through a temporary file and a rename), after `check` has read it."""
    converter = make_converter(saved_model, calibration, io_type, progress)
    try:
        with filtered_native_stderr():
            flatbuffer = converter.convert()
    except MemoryError:
        raise ConvertError("not enough memory to quantize this model") from None
    except Exception as e:  # the converter raises ConverterError and friends
        raise ConvertError(f"TFLite converter failed: {first_line(e)}") from None
    flatbuffer, swapped = older_equivalents(flatbuffer)
    tflite = parse_model(flatbuffer, str(out))
    bad = non_integer_ops(tflite, io_type)
    if bad:
        raise ConvertError(f"the converted model is not fully int8 ({out} not written): float "
                           f"tensors in {', '.join(bad)}; these operations have no int8 kernel")
    checked = check_model(tflite, flatbuffer)
    write_atomic(out, flatbuffer)
    return Quantized(flatbuffer, tflite, checked, swapped)


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

