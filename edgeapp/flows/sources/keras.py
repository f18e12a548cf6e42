"""Keras (.keras, .h5) and SavedModel folders as float models for the shared quantization.

The batch dimension is fixed to 1 in the export (a dynamic batch adds SHAPE/STRIDED_SLICE/PACK
ops the Edge TPU cannot run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from edgeapp.errors import InvalidModel
from edgeapp.flows.sources.base import FloatModel, Progress, first_line, tensorflow
from edgeapp.flows.sources.source import ModelSource, SayLine, TimeStep


class KerasSource(ModelSource):
    """A .keras/.h5 file or a SavedModel folder: loaded first, its input shape then known."""

    format = "keras"

    def load(self, calibration: Optional[np.ndarray], output: Path, say: SayLine, progress: Progress,
             timed: TimeStep) -> FloatModel:
        say(f"loading {self.path} (TensorFlow)")
        return load_keras(self.path)


def load_keras(path: Path) -> FloatModel:
    """A .keras/.h5 file or a SavedModel folder: one image input [batch, H, W, C], one output."""
    if path.is_dir():
        if not (path / "saved_model.pb").exists():
            raise InvalidModel(f"{path} is a folder without saved_model.pb: not a SavedModel")
        return _saved_model(tensorflow(), path)
    tf = tensorflow()
    import keras

    try:
        model = keras.models.load_model(path, compile=False)
    except Exception as e:  # Keras raises many types for unreadable files
        raise InvalidModel(f"cannot load Keras model {path}: {first_line(e)}") from None
    shape = tuple(model.inputs[0].shape[1:]) if model.inputs else ()
    if len(model.inputs) != 1 or len(shape) != 3 or None in shape:
        raise InvalidModel(f"{path}: expected one image input [batch, H, W, C] with fixed H, W, C; "
                           f"got {[tuple(i.shape) for i in model.inputs]}")
    if len(model.outputs) != 1:
        raise InvalidModel(f"{path}: expected one output (class scores), got {len(model.outputs)}")

    def export(folder: str) -> None:
        model.export(folder, format="tf_saved_model", verbose=False,
                     input_signature=[tf.TensorSpec((1, *shape), tf.float32)])

    def predict(x: np.ndarray) -> list:
        return [np.asarray(model.predict(x, verbose=0, batch_size=64))]

    return FloatModel(shape, predict, export, output_names=[model.outputs[0].name], runtime="Keras")


def _saved_model(tf, path: Path) -> FloatModel:
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as e:  # a damaged saved_model.pb or variables folder
        raise InvalidModel(f"cannot load SavedModel {path}: {first_line(e)}") from None
    sig = loaded.signatures.get("serving_default")
    if sig is None:
        raise InvalidModel(f"{path}: SavedModel has no 'serving_default' signature")
    specs = sig.structured_input_signature[1]
    if len(specs) != 1:
        raise InvalidModel(f"{path}: expected one image input, got {list(specs)}")
    (name, spec), = specs.items()
    if len(sig.structured_outputs) != 1:
        raise InvalidModel(f"{path}: expected one output (class scores), got "
                           f"{list(sig.structured_outputs)}")
    shape = tuple(spec.shape[1:])
    if len(shape) != 3 or None in shape:
        raise InvalidModel(f"{path}: input {name} has shape {spec.shape}; need [batch, H, W, C]")

    def call(x):  # `loaded` stays referenced here: its variables must outlive `sig`
        out = loaded.signatures["serving_default"](**{name: x})
        return next(iter(out.values())) if isinstance(out, dict) else out

    def predict(x: np.ndarray) -> list:
        return [np.concatenate([call(tf.constant(x[i:i + 64], tf.float32)).numpy()
                                for i in range(0, len(x), 64)])]

    def export(folder: str) -> None:
        module = tf.Module()
        module.loaded = loaded  # track the original variables in the re-export
        module.f = tf.function(call, input_signature=[tf.TensorSpec((1, *shape), tf.float32)])
        tf.saved_model.save(module, folder, signatures=module.f.get_concrete_function())

    return FloatModel(shape, predict, export, output_names=list(sig.structured_outputs),
                      runtime="TensorFlow")
