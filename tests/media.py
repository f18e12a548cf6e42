"""The suite's images and videos, made here (nothing downloaded): one factory for each.

Every picture is the tiny colour classifier's world (tests/conftest.py): a class's colour
channel dominates random noise, so a test knows the class it expects. `make_images` writes image
files (PNG, JPEG, ...), one per colour given, flat or in class folders; `make_video` writes an
MJPG AVI (what OpenCV writes and reads everywhere), one frame per colour or array given.
Frames may carry gray bars at their right edge whose lengths tell their index (`mark`,
`marker_index`; no model sees gray as a class or an object), so a test can tell which frame an
encoded JPEG shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, Sequence, Tuple, Union

import numpy as np

CLASSES = ("blue", "green", "red")  # alphabetical: the order Keras and convert give folders
CHANNEL = {"blue": 2, "green": 1, "red": 0}  # RGB
BGR = {"blue": 0, "green": 1, "red": 2}  # OpenCV's frames
SIZE = 16  # the tiny classifier's input
W, H = 320, 240  # the camera tests' frames
MARK_PERIOD = 55  # frames before a bar starts again: two bars tell 55 * 55 frames apart

Size = Union[int, Tuple[int, int]]  # a square's side, or (width, height)


def color_pixels(cls: int, rng: np.random.Generator, size: int = SIZE) -> np.ndarray:
    """A noisy RGB image of class `cls` (index into CLASSES): its colour channel dominates."""
    a = rng.integers(0, 90, size=(size, size, 3))
    a[:, :, CHANNEL[CLASSES[cls]]] = rng.integers(150, 256, size=(size, size))
    return a.astype(np.uint8)


def make_images(folder: Path, colours: Sequence[str], *, size: Size = SIZE, seed: int = 0,
                fmt: str = "png", name: str = "{i:03d}_{colour}", block: int = 1,
                **save) -> list:
    """One image file per entry of `colours` (class names), in that order, drawn from one
    generator seeded `seed`: `size` pixels (a side, or (width, height) cut from a square), each
    pixel repeated `block` times each way (bigger files, the same picture). `name` is the file's
    path under `folder` without suffix: `{i}` its position, `{n}` its position among images of
    its colour, `{colour}` ("{colour}/{n:03d}" gives class folders). `save`: Pillow's options."""
    from PIL import Image

    w, h = (size, size) if isinstance(size, int) else size
    rng = np.random.default_rng(seed)
    seen: dict = {}
    paths = []
    for i, colour in enumerate(colours):
        n = seen[colour] = seen.get(colour, -1) + 1
        pixels = color_pixels(CLASSES.index(colour), rng, max(w, h))[:h, :w]
        if block > 1:
            pixels = np.kron(pixels, np.ones((block, block, 1), np.uint8))
        path = folder / f"{name.format(i=i, n=n, colour=colour)}.{fmt}"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(path, **save)
        paths.append(path)
    return paths


def write_color_folders(root: Path, per_class: int, seed: int, size: int = SIZE) -> Path:
    """root/<class>/NNN.png, `per_class` of each class: what convert, retrain and Keras read."""
    make_images(root, [c for c in CLASSES for _ in range(per_class)], size=size, seed=seed,
                name="{colour}/{n:03d}")
    return root


def mark(frame: np.ndarray, index: int) -> np.ndarray:
    """Two gray bars at the right edge: their lengths are index % 55 and index // 55 % 55."""
    w = frame.shape[1]
    frame[:, w - 28:] = 0
    frame[2:4 + 4 * (index % MARK_PERIOD), w - 12:w - 4] = 110
    frame[2:4 + 4 * (index // MARK_PERIOD % MARK_PERIOD), w - 24:w - 16] = 110
    return frame


def _bar(image: np.ndarray, x: int) -> int:
    col = image[:, x].astype(int)
    n = int((np.abs(col - 110) < 40).all(axis=1).sum())
    return max(0, int(round((n - 2) / 4.0)))


def marker_index(image: np.ndarray) -> int:
    """The frame index (modulo 55 * 55 = 3025) a decoded BGR frame shows. Two frames a reader
    gets one after the other are never 3025 frames apart: at 15 FPS that is 200 s, far beyond
    the readers' timeouts."""
    w = image.shape[1]
    return _bar(image, w - 8) + MARK_PERIOD * _bar(image, w - 20)


def colour_frame(colour: str, rng: np.random.Generator, size: Tuple[int, int] = (W, H),
                 level: int = 200, noise: int = 60) -> np.ndarray:
    """A BGR frame filled with one colour (the tiny classifier's classes) at `level` over
    noise below `noise`."""
    w, h = size
    f = rng.integers(0, noise, size=(h, w, 3), dtype=np.uint8) if noise else np.zeros((h, w, 3), np.uint8)
    f[:, :, BGR[colour]] = level
    return f


def make_video(path: Path, frames: Iterable[Union[str, np.ndarray]], *, fps: float = 30.0,
               size: Tuple[int, int] = (W, H), seed: int = 0, marked: bool = False,
               rng: Optional[np.random.Generator] = None, rgb: bool = False, **colour) -> Path:
    """An MJPG AVI at `fps`: one frame per entry of `frames`, a BGR array as it is (`rgb`: an
    RGB one, as Pillow and the model builders make them) or a colour name as `colour_frame`
    makes it (`size`, noise from a generator seeded `seed`, `colour`: its `level` and
    `noise`); with `marked`, each frame carries its index (`mark`). Frames are written as they
    come: `frames` may be a generator of a long scene. The first frame sets the video's size."""
    import cv2

    rng = rng or np.random.default_rng(seed)
    writer = None
    for i, f in enumerate(frames):
        if isinstance(f, str):
            f = colour_frame(f, rng, size, **colour)
        elif rgb:
            f = np.ascontiguousarray(f[:, :, ::-1])
        if marked:
            f = mark(f, i)
        if writer is None:
            writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (f.shape[1], f.shape[0]))
            assert writer.isOpened(), f"OpenCV cannot write {path}"
        writer.write(f)
    assert writer is not None, "a video needs at least one frame"
    writer.release()
    return path
