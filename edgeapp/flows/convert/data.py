"""Calibration and evaluation images: found and checked before TensorFlow loads, decoded as
`classify` decodes them, a held-out part kept aside for measuring agreement.

No TensorFlow here: everything in this module runs in the first second of `convert`.
"""

from __future__ import annotations

import glob
import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from edgeapp.core.vision.preprocess import fit_pixels, load_image
from edgeapp.errors import InputError, UsageError
from edgeapp.flows.inputs import expand_inputs


@dataclass
class Dataset:
    """Pixels (N, H, W, C) uint8, or already-normalized float inputs, and labels if known."""

    x: np.ndarray
    y: Optional[np.ndarray] = None
    class_names: list[str] = field(default_factory=list)
    normalized: bool = False  # True: x holds model inputs, not pixels
    skipped: list[str] = field(default_factory=list)  # undecodable files, with why

    def take(self, index: np.ndarray) -> "Dataset":
        return Dataset(self.x[index], None if self.y is None else self.y[index], self.class_names,
                       self.normalized)


@dataclass
class Sources:
    """The image files of one --calibration/--eval argument (no pixels decoded yet)."""

    source: Path
    paths: list[str] = field(default_factory=list)  # empty for an .npy array
    classes: list[str] = field(default_factory=list)  # sub-folder names, sorted
    labels: list[int] = field(default_factory=list)  # index into classes, per path


def find_sources(source: Path, option: str) -> Sources:
    """The images of a folder (sub-folders = classes), a glob or an .npy file, said before
    TensorFlow takes seconds to load: a missing path or a folder without images is exit 2 now."""
    text = str(source)
    if source.suffix.lower() == ".npy" and source.is_file():
        return Sources(source)
    if not source.exists() and not glob.has_magic(text):
        raise UsageError(f"{option} {source}: not found (a folder of images or an .npy file)")
    if source.is_file():
        raise UsageError(f"{option} {source}: give a folder of images, a glob or an .npy file")
    try:
        paths = expand_inputs([text])
    except UsageError:
        raise UsageError(f"{option} {source}: no images in it (looked for .jpg, .png, .bmp, ...)") from None
    if not source.is_dir():
        return Sources(source, paths)
    tops = [Path(p).parent.relative_to(source).parts for p in paths]
    classes = sorted({t[0] for t in tops if t})
    labels = [classes.index(t[0]) if t else -1 for t in tops] if classes else []
    return Sources(source, paths, classes, labels)


def load_dataset(found: Sources, size: tuple[int, int], channels: int, limit: Optional[int] = None,
                 seed: int = 0, say: Callable[[str], None] = lambda s: None,
                 decode: str = "full", fit: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> Dataset:
    """Pixels of the images (decoded and resized as classify does with this --decode, or fitted
    by `fit`: decoded pixels -> input pixels, a YOLO letterbox), or the .npy array as it is.

    An image that cannot be decoded is skipped with one line, as retrain does; only when fewer
    than half of them decode (or none) is it an error (exit 2): then the folder is not what the
    user meant."""
    if not found.paths:
        return _load_npy(found.source, size, channels, limit, seed)
    order = list(range(len(found.paths)))
    if limit and len(order) > limit:
        order = sorted(random.Random(seed).sample(order, limit))
    pixels, labels, skipped = [], [], []
    for i in order:
        try:
            a = calibration_pixels(found.paths[i], size, channels, decode, fit)
        except InputError as e:
            text = str(e)
            skipped.append(text)
            say(f"skipping {text if found.paths[i] in text else f'{found.paths[i]}: {text}'}")
            continue
        pixels.append(a)
        if found.classes:
            labels.append(found.labels[i])
    if not pixels or len(pixels) * 2 < len(order):
        raise UsageError(f"only {len(pixels)} of {len(order)} images in {found.source} could be decoded; "
                         f"first failure: {skipped[0]}")
    y = np.array(labels) if found.classes else None
    return Dataset(np.stack(pixels), y, list(found.classes), skipped=skipped)


def calibration_pixels(path: str, size: tuple[int, int], channels: int, decode: str,
                       fit: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> np.ndarray:
    """One image as the model sees it at inference (classify, stretched): the same decode,
    the same resize: core/vision/preprocess.fit_pixels; or `fit` (detect's YOLO letterbox). uint8
    (H, W, C)."""
    img = load_image(path, channels, size if decode == "scaled" else None)
    if fit is not None:
        return fit(np.asarray(img, dtype=np.uint8))
    pixels, _ = fit_pixels(img, size)
    return pixels


def _load_npy(source: Path, size: tuple[int, int], channels: int, limit: Optional[int],
              seed: int) -> Dataset:
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
        raise UsageError(f"{source}: shape {x.shape}; the model needs (N, {size[1]}, {size[0]}, {channels})")
    if limit:
        x = x[np.random.default_rng(seed).permutation(len(x))[:limit]]
    normalized = x.dtype.kind == "f"
    return Dataset(x if normalized else x.astype(np.uint8), normalized=normalized)


def split_held_out(found: Sources, calibration_size: int, val: int, seed: int = 0) -> tuple:
    """(calibration Sources, held-out Sources or None): `val` images kept aside for measuring
    agreement, never calibrated on; at most a fifth of the images, so calibration keeps most."""
    if not found.paths or val <= 0 or len(found.paths) < 2:
        return found, None
    n_val = min(val, max(1, len(found.paths) // 5))
    order = list(range(len(found.paths)))
    random.Random(seed).shuffle(order)
    held, rest = sorted(order[:n_val]), sorted(order[n_val:])

    def part(index: list) -> Sources:
        return Sources(found.source, [found.paths[i] for i in index], found.classes,
                       [found.labels[i] for i in index] if found.labels else [])

    return part(rest), part(held)


def normalize(data: Dataset, mean: float, std: float) -> np.ndarray:
    """Model inputs: (pixel − mean)/std, or the .npy floats as they are; NaN/inf refused (the
    converter would otherwise produce float ops and blame the model)."""
    x = data.x.astype(np.float32) if data.normalized else (data.x.astype(np.float32) - mean) / std
    if not np.isfinite(x).all():
        raise UsageError("calibration data contains NaN or infinite values")
    return x


def check_model_output(out: Path) -> None:
    """Fail before any TensorFlow work when the model cannot be written where asked. Nothing is
    created here: a folder to make is made when the model is written, so a failed conversion
    leaves no empty folder behind."""
    if out.is_dir():
        raise UsageError(f"--output {out} is a folder; give a .tflite file name")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"--output {out}: {parent} is not a folder")
    try:  # what writing the model will do: a new entry in that folder (or its new sub-folder)
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{out.stem}.", suffix=".partial")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"--output {out}: cannot write in {parent} ({e.strerror or e})") from None


def make_output_folder(out: Path) -> None:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--output {out}: cannot create the folder {out.parent} ({e.strerror or e})") from None


def write_atomic(out: Path, data: bytes) -> None:
    """Through a temporary file and a rename; the model gets the mode any new file gets (the
    user's umask), not mkstemp's private 0600."""
    make_output_folder(out)
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


def source_entry(source: Path, model: Path) -> str:
    """A converted model's float source as its sidecar records it: relative to the sidecar's
    folder, so `eval` finds it from any working folder (and when both move together); absolute
    when they share no root."""
    try:
        return os.path.relpath(os.path.abspath(source), os.path.abspath(model.parent))
    except ValueError:  # another drive (Windows)
        return os.path.abspath(source)
