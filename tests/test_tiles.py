"""Tiles for small objects (`--tiles COLSxROWS[:OVERLAP]`): the windows, the merge, and the
shipped shapes detector finding on tiles the small shapes it misses on the whole image, measured
by `eval` (COCO mAP) on a labelled set drawn here."""

import json

import numpy as np
import pytest
from conftest import ROOT
from eval_sets import small_shapes_set

from edgeapp.core.vision.tiles import TileGrid, merge, parse_tiles, windows

DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"


@pytest.mark.parametrize("text, grid", [("2x2", TileGrid(2, 2, 0.2)), ("3x2:0.25", TileGrid(3, 2, 0.25)),
                                        (" 4X1 : 0 ", TileGrid(4, 1, 0.0))])
def test_tiles_are_written_cols_x_rows_and_an_overlap(text, grid):
    assert parse_tiles(text) == grid


@pytest.mark.parametrize("text", ["0x2", "1x1", "2x2:0.95", "2x2:-1", "2by2", "17x1", "2x2:nan", ""])
def test_impossible_tiles_say_what_to_write(text):
    with pytest.raises(ValueError, match="--tiles"):
        parse_tiles(text)


def test_windows_cover_the_image_overlapping_then_the_whole():
    got = windows(1000, 600, TileGrid(2, 2, 0.2))
    assert got[-1] == (0, 0, 1000, 600) and len(got) == 5
    tiles = got[:-1]
    assert {(x0, x1) for x0, _y0, x1, _y1 in tiles} == {(0, 556), (444, 1000)}  # 556 wide, 112 shared
    assert {(y0, y1) for _x0, y0, _x1, y1 in tiles} == {(0, 334), (266, 600)}
    covered = np.zeros((600, 1000), bool)
    for x0, y0, x1, y1 in tiles:
        covered[y0:y1, x0:x1] = True
    assert covered.all()


def test_the_merge_keeps_one_box_per_object_across_windows():
    boxes = np.array([[100, 100, 150, 150],  # whole, seen by the full frame
                      [100, 100, 130, 150],  # the half a window's edge cut
                      [101, 99, 151, 149],  # the same object from the neighbouring window
                      [100, 100, 150, 150],  # another class at the same place stays
                      [300, 300, 340, 340]])
    scores = np.array([0.9, 0.8, 0.85, 0.7, 0.6])
    classes = np.array([1, 1, 1, 2, 1])
    assert merge(boxes, scores, classes).tolist() == [0, 3, 4]
    assert merge(boxes, scores, classes, max_det=2).tolist() == [0, 3]


@pytest.fixture(scope="module")
def small_shapes(tmp_path_factory):
    return small_shapes_set(tmp_path_factory.mktemp("small_shapes"))


def test_tiles_find_the_small_objects_the_whole_image_misses(cli, small_shapes):
    def measured(*extra):
        r = cli("eval", DETECTOR, "--data", small_shapes["yaml"], "--format", "json", *extra)
        assert r.exit_code == 0, r.stderr
        return json.loads(r.stdout)["models"][0]["metrics"]

    whole, tiled = measured(), measured("--tiles", "2x2")
    assert tiled["map50"] >= whole["map50"] + 0.25, (whole, tiled)  # 0.338 -> 0.988 when written
    assert tiled["map"] > whole["map"]


def test_detect_with_tiles_boxes_the_shapes_in_the_image_pixels(cli, small_shapes):
    image = sorted(small_shapes["images"].iterdir())[0]
    r = cli("detect", DETECTOR, image, "--tiles", "2x2", "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    found = json.loads(r.stdout.splitlines()[0])["objects"]
    truth = small_shapes["truth"][image.name]

    def boxed(x0, y0, x1, y1):  # a box of the image's pixels around the shape's centre
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        return any(o["bbox"][0] <= cx <= o["bbox"][2] and o["bbox"][1] <= cy <= o["bbox"][3] for o in found)

    assert sum(boxed(*box) for _cls, *box in truth) >= len(truth) - 1, (truth, found)
    for i, a in enumerate(found):  # no object twice from overlapping windows: no box of a class
        for b in found[i + 1:]:  # covered by another of its class beyond the merge's 60%
            if a["label"] == b["label"]:
                iw = max(0, min(a["bbox"][2], b["bbox"][2]) - max(a["bbox"][0], b["bbox"][0]))
                ih = max(0, min(a["bbox"][3], b["bbox"][3]) - max(a["bbox"][1], b["bbox"][1]))
                smaller = min((a["bbox"][2] - a["bbox"][0]) * (a["bbox"][3] - a["bbox"][1]),
                              (b["bbox"][2] - b["bbox"][0]) * (b["bbox"][3] - b["bbox"][1]))
                assert iw * ih <= 0.7 * smaller, (a, b)  # 0.6 on unrounded boxes


@pytest.mark.parametrize("value", ["0x2", "2x2:0.95", "banana"])
@pytest.mark.parametrize("command", ["detect", "eval"])
def test_bad_tiles_are_one_line_and_exit_2(cli, small_shapes, value, command):
    image = sorted(small_shapes["images"].iterdir())[0]
    where = [image] if command == "detect" else ["--data", small_shapes["yaml"]]
    r = cli(command, DETECTOR, *where, "--tiles", value)
    assert r.exit_code == 2 and "--tiles" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_camera_runs_tiles_on_every_frame(cli, tmp_path):
    from shapes_video import crossing_scene

    video = crossing_scene(frames=8).write(tmp_path / "cross.avi")
    out = tmp_path / "frames.jsonl"
    r = cli("camera", DETECTOR, "--source", video, "--tiles", "2x2", "-o", out)
    assert r.exit_code == 0, r.stderr
    frames = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(frames) == 8
    # the three shapes of the scene, each boxed once in the frame's pixels (320x240)
    assert all(len(f["objects"]) == 3 and max(o["bbox"][2] for o in f["objects"]) <= 320 for f in frames), frames
