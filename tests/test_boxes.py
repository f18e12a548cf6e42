"""Box maths and letterbox/stretch geometry: pure functions, exact numbers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from edgeapp.core.vision.boxes import (
    BBox,
    Fit,
    ResizeMode,
    clip,
    letterbox_fit,
    make_fit,
    scale,
    stretch_fit,
    to_original,
    translate,
)


def test_bbox_is_immutable_and_operations_return_new_boxes():
    b = BBox(1, 2, 5, 10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.xmin = 0  # type: ignore[misc]
    s, t = scale(b, 2, 3), translate(b, 10, -2)
    assert s == BBox(2, 6, 10, 30)
    assert t == BBox(11, 0, 15, 8)
    assert b == BBox(1, 2, 5, 10)  # unchanged
    assert hash(b) == hash(BBox(1, 2, 5, 10))  # usable in sets and as keys


def test_from_yxyx_takes_the_detection_order():
    assert BBox.from_yxyx(0.1, 0.2, 0.3, 0.4) == BBox(0.2, 0.1, 0.4, 0.3)


def test_area_and_validity():
    assert BBox(0, 0, 1, 1).valid and not BBox(2, 0, 1, 1).valid
    assert BBox(1, 2, 4, 8).width == 3 and BBox(1, 2, 4, 8).height == 6


def test_clip_to_image_edges():
    assert clip(BBox(-5, -1, 700, 300), 640, 480) == BBox(0, 0, 640, 300)
    assert clip(BBox(650, 490, 700, 500), 640, 480) == BBox(640, 480, 640, 480)


def test_rounded_gives_whole_pixels():
    assert BBox(0.4, 1.6, 99.5, 100.5).rounded() == [0, 2, 100, 100]


def test_letterbox_fit_on_a_wide_image():
    f = letterbox_fit((128, 64), (64, 64))
    assert (f.content_w, f.content_h, f.pad_x, f.pad_y) == (64, 32, 0, 16)


def test_letterbox_fit_on_a_tall_image():
    f = letterbox_fit((480, 640), (300, 300))
    assert (f.content_w, f.content_h) == (225, 300)
    assert (f.pad_x, f.pad_y) == (37, 0)


def test_stretch_fit_fills_the_input():
    f = stretch_fit((640, 480), (300, 300))
    assert (f.content_w, f.content_h, f.pad_x, f.pad_y) == (300, 300, 0, 0)
    assert make_fit("stretch", (640, 480), (300, 300)) == f
    assert make_fit(ResizeMode.letterbox, (640, 480), (300, 300)) == letterbox_fit((640, 480), (300, 300))


def test_to_original_stretch():
    f = stretch_fit((640, 480), (300, 300))
    b = to_original(BBox.from_yxyx(0.25, 0.5, 0.75, 1.0), f)
    assert b == BBox(320, 120, 640, 360)


def test_to_original_letterbox_non_square():
    # 128x64 image letterboxed into 64x64: content 64x32 at y 16..48
    f = letterbox_fit((128, 64), (64, 64))
    # the model sees the box in input pixels x 32..48, y 16..32 -> image x 64..96, y 0..32
    b = to_original(BBox(32 / 64, 16 / 64, 48 / 64, 32 / 64), f)
    assert b.as_list() == pytest.approx([64, 0, 96, 32])
    # a box reaching into the padding is clipped to the image
    b = to_original(BBox(0.0, 0.0, 0.25, 0.5), f)
    assert b.as_list() == pytest.approx([0, 0, 32, 32])


def forward(box: BBox, f: Fit) -> BBox:
    """Original pixels -> normalized model input (the inverse of to_original, for the test)."""
    sx, sy = f.content_w / f.src_w, f.content_h / f.src_h
    return BBox((box.xmin * sx + f.pad_x) / f.dst_w, (box.ymin * sy + f.pad_y) / f.dst_h,
                (box.xmax * sx + f.pad_x) / f.dst_w, (box.ymax * sy + f.pad_y) / f.dst_h)


@pytest.mark.parametrize("mode", list(ResizeMode))
def test_round_trip_for_many_sizes(mode):
    rng = np.random.default_rng(0)
    for _ in range(200):
        src = (int(rng.integers(1, 2000)), int(rng.integers(1, 2000)))
        dst = (int(rng.integers(16, 640)), int(rng.integers(16, 640)))
        f = make_fit(mode, src, dst)
        assert 0 < f.content_w <= f.dst_w and 0 < f.content_h <= f.dst_h
        assert f.pad_x + f.content_w <= f.dst_w and f.pad_y + f.content_h <= f.dst_h
        x0, x1 = sorted(rng.uniform(0, src[0], 2))
        y0, y1 = sorted(rng.uniform(0, src[1], 2))
        box = BBox(x0, y0, x1, y1)
        back = to_original(forward(box, f), f)
        assert back.as_list() == pytest.approx(box.as_list(), abs=1e-6 * max(src))
