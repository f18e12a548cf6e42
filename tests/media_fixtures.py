"""Image and video fixtures shared by several test modules, made by tests/media.py's factory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from media import CLASSES, make_images, make_video


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> list:
    """24 small (32x32) PNGs, classes in a fixed pseudo-random order."""
    rng = np.random.default_rng(11)
    colours = [CLASSES[int(rng.integers(0, 3))] for _ in range(24)]
    return make_images(tmp_path_factory.mktemp("many"), colours, size=32, seed=11,
                       name="img_{i:02d}_{colour}")


@pytest.fixture(scope="module")
def color_video(tmp_path_factory) -> tuple[Path, list[str]]:
    """24 frames of 640x480: blocks of 4 frames of one colour, cycling blue, green, red."""
    expected = [CLASSES[(i // 4) % 3] for i in range(24)]
    path = tmp_path_factory.mktemp("video") / "colors.avi"
    return make_video(path, expected, size=(640, 480), seed=5), expected


@pytest.fixture(scope="module")
def many_images(tmp_path_factory) -> Path:
    """300 JPEGs of 384x384 (48x48 blown up): slow enough to kill a batch half-way."""
    folder = tmp_path_factory.mktemp("many")
    make_images(folder, [CLASSES[i % 3] for i in range(300)], size=48, block=8, seed=11, fmt="jpg",
                name="{i:04d}_{colour}", quality=95)
    return folder
