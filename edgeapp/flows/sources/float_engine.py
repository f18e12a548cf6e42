"""A float source (ONNX on ONNX Runtime, Keras or a SavedModel on TensorFlow) as an engine the
batch pipeline runs like a .tflite: one NHWC float image in, its outputs out, so `eval` runs
the float original through the same task code (preprocessing, decoding, metric) as its int8.

ONNX runs on ONNX Runtime from the file itself (an NCHW input gets the NHWC image transposed);
Keras through the shared loader (flows/sources/keras.py). An Ultralytics YOLO ONNX export
gives its boxes in input pixels where its TFLite export gives them normalized: they are
normalized here, so the one YOLO decoder (core/vision/yolo.py) reads both. Its metadata (class names,
pixels / 255, its task) is read from the ONNX file's metadata_props.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Callable, List, Optional

import numpy as np

from edgeapp.core.meta import ModelMeta, metadata_names
from edgeapp.errors import InvalidModel, MissingDependency
from edgeapp.flows.sources import source_format
from edgeapp.flows.sources.base import FloatModel, first_line
from edgeapp.flows.sources.keras import load_keras
from edgeapp.hw.runtime import Engine

ULTRALYTICS_DETECT = "detect"  # Ultralytics' metadata name ('task') of its detection exports


class FloatEngine(Engine):
    """What the runners and tasks ask of an engine (hw/runtime.Engine), over a float model's
    predict function."""

    device = "cpu"
    notice: Optional[str] = None
    cpu_kernels = "float"

    def __init__(self, path: Path, run: Callable[[np.ndarray], List[np.ndarray]],
                 input_shape: tuple, output_shapes: List[tuple], runtime: str,
                 meta: ModelMeta, close: Callable[[], None] = lambda: None) -> None:
        self._run, self.close, self.meta = run, close, meta
        self.name = f"float on {runtime}"
        self.runtime = runtime
        self.model_path = self.requested_model = str(path)
        self.model = SimpleNamespace(path=str(path), operators=[])  # type: ignore[assignment]
        self.inputs = [{"index": 0, "shape": np.array(input_shape), "dtype": np.float32,
                        "quantization": (0.0, 0)}]
        self.input = self.inputs[0]
        self.outputs = [{"index": i, "shape": np.array(s), "dtype": np.float32,
                         "quantization": (0.0, 0)} for i, s in enumerate(output_shapes)]
        self.input_shape = tuple(int(d) for d in input_shape)
        self.input_dtype = np.dtype(np.float32)
        self.input_quantization = (0.0, 0)

    def run(self, tensor: np.ndarray) -> List[np.ndarray]:
        return self._run(tensor.astype(np.float32, copy=False))


def is_float_source(path: Path) -> bool:
    """A model `eval` runs as a float original (ONNX, Keras, a SavedModel folder)."""
    return path.is_dir() or path.suffix.lower() in (".onnx", ".keras", ".h5", ".hdf5")


def open_float(path: Path) -> FloatEngine:
    """The float model at `path` as an engine (InvalidModel, MissingDependency as convert says)."""
    if source_format(path) == "onnx":
        return _onnx(path)
    return _keras(path)


def _keras(path: Path) -> FloatEngine:
    return engine_for(path, load_keras(path), ModelMeta())


def engine_for(path: Path, model: FloatModel, meta: ModelMeta) -> FloatEngine:
    """An engine over a loaded flows/sources FloatModel (what `convert --eval` measures);
    `meta` says its labels, normalization and, for an Ultralytics export, its task."""
    h, w, c = model.input_shape
    outs = [tuple(o.shape) for o in model.predict(np.zeros((1, h, w, c), np.float32))]
    scale = _yolo_box_scale(meta, outs, (w, h))

    def run(x: np.ndarray) -> List[np.ndarray]:
        return _normalized_boxes(model.predict(x), scale)

    return FloatEngine(path, run, (1, h, w, c), outs, model.runtime, meta, model.close)


def _normalized_boxes(got: List[np.ndarray], scale: Optional[np.ndarray]) -> List[np.ndarray]:
    if scale is not None:
        got = list(got)
        got[0] = got[0] / scale
    return got


def _onnx(path: Path) -> FloatEngine:
    try:
        import onnxruntime as ort
    except ImportError:
        raise MissingDependency("running an ONNX model needs ONNX Runtime: pip install "
                                "'edgeapp[convert,onnx]'") from None
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # ONNX Runtime's own types for a file it cannot read or run
        raise InvalidModel(f"{path}: ONNX Runtime cannot run it: {first_line(e)}") from None
    inputs = session.get_inputs()
    if len(inputs) != 1 or len(inputs[0].shape) != 4:
        raise InvalidModel(f"{path}: expected one image input, got "
                           f"{[tuple(i.shape) for i in inputs]}")
    dims = list(inputs[0].shape)
    nchw = dims[1] in (1, 3) and dims[3] not in (1, 3)
    h, w, c = (dims[2], dims[3], dims[1]) if nchw else (dims[1], dims[2], dims[3])
    if not all(isinstance(d, int) for d in (h, w, c)):
        raise InvalidModel(f"{path}: input {dims} has a symbolic size: export it with a fixed one")
    meta = meta_from_props(session.get_modelmeta().custom_metadata_map or {})
    name = inputs[0].name
    outs = [tuple(d if isinstance(d, int) else 1 for d in o.shape) for o in session.get_outputs()]
    scale = _yolo_box_scale(meta, outs, (w, h))

    def run(x: np.ndarray) -> List[np.ndarray]:
        return _normalized_boxes(session.run(None, {name: x.transpose(0, 3, 1, 2) if nchw else x}),
                                 scale)

    return FloatEngine(path, run, (1, h, w, c), outs, "ONNX Runtime", meta)


def meta_from_props(props: dict) -> ModelMeta:
    """An ONNX file's metadata_props: Ultralytics' (names, task; it takes pixels / 255), else
    nothing."""
    if "names" not in props:
        return ModelMeta()
    return ModelMeta(labels=metadata_names(props), mean=0.0, std=255.0,
                     ultralytics_task=props.get("task"), source="Ultralytics metadata")


def _yolo_box_scale(meta: ModelMeta, outs: List[tuple], size: tuple) -> Optional[np.ndarray]:
    """(w, h, w, h) to divide an Ultralytics detection export's box rows by, or None."""
    if meta.ultralytics_task != ULTRALYTICS_DETECT or len(outs) != 1 or len(outs[0]) != 3:
        return None
    w, h = size
    scale = np.ones((outs[0][1], 1), np.float32)  # rows: cx, cy, w, h, then class scores
    scale[:4, 0] = (w, h, w, h)
    return scale
