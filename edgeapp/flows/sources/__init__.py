"""Float models as their source formats give them (Keras, a SavedModel, ONNX), shared by `convert`
(which quantizes them) and `eval` (which runs them as the float original): neither imports the
other for them.

  __init__.py      which format a path is, before anything is loaded
  base.py          the float model every format hands over, and the one TensorFlow import
  source.py        a source format as convert reads it (loading, calibration fit, agreement,
                   labels, task, sidecar layout); flows/convert/ implements it for ONNX and
                   Ultralytics YOLO ONNX exports
  keras.py         .keras / .h5 / SavedModel -> FloatModel, and its source
  float_engine.py  a float source as an engine the batch pipeline runs like a .tflite (ONNX Runtime)

TensorFlow, onnx and ONNX Runtime are imported only inside functions: `edgeapp --help`,
`classify` and an `eval` of a .tflite never pay for them.
"""

from __future__ import annotations

from pathlib import Path

from edgeapp.errors import InvalidModel

ONNX_SUFFIXES = (".onnx",)
KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
TORCH_SUFFIXES = (".pt", ".pth", ".pt2", ".torchscript")


def source_format(path: Path) -> str:
    """"onnx" or "keras" (a file or a SavedModel folder), by name, before anything is loaded;
    a missing model is exit 4, as for every other command."""
    if not path.exists():
        raise InvalidModel(f"model not found: {path}")
    suffix = path.suffix.lower()
    if path.is_dir() or suffix in KERAS_SUFFIXES:
        return "keras"
    if suffix in ONNX_SUFFIXES:
        return "onnx"
    if suffix in TORCH_SUFFIXES:
        raise InvalidModel(f"{path}: a PyTorch file; export it to ONNX first (torch.onnx.export, "
                           "see docs/onnx-and-pytorch.md), then convert the .onnx")
    raise InvalidModel(f"{path}: expected a .keras, .h5 or .onnx file or a SavedModel folder")
