"""`camera --motion`: the regions that moved (frame differencing against a running background,
blobs padded, grown to the model's input and merged), and the shipped shapes detector finding,
on those regions of a rendered video, the small moving shapes it misses on the whole frame."""

import json

import numpy as np
import pytest
from conftest import ROOT
from shapes_video import small_movers

from edgeapp.core.vision.motion import MotionRegions, grow, merge_overlapping

DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"


def _frame(*squares, size=(480, 640), level=90):
    img = np.full(size + (3,), level, np.uint8)
    for x, y, s in squares:
        img[y:y + s, x:x + s] = (240, 40, 200)
    return img


def test_boxes_grow_to_the_model_side_inside_the_frame():
    assert grow((10, 10, 30, 30), 100, 640, 480) == (0, 0, 100, 100)  # pushed back inside
    assert grow((300, 200, 340, 230), 100, 640, 480) == (270, 165, 370, 265)
    assert grow((0, 0, 400, 50), 100, 640, 480) == (0, 0, 400, 100)  # only what is too small
    assert grow((0, 0, 10, 10), 1000, 640, 480) == (0, 0, 640, 480)  # never past the frame


def test_overlapping_boxes_merge_until_none_do():
    assert merge_overlapping([(0, 0, 10, 10), (5, 5, 20, 20), (19, 0, 30, 3), (50, 50, 60, 60)]) == \
        [(0, 0, 30, 20), (50, 50, 60, 60)]
    assert merge_overlapping([]) == []


def test_regions_are_what_moved_grown_to_the_model_input():
    motion = MotionRegions(side=128)
    assert motion(_frame((100, 100, 30))) == [(0, 0, 640, 480)]  # the first frame: all of it
    assert motion(_frame((100, 100, 30))) == []  # nothing moved: no inference
    moved = motion(_frame((110, 100, 30), (500, 380, 24)))
    assert len(moved) == 2, moved
    for (x0, y0, x1, y1), (sx, sy, s) in zip(moved, [(110, 100, 30), (500, 380, 24)]):
        assert x1 - x0 >= 128 and y1 - y0 >= 128  # at least the model's input: native resolution
        assert x0 <= sx and y0 <= sy and sx + s <= x1 and sy + s <= y1  # the whole square
        assert x0 >= 0 and y0 >= 0 and x1 <= 640 and y1 <= 480
    assert motion(_frame((110, 100, 30), (500, 380, 24), level=200)) == [(0, 0, 640, 480)]  # the light changed


@pytest.fixture(scope="module")
def movers_video(tmp_path_factory):
    scene = small_movers(seed=3, frames=12, objects=5)
    return scene, scene.write(tmp_path_factory.mktemp("motion") / "small_movers.avi")


def _frames(cli, video, out, *extra):
    r = cli("camera", DETECTOR, "--source", video, "--no-display", "-o", out, "--device", "cpu", *extra)
    assert r.exit_code == 0, r.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_motion_finds_the_small_moving_shapes_the_whole_frame_misses(cli, movers_video, tmp_path):
    scene, video = movers_video
    whole = _frames(cli, video, tmp_path / "whole.jsonl")
    moving = _frames(cli, video, tmp_path / "motion.jsonl", "--motion")
    assert len(whole) == len(moving) == scene.frames  # every frame has its record

    def boxed(records):  # shapes whose centre lies in a box of their class, frames 1 on
        hits = 0
        for r in records[1:]:
            for i, (x0, y0, x1, y1) in scene.truth(r["frame"]):
                cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
                hits += any(o["id"] == scene.movers[i].cls and o["bbox"][0] <= cx <= o["bbox"][2]
                            and o["bbox"][1] <= cy <= o["bbox"][3] for o in r["objects"])
        return hits

    shapes = sum(len(scene.truth(f)) for f in range(1, scene.frames))
    assert boxed(moving) >= 0.8 * shapes > boxed(whole) + 0.5 * shapes, (boxed(moving), boxed(whole), shapes)
    assert all(max((o["bbox"][2] for o in r["objects"]), default=0) <= scene.width for r in moving)


def test_motion_and_tiles_together_are_one_line_and_exit_2(cli, movers_video, tmp_path):
    _scene, video = movers_video
    r = cli("camera", DETECTOR, "--source", video, "--no-display", "--motion", "--tiles", "2x2")
    assert r.exit_code == 2 and "pick one" in r.stderr and "Traceback" not in r.stderr, r.stderr
