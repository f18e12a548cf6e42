"""ONNX (and so PyTorch) models as float models for the shared quantization.

onnx2tf turns the ONNX graph into a float TensorFlow graph, channels-last (an NCHW model gets
NHWC inputs and no TRANSPOSE per layer), batch 1, grouped convolutions split (compiler 16 does
not know CONV_2D version 6); edgeapp's own quantization then does the rest, exactly as for Keras.
The float original that agreement is measured against is ONNX Runtime running the file.

onnx2tf is told the graph is for int8 (its `output_integer_quantized_tflite`) while saving
nothing: it then pads MaxPool with 0 (PAD) instead of the float minimum (PADV2), which would set
that tensor's int8 range to ±3.4e38, is not on the Edge TPU, and which XNNPACK refuses.

onnx2tf runs in a temporary work folder seeded with the sample-data file it would otherwise
download (calibration_image_sample_data_20x128x128x3_float32.npy, made from the user's own
images), so converting never needs a network; its chatter goes to a log file, its progress to
the progress bar.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

from edgeapp.errors import ConvertError, MissingDependency
from edgeapp.flows.convert.attention import rewrite_attention
from edgeapp.flows.convert.onnx_graph import INSTALL, OnnxInput, fixed_model
from edgeapp.flows.convert.yolo_onnx import REG_MAX, join_levels
from edgeapp.flows.sources.base import FloatModel, Progress, first_line, no_progress, tensorflow
from edgeapp.hw.native_stderr import chatter_into

SAMPLE_DATA = "calibration_image_sample_data_20x128x128x3_float32.npy"  # what onnx2tf looks for
# Activations the Edge TPU lacks, built by onnx2tf from ops it has: HardSwish as x·ReLU6(x+3)·⅙
# with a ⅙ the TFLite converter does not fuse into HARD_SWISH (MobileNetV3: 5 of 190 ops mapped
# otherwise), LeakyReLU as max(0,x) + min(0,αx) (MAXIMUM/MINIMUM instead of LEAKY_RELU).
EDGETPU_PSEUDO_OPS = ("hardswish", "leakyrelu")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP = re.compile(r"INFO: (\d+) / (\d+)\s*$")
_NODE = re.compile(r"INFO: onnx_op_type: (\S+) onnx_op_name: (.+?)\s*$")


class _LogWatcher:
    """sys.stdout during onnx2tf: lines to the log without colour codes; each node's
    "INFO: k / N" line advances the progress bar; its last ERROR line kept for the message."""

    def __init__(self, log, advance, names_so_far=None) -> None:
        self.log, self.advance, self.buffer, self.errors = log, advance, "", []
        self.names_so_far = names_so_far  # () -> {(namespace, name): count} of Keras' name counters
        self.marks: list = []  # (ONNX node name, Keras name counters before its layers were made)

    def write(self, text: str) -> int:
        self.buffer += _ANSI.sub("", text)
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            self.log.write(line + "\n")
            if _STEP.search(line) and self.advance is not None:
                self.advance()
            elif line.startswith("ERROR:"):
                self.errors.append(line[6:].strip())
            node = _NODE.search(line)
            if node and self.names_so_far is not None:
                self.marks.append((node.group(2), self.names_so_far()))
        return len(text)

    def flush(self) -> None:
        self.log.flush()

    def isatty(self) -> bool:
        return False


def seed_sample_data(folder: Path, samples: np.ndarray) -> None:
    """onnx2tf's sample images, from the user's: 20 normalized model inputs at 128x128x3 (it
    resizes them to the model's size to check its own conversion)."""
    tf = tensorflow()
    x = samples[:20] if len(samples) >= 20 else np.resize(samples, (20, *samples.shape[1:]))
    if x.shape[-1] == 1:
        x = np.repeat(x, 3, axis=-1)
    resized = tf.image.resize(x.astype(np.float32), (128, 128)).numpy().astype(np.float32)
    np.save(folder / SAMPLE_DATA, resized)


def load_onnx(model, inp: OnnxInput, calibration: np.ndarray, log_path: Path,
              progress: Progress = no_progress, head=None) -> FloatModel:
    """The float TensorFlow graph of the ONNX model (onnx2tf), with ONNX Runtime as the float
    original. `calibration` (normalized NHWC inputs) seeds onnx2tf's sample data. `head`: the
    yolo_onnx.YoloHead whose Convs a cut YOLO graph ends at, joined into its two outputs."""
    work = Path(tempfile.mkdtemp(prefix="edgeapp-onnx-"))
    try:
        fixed = fixed_model(model, inp)
        graph, rewritten = edgetpu_graph(fixed, head)
        onnx_path = work / "model.onnx"
        _save(graph, onnx_path)
        seed_sample_data(work, calibration)
        keras_model = _run_onnx2tf(onnx_path, work, inp, len(graph.graph.node) + 1, log_path, progress)
        session = ort_session(fixed)  # the float original: the user's graph, not the rewrite
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return _float_model(keras_model, session, inp, work, head, rewritten)


def edgetpu_graph(fixed, head=None) -> tuple:
    """(what onnx2tf converts, notes): `fixed` with the blocks the Edge TPU cannot run as
    exported rewritten into the same float function in operators it maps (attention.py);
    a YOLO head records them for the sidecar."""
    graph, found = rewrite_attention(fixed)
    notes = [f"attention rewritten for the Edge TPU (the same float function; MatMul, Transpose "
             f"and Softmax as broadcast MUL, SUM and one SOFTMAX per row): {f}" for f in found]
    if head is not None:
        head.rewrites = list(found)
    return graph, notes


def _save(model, path: Path) -> None:
    import onnx

    big = model.ByteSize() > 1_800_000_000  # protobuf's 2 GB limit: weights beside the graph
    onnx.save(model, str(path), save_as_external_data=big)


def _run_onnx2tf(onnx_path: Path, work: Path, inp: OnnxInput, steps: int, log_path: Path,
                 progress: Progress):
    tensorflow()  # its import chatter filtered like the Keras path's, before the log takes over
    try:
        import onnx2tf
    except ImportError:
        raise MissingDependency(f"converting ONNX models needs onnx2tf: {INSTALL}") from None
    cwd = os.getcwd()
    with open(log_path, "w", encoding="utf-8", buffering=1) as log, progress(steps, "onnx2tf") as advance:
        watcher = _LogWatcher(log, advance, _keras_name_counters())
        try:
            os.chdir(work)  # where onnx2tf looks for its sample data
            with chatter_into(log, watcher):
                model = onnx2tf.convert(
                    input_onnx_file_path=str(onnx_path), output_folder_path=str(work / "onnx2tf"),
                    disable_model_save=True, batch_size=1, disable_group_convolution=True,
                    output_integer_quantized_tflite=True,  # only the int8-safe graph: see below
                    replace_to_pseudo_operators=list(EDGETPU_PSEUDO_OPS),
                    not_use_onnxsim=importlib_missing("onnxsim"),
                    keep_nwc_or_nhwc_or_ndhwc_input_names=[inp.name] if inp.layout == "NHWC" else None,
                    verbosity="debug")
            model.edgeapp_sources = _sources_by_counters(watcher.marks, _keras_name_counters())
            return model
        except MemoryError:
            raise ConvertError("not enough memory to convert this model with onnx2tf") from None
        except (Exception, SystemExit) as e:  # onnx2tf exits on some errors, raises on others
            raise ConvertError(_failure(e, watcher.errors, log_path)) from None
        finally:
            os.chdir(cwd)


def _keras_name_counters():
    """A function returning a copy of tf-keras' layer-name counters (which name the TF layers
    onnx2tf makes: tf.math.add, tf.math.add_1, ...), or None when tf-keras has them elsewhere."""
    try:
        from tf_keras.src import backend
    except ImportError:
        return None

    def snapshot() -> dict:
        return dict(backend.get_default_graph_uid_map())

    try:
        snapshot()
    except Exception:  # another tf-keras layout: names stay as onnx2tf gives them
        return None
    return snapshot


def _sources_by_counters(marks: list, final) -> dict:
    """TF layer name -> the ONNX node being converted when tf-keras named it: the counters
    between one node's mark and the next say which names that node's layers took."""
    if not marks or final is None:
        return {}
    out = {}
    bounds = [m[1] for m in marks[1:]] + [final()]
    for (node, before), after in zip(marks, bounds):
        for key, end in after.items():
            name = key[1] if isinstance(key, tuple) else key
            for n in range(before.get(key, 0), end):  # tf-keras names layers zero-based
                out[name if n == 0 else f"{name}_{n}"] = node
    return out


def importlib_missing(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


def _failure(e: BaseException, errors: list, log_path: Path) -> str:
    node = getattr(e, "onnx_op_name", None)
    what = next((m for m in reversed(errors) if m), None) if isinstance(e, SystemExit) else first_line(e)
    where = f" at node {node!r}" if node else ""
    return f"onnx2tf cannot convert this model{where}: {what or 'see the log'} (log: {log_path})"


def ort_session(model):
    try:
        import onnxruntime as ort
    except ImportError:
        raise MissingDependency(f"converting ONNX models needs ONNX Runtime: {INSTALL}") from None
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # ONNX Runtime refuses what it cannot run
        raise ConvertError(f"ONNX Runtime cannot run this model: {first_line(e)}") from None


def _float_model(keras_model, session, inp: OnnxInput, work: Path, head=None, notes=()) -> FloatModel:
    tf = tensorflow()
    shape = (inp.height, inp.width, inp.channels)
    if tuple(keras_model.inputs[0].shape) != (1, *shape):
        raise ConvertError(f"onnx2tf made input {tuple(keras_model.inputs[0].shape)}, expected {(1, *shape)}")
    out_names = [o.name for o in session.get_outputs()]
    joined = _joiner(keras_model, head)

    def call(x):
        y = keras_model(x)
        y = list(y) if isinstance(y, (list, tuple)) else [y]
        y = joined(y, tf.reshape, lambda ts: tf.concat(ts, axis=1))
        return {f"output_{i:03d}": t for i, t in enumerate(y)}  # names that sort in output order

    def export(folder: str) -> None:
        module = tf.Module()
        module.model = keras_model
        module.f = tf.function(call, input_signature=[tf.TensorSpec((1, *shape), tf.float32, name="input")])
        tf.saved_model.save(module, folder, signatures=module.f.get_concrete_function())

    def predict(x: np.ndarray) -> list:
        feed = x.transpose(0, 3, 1, 2) if inp.layout == "NCHW" else x
        runs = [session.run(None, {inp.name: feed[i:i + 1].astype(np.float32)}) for i in range(len(x))]
        outs = [np.concatenate([r[k] for r in runs]) for k in range(len(out_names))]
        if head is not None:  # the Convs' NCHW outputs as the TFLite model gives them
            outs = joined([o.transpose(0, 2, 3, 1) for o in outs], np.reshape,
                          lambda ts: np.concatenate(ts, axis=1))
        return outs

    names = _name_layers(keras_model)
    return FloatModel(shape, predict, export, ["boxes", "scores"] if head is not None else out_names,
                      runtime="ONNX Runtime", notes=list(inp.notes) + list(notes),
                      layer_names=names, close=lambda: shutil.rmtree(work, ignore_errors=True))


def _joiner(keras_model, head):
    """outputs -> outputs: a cut YOLO graph's channels-last Conv outputs joined into two
    (yolo_onnx.join_levels), checked against the head's grid; others as they are."""
    if head is None:
        return lambda outputs, reshape, concat: outputs
    widths = [4 * REG_MAX] * len(head.grids) + [head.nc] * len(head.grids)
    want = [(1, h, w, c) for (h, w), c in zip(head.grids * 2, widths)]
    got = [tuple(o.shape) for o in keras_model.outputs]
    if got != want:
        raise ConvertError(f"onnx2tf made the YOLO head's outputs {got}, expected channels-last {want}")
    return lambda outputs, reshape, concat: join_levels(outputs, head, reshape, concat)


_SCOPE_CHARS = re.compile(r"[^A-Za-z0-9_.\\/>-]")


def _name_layers(keras_model) -> dict:
    """TF layers renamed after the ONNX nodes they came from (onnx2tf passes each node's name to
    its TF op), so the TFLite tensors, `check` and the report name the user's layers; returns
    TF layer name -> ONNX node name."""
    names, taken = {}, {layer.name for layer in keras_model.layers}
    for layer in keras_model.layers:
        nodes = getattr(layer, "_inbound_nodes", None) or []
        source = (getattr(nodes[0], "call_kwargs", None) or {}).get("name") if nodes else None
        source = getattr(keras_model, "edgeapp_sources", {}).get(layer.name) or source
        if not isinstance(source, str) or not source:
            continue
        scope = _SCOPE_CHARS.sub("_", source).strip("/") or "node"
        if not scope[0].isalnum():
            scope = "n" + scope
        new, i = scope, 1
        while new in taken:
            i += 1
            new = f"{scope}_{i}"
        taken.add(new)
        try:
            layer._name = new
        except AttributeError:  # a Keras without the private attribute: keep its name
            new = layer.name
        names[new] = source
    return names
