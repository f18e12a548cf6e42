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
    if path.is_dir():
        return "keras"
    if suffix in KERAS_SUFFIXES:
        check_keras_signature(path)
        return "keras"
    if suffix in ONNX_SUFFIXES:
        return "onnx"
    if suffix in TORCH_SUFFIXES:
        raise InvalidModel(f"{path}: a PyTorch file; export it to ONNX first (torch.onnx.export, "
                           "see docs/onnx-and-pytorch.md), then convert the .onnx")
    raise InvalidModel(f"{path}: expected a .keras, .h5 or .onnx file or a SavedModel folder")


ZIP_SIGNATURE = b"PK\x03\x04"  # a .keras file (Keras 3): a zip archive
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"  # a .h5 file, at 0 or after a user block of 512 * 2^k bytes
HDF5_OFFSETS = (0, 512, 1024, 2048, 4096, 8192)


def check_keras_signature(path: Path) -> None:
    """A Keras file is a zip archive (.keras) or an HDF5 file (.h5, and .keras of old Keras):
    anything else is refused in a millisecond (exit 4), before TensorFlow takes seconds to
    load and Keras answers "File not found"."""
    if not path.is_file():
        raise InvalidModel(f"{path}: not a file (a Keras model is a .keras or .h5 file, or a SavedModel folder)")
    with open(path, "rb") as f:
        head = f.read(max(HDF5_OFFSETS) + len(HDF5_SIGNATURE))
    if head.startswith(ZIP_SIGNATURE):
        return
    if any(head[o:o + len(HDF5_SIGNATURE)] == HDF5_SIGNATURE for o in HDF5_OFFSETS):
        return
    what = "empty" if not head else "neither a zip archive (.keras) nor an HDF5 file (.h5)"
    raise InvalidModel(f"{path}: not a Keras model: the file is {what}")
