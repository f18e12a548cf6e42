"""Keras / SavedModel → full-integer int8 TFLite. The only module that imports TensorFlow.

It is imported by the `convert` command alone, inside the command function. The batch
dimension is fixed to 1 (a dynamic batch adds SHAPE/STRIDED_SLICE/PACK ops the Edge TPU
cannot run) and calibration images go through `preprocess`, exactly as `classify` will.
"""

from __future__ import annotations

import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from edgeapp.core.preprocess import load_image, resize
from edgeapp.core.tflite.model import Model, parse_model
from edgeapp.errors import ConvertError, InvalidModel, MissingDependency, UsageError
from edgeapp.flows.inputs import expand_inputs


@dataclass
class Dataset:
    """Pixels (N, H, W, C) uint8, or already-normalized float inputs, and labels if known."""

    x: np.ndarray
    y: Optional[np.ndarray] = None
    class_names: list[str] = field(default_factory=list)
    normalized: bool = False  # True: x holds model inputs, not pixels


def _tf():
    from edgeapp.hw.native_stderr import filtered_native_stderr

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        with filtered_native_stderr():  # absl's and oneDNN's start-up lines, past the log level
            import tensorflow as tf
    except ImportError:
        raise MissingDependency("convert needs TensorFlow: pip install 'edgeapp[convert]'") from None
    return tf


@dataclass
class FloatModel:
    """A loaded float model: its fixed input shape and a batch predict function."""

    input_shape: tuple[int, int, int]  # H, W, C
    predict: Callable[[np.ndarray], np.ndarray]
    export: Callable[[str], None]  # writes a batch-1 SavedModel to the folder


def load_float_model(path: Path) -> FloatModel:
    if not path.exists():
        raise UsageError(f"model not found: {path}")
    if path.is_dir():
        if not (path / "saved_model.pb").exists():
            raise InvalidModel(f"{path} is a folder without saved_model.pb: not a SavedModel")
        return _saved_model(_tf(), path)
    if path.suffix.lower() not in (".keras", ".h5", ".hdf5"):
        raise InvalidModel(f"{path}: expected a .keras or .h5 file or a SavedModel folder")
    tf = _tf()
    import keras

    try:
        model = keras.models.load_model(path, compile=False)
    except Exception as e:  # Keras raises many types for unreadable files
        raise InvalidModel(f"cannot load Keras model {path}: {_first_line(e)}") from None
    shape = tuple(model.inputs[0].shape[1:]) if model.inputs else ()
    if len(model.inputs) != 1 or len(shape) != 3 or None in shape:
        raise InvalidModel(f"{path}: expected one image input [batch, H, W, C] with fixed H, W, C; "
                           f"got {[tuple(i.shape) for i in model.inputs]}")
    if len(model.outputs) != 1:
        raise InvalidModel(f"{path}: expected one output (class scores), got {len(model.outputs)}")

    def export(folder: str) -> None:
        model.export(folder, format="tf_saved_model", verbose=False,
                     input_signature=[tf.TensorSpec((1, *shape), tf.float32)])

    return FloatModel(shape, lambda x: np.asarray(model.predict(x, verbose=0, batch_size=64)), export)


def _saved_model(tf, path: Path) -> FloatModel:
    loaded = tf.saved_model.load(str(path))
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

    def predict(x: np.ndarray) -> np.ndarray:
        return np.concatenate([call(tf.constant(x[i:i + 64], tf.float32)).numpy()
                               for i in range(0, len(x), 64)])

    def export(folder: str) -> None:
        module = tf.Module()
        module.loaded = loaded  # track the original variables in the re-export
        module.f = tf.function(call, input_signature=[tf.TensorSpec((1, *shape), tf.float32)])
        tf.saved_model.save(module, folder, signatures=module.f.get_concrete_function())

    return FloatModel(shape, predict, export)


def load_dataset(source: Path, size: tuple[int, int], channels: int, limit: Optional[int],
                 seed: int = 0) -> Dataset:
    """Images from a folder (sub-folders as classes when there are several) or a .npy array."""
    if source.suffix.lower() == ".npy":
        try:
            x = np.load(source)
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot read {source}: {e}") from None
        if x.dtype.kind not in "uif":
            raise UsageError(f"{source}: dtype {x.dtype}; use uint8 pixels or float model inputs")
        if len(x) == 0:
            raise UsageError(f"{source} holds no samples")
        if x.ndim == 3 and channels == 1:
            x = x[..., None]
        if x.ndim != 4 or x.shape[1:3] != (size[1], size[0]) or x.shape[3] != channels:
            raise UsageError(f"{source}: shape {x.shape}; the model needs (N, {size[1]}, {size[0]}, "
                             f"{channels})")
        if limit:
            x = x[np.random.default_rng(seed).permutation(len(x))[:limit]]
        normalized = x.dtype.kind == "f"
        return Dataset(x if normalized else x.astype(np.uint8), normalized=normalized)
    if not source.exists():
        raise UsageError(f"calibration data not found: {source}")
    paths = expand_inputs([str(source)])
    if not paths:
        raise UsageError(f"no images in {source}")
    classes = sorted({Path(p).parent.relative_to(source).parts[0] for p in paths
                      if Path(p).parent != source}) if source.is_dir() else []
    if limit and len(paths) > limit:
        paths = sorted(random.Random(seed).sample(paths, limit))
    pixels, labels = [], []
    for p in paths:
        img = resize(load_image(p, channels), size)
        a = np.asarray(img, dtype=np.uint8)
        pixels.append(a[:, :, None] if a.ndim == 2 else a)
        if classes:
            rel = Path(p).parent.relative_to(source).parts
            labels.append(classes.index(rel[0]) if rel else -1)
    y = np.array(labels) if classes else None
    return Dataset(np.stack(pixels), y, classes)


def normalize(data: Dataset, mean: float, std: float) -> np.ndarray:
    """Model inputs: (pixel − mean)/std, or the .npy floats as they are; NaN/inf refused (the
    converter would otherwise produce float ops and blame the model)."""
    x = data.x.astype(np.float32) if data.normalized else (data.x.astype(np.float32) - mean) / std
    if not np.isfinite(x).all():
        raise UsageError("calibration data contains NaN or infinite values")
    return x


def check_output(out: Path) -> None:
    """Fail before any TensorFlow work when the model cannot be written where asked."""
    if out.is_dir():
        raise UsageError(f"--output {out} is a folder; give a .tflite file name")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--output {out}: cannot create the folder {out.parent} "
                         f"({e.strerror or e})") from None
    try:  # what writing the model will do: a new file in that folder, then a rename
        fd, probe = tempfile.mkstemp(dir=out.parent, prefix=f".{out.stem}.", suffix=".partial")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"--output {out}: cannot write in {out.parent} ({e.strerror or e})") from None


def check_dataset_source(source: Path, option: str) -> None:
    """The calibration/eval data exists: said before TensorFlow takes seconds to load."""
    if not source.exists():
        raise UsageError(f"{option} {source}: not found (a folder of images or an .npy file)")


def quantize(model: FloatModel, calibration: np.ndarray, out: Path, io_type: str = "uint8",
             progress: Optional[Callable[[], None]] = None) -> Model:
    """Full-integer post-training quantization; returns the validated TFLite graph.

    `out` is written only when the result is fully int8 (through a temporary file and a
    rename), so a failed conversion leaves no float model behind and an older model intact.
    `progress` is called once per calibration sample.
    """
    from edgeapp.hw.native_stderr import filtered_native_stderr

    tf = _tf()
    dtypes = {"uint8": tf.uint8, "int8": tf.int8, "float32": tf.float32}

    def samples():
        for i in range(len(calibration)):
            yield [calibration[i:i + 1]]
            if progress is not None:
                progress()

    with tempfile.TemporaryDirectory(prefix="edgeapp-export-") as tmp:
        model.export(tmp)
        converter = tf.lite.TFLiteConverter.from_saved_model(tmp)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = samples
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = dtypes[io_type]
        converter.inference_output_type = dtypes[io_type]
        try:
            with filtered_native_stderr():
                flatbuffer = converter.convert()
        except Exception as e:  # the converter raises ConverterError and friends
            raise ConvertError(f"TFLite converter failed: {_first_line(e)}") from None
    tflite = parse_model(flatbuffer, str(out))
    bad = non_integer_ops(tflite, io_type)
    if bad:
        raise ConvertError(f"the converted model is not fully int8 ({out} not written): float "
                           f"tensors in {', '.join(bad)}; these operations have no int8 kernel")
    _write_atomic(out, flatbuffer)
    return tflite


def _write_atomic(out: Path, data: bytes) -> None:
    """Through a temporary file and a rename; the model gets the mode any new file gets (the
    user's umask), not mkstemp's private 0600."""
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.stem}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, out)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise UsageError(f"cannot write {out}: {e.strerror or e}") from None


def current_umask() -> int:
    """The process umask (there is no way to read it without setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def non_integer_ops(model: Model, io_type: str = "uint8") -> list[str]:
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


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def evaluate(path: Path, float_model, data, mean: float, std: float) -> dict:
    """Top-1 of the float model vs the int8 model run as `classify` runs it."""
    import numpy as np

    from edgeapp.core.classify import get_scores
    from edgeapp.core.preprocess import quantize_input
    from edgeapp.hw.runtime import open_model

    x = normalize(data, mean, std)
    float_top1 = np.argmax(float_model.predict(x).reshape(len(x), -1), axis=1)
    engine = open_model(path, "cpu")
    scale, zero = engine.input_quantization
    out_scale, out_zero = engine.outputs[0].get("quantization", (0.0, 0))
    int8_top1 = []
    for i in range(len(x)):
        if data.normalized:  # float inputs: quantize them directly
            q = x[i] if engine.input_dtype.kind == "f" else np.clip(
                np.rint(x[i] / scale + zero), *_limits(engine.input_dtype)).astype(engine.input_dtype)
        else:
            q = quantize_input(data.x[i], engine.input_dtype, scale, zero, mean, std)
        int8_top1.append(int(np.argmax(get_scores(engine.run(q[None])[0], out_scale, out_zero))))
    int8_top1 = np.array(int8_top1)
    report = {"samples": len(x), "agreement": round(float(np.mean(float_top1 == int8_top1)), 4),
              "float_accuracy": None, "int8_accuracy": None}
    if data.y is not None and (data.y >= 0).all():
        report["float_accuracy"] = round(float(np.mean(float_top1 == data.y)), 4)
        report["int8_accuracy"] = round(float(np.mean(int8_top1 == data.y)), 4)
    return report


def _limits(dtype) -> tuple[int, int]:
    import numpy as np

    info = np.iinfo(dtype)
    return info.min, info.max
