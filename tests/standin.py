"""The stand-in Edge TPU and compiled-looking models, for tests and scripts without hardware.

`build_standin` compiles tests/fake_edgetpu/fake_edgetpu.c (see its header: N devices, the
`edgetpu-custom-op` computed deterministically from its input bytes, a delay per invoke that
may grow, failure on demand, an unplug that comes back after re-enumeration, and a log of the
options each delegate was given). edgeapp loads it through EDGEAPP_EDGETPU_LIB exactly as it loads
libedgetpu, so everything above the delegate is the real code path: the TFLite runtime, the
delegate loading, device listing through the C API, interpreters, threads and queues.

`write_segments` writes a segment set shaped like `edgetpu_compiler --num_segments` output:
each segment one `edgetpu-custom-op` between named tensors (optionally followed by a CPU op in
the last segment, as SSD's post-process is), with a tensor that skips a segment.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

SOURCE = Path(__file__).resolve().parent / "fake_edgetpu" / "fake_edgetpu.c"
ENV_KEYS = ("FAKE_EDGETPU_DEVICES", "FAKE_EDGETPU_DELAY_MS", "FAKE_EDGETPU_FAIL", "FAKE_EDGETPU_LOG",
            "FAKE_EDGETPU_OPTIONS", "FAKE_EDGETPU_DELAY_STEP_MS", "FAKE_EDGETPU_UNPLUG")
_configurations = itertools.count()  # an unplug happens once per configuration


def c_compiler() -> Optional[str]:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")


def build_standin(folder: Path) -> Path:
    """Compile the stand-in library into `folder`; RuntimeError without a C compiler."""
    cc = c_compiler()
    if cc is None or sys.platform == "win32":
        raise RuntimeError("needs a C compiler (cc, gcc or clang) to build the stand-in Edge TPU")
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "libedgetpu_standin.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(SOURCE)], check=True)
    return out


def standin_env(library: Path, devices: str = "usb,usb", delay_ms: float = 0.0,
                fail: Optional[str] = None, *, delay_step_ms: float = 0.0, unplug: Optional[str] = None,
                options_log: Optional[Path] = None) -> dict:
    """The environment that points edgeapp at the stand-in with these devices.

    `fail` "usb:1@3": that device fails every invoke after its first 3. `unplug` "usb:0@3/2":
    it is unplugged after 3 invokes and back after 2 attempts to open it ("/-1": never).
    `delay_step_ms`: each invoke of a delegate takes that much longer than the one before.
    `options_log`: each delegate appends "<device> key=value ..." (the options it was given)."""
    env = {"EDGEAPP_EDGETPU_LIB": str(library), "FAKE_EDGETPU_DEVICES": devices,
           "FAKE_EDGETPU_DELAY_MS": str(delay_ms), "EDGEAPP_NO_PROBE": "1"}
    if fail:
        env["FAKE_EDGETPU_FAIL"] = fail
    if delay_step_ms:
        env["FAKE_EDGETPU_DELAY_STEP_MS"] = str(delay_step_ms)
    if unplug:
        env["FAKE_EDGETPU_UNPLUG"] = f"{unplug}#{os.getpid()}-{next(_configurations)}"
    if options_log is not None:
        env["FAKE_EDGETPU_OPTIONS"] = str(options_log)
    return env


# -- segment sets ------------------------------------------------------------------------------

def _tensor(schema, name: str, shape: Sequence[int], dtype: str, scale: float = 0.0, zero: int = 0):
    t = schema.TensorT()
    t.name, t.shape, t.buffer = name, list(shape), 0
    t.type = {"uint8": schema.TensorType.UINT8, "int8": schema.TensorType.INT8,
              "float32": schema.TensorType.FLOAT32}[dtype]
    if scale:
        q = schema.QuantizationParametersT()
        q.scale, q.zeroPoint = [scale], [zero]
        t.quantization = q
    return t


def write_model(path: Path, inputs: list, outputs: list, dequantize_tail: bool = False) -> Path:
    """One `edgetpu-custom-op` from `inputs` to `outputs` ((name, shape, dtype, scale, zero)
    each); with `dequantize_tail`, a CPU DEQUANTIZE after it turns the first output into a
    float32 tensor named `<name>_float`, which is then the model's output."""
    import flatbuffers
    from conftest import tflite_schema

    schema = tflite_schema()
    tensors = [_tensor(schema, *spec) for spec in inputs + outputs]
    n_in = len(inputs)
    custom = schema.OperatorCodeT()
    custom.builtinCode = custom.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    custom.customCode, custom.version = "edgetpu-custom-op", 1
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs = 0, list(range(n_in))
    op.outputs = list(range(n_in, n_in + len(outputs)))
    op.customOptions = list(b"stand-in compiled segment")
    ops, codes, model_outputs = [op], [custom], list(op.outputs)
    if dequantize_tail:
        name, shape = outputs[0][0], outputs[0][1]
        tensors.append(_tensor(schema, f"{name}_float", shape, "float32"))
        deq = schema.OperatorCodeT()
        deq.builtinCode = deq.deprecatedBuiltinCode = schema.BuiltinOperator.DEQUANTIZE
        deq.version = 1
        tail = schema.OperatorT()
        tail.opcodeIndex, tail.inputs, tail.outputs = 1, [n_in], [len(tensors) - 1]
        ops.append(tail)
        codes.append(deq)
        model_outputs = [len(tensors) - 1] + model_outputs[1:]
    sg = schema.SubGraphT()
    sg.tensors, sg.inputs, sg.outputs, sg.operators, sg.name = tensors, list(range(n_in)), \
        model_outputs, ops, "main"
    m = schema.ModelT()
    m.version, m.operatorCodes, m.subgraphs, m.description = 3, codes, [sg], "stand-in segment"
    m.buffers = [schema.BufferT()]
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    path.write_bytes(b.Output())
    return path


IMAGE = ("image", (1, 16, 16, 3), "uint8", 1 / 255, 0)
A = ("stage_a", (1, 8, 8, 4), "uint8", 0.05, 3)
B = ("skip_b", (1, 6), "uint8", 0.1, 0)  # made by segment 0, read by segment 2: skips segment 1
C = ("stage_c", (1, 16), "uint8", 0.02, 5)
SCORES = ("scores", (1, 3), "uint8", 1 / 256, 0)


def write_segments(folder: Path, base: str = "colors", dequantize_tail: bool = False,
                   output=SCORES) -> list[Path]:
    """X_segment_{0,1,2}_of_3_edgetpu.tflite: image -> (a, b); a -> c; (c, b) -> scores."""
    folder.mkdir(parents=True, exist_ok=True)
    plan = [([IMAGE], [A, B]), ([A], [C]), ([C, B], [output])]
    return [write_model(folder / f"{base}_segment_{i}_of_3_edgetpu.tflite", ins, outs,
                        dequantize_tail and i == 2)
            for i, (ins, outs) in enumerate(plan)]
