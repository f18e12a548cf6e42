"""`edgeapp detect`: output layout recognition, post-processing and the command, on real models.

The models (tests/detection_models.py) detect 16-pixel cells of pure red, green or blue in a
64×64 input, so each test paints squares and knows the exact boxes to expect.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import detection_models as dm
import numpy as np
import pytest

from edgeapp.core.vision.boxes import BBox, letterbox_fit, stretch_fit
from edgeapp.core.vision.detect import OutputInfo, engine_layout, find_layout, get_objects
from edgeapp.errors import ExitCode, InvalidModel

RED, GREEN, BLUE = 0, 1, 2  # class ids of the test models (and RGB channels)


def paint(path: Path, size: tuple[int, int], squares: list[tuple[int, int, int, int, int]]) -> Path:
    """An RGB image (width, height), black, with squares (channel, x0, y0, x1, y1) at 255."""
    from PIL import Image

    a = np.zeros((size[1], size[0], 3), np.uint8)
    for ch, x0, y0, x1, y1 in squares:
        a[y0:y1, x0:x1, ch] = 255
    Image.fromarray(a).save(path)
    return path


def infos(*shapes, indices=None) -> list[OutputInfo]:
    indices = indices or list(range(len(shapes)))
    return [OutputInfo(i, f"t{i}", tuple(s)) for i, s in zip(indices, shapes)]


BOX, VEC, ONE = (1, 10, 4), (1, 10), (1,)

# ---------------------------------------------------------------------------------------------
# Layout recognition (pure)


def test_layout_from_the_postprocess_op_wins_over_position():
    # outputs scrambled (classes, count, boxes, scores) as the converter writes them
    outs = infos(VEC, ONE, BOX, VEC, indices=[23, 25, 22, 24])
    lay = find_layout(outs, postprocess_outputs=(22, 23, 24, 25))
    assert (lay.boxes, lay.classes, lay.scores, lay.count) == (2, 0, 3, 1)
    assert "op" in lay.how


def test_layout_tf1_order():
    lay = find_layout(infos(BOX, VEC, VEC, ONE))
    assert (lay.boxes, lay.classes, lay.scores, lay.count) == (0, 1, 2, 3)
    assert lay.how == "TF1 output order"


def test_layout_tf2_order():
    lay = find_layout(infos(VEC, BOX, ONE, VEC))
    assert (lay.scores, lay.boxes, lay.count, lay.classes) == (0, 1, 2, 3)
    assert lay.how == "TF2 output order"


def test_layout_signature_pycoral_order():
    # outputs in some order; the signature says output_0 count, 1 scores, 2 classes, 3 boxes
    outs = infos(VEC, BOX, VEC, ONE, indices=[10, 11, 12, 13])
    sig = [("output_0", 13), ("output_1", 12), ("output_2", 10), ("output_3", 11)]
    lay = find_layout(outs, None, sig)
    assert (lay.count, lay.scores, lay.classes, lay.boxes) == (3, 2, 0, 1)
    assert lay.how.startswith("signature")


def test_layout_signature_converter_order():
    # the converter names a returned tuple (boxes, classes, scores, count) output_0..3
    outs = infos(VEC, ONE, BOX, VEC, indices=[23, 25, 22, 24])
    sig = [("output_0", 22), ("output_1", 23), ("output_2", 24), ("output_3", 25)]
    lay = find_layout(outs, None, sig)
    assert (lay.boxes, lay.classes, lay.scores, lay.count) == (2, 0, 3, 1)


def test_layout_rejects_a_classifier_with_a_hint():
    with pytest.raises(InvalidModel, match="classify"):
        find_layout(infos((1, 1001)))


def test_layout_rejects_unknown_shapes():
    with pytest.raises(InvalidModel, match="cannot tell"):
        find_layout(infos(VEC, VEC, VEC, VEC))


# ---------------------------------------------------------------------------------------------
# get_objects (pure)


def tf2_outputs(scores, boxes, classes, count):
    return [np.array([scores], np.float32), np.array([boxes], np.float32),
            np.array([count], np.float32), np.array([classes], np.float32)]


TF2 = find_layout(infos(VEC, BOX, ONE, VEC))


def test_get_objects_threshold_order_top_k_and_count():
    boxes = [[0, 0, 0.5, 0.5], [0.5, 0.5, 1, 1], [0, 0.5, 0.5, 1], [0.1, 0.1, 0.2, 0.2]]
    out = tf2_outputs([0.3, 0.9, 0.6, 0.99], boxes, [4, 7, 2, 9], count=3)  # the 4th is past count
    fit = stretch_fit((200, 100), (64, 64))
    objs = get_objects(out, TF2, fit, threshold=0.5)
    assert [(o.id, round(o.score, 2)) for o in objs] == [(7, 0.9), (2, 0.6)]
    assert objs[0].bbox == BBox(100, 50, 200, 100)
    assert objs[1].bbox == BBox(100, 0, 200, 50)
    assert len(get_objects(out, TF2, fit, threshold=0.0)) == 3
    assert [o.id for o in get_objects(out, TF2, fit, threshold=0.0, top_k=1)] == [7]


def test_get_objects_dequantizes_and_clips():
    scores = np.array([[200, 10]], np.uint8)  # scale 1/255: 0.784, 0.039
    boxes = np.array([[[-0.1, -0.2, 0.5, 1.3], [0, 0, 1, 1]]], np.float32)
    out = [scores, boxes, np.array([2], np.float32), np.array([[3, 4]], np.float32)]
    quant = [(1 / 255, 0), (0.0, 0), (0.0, 0), (0.0, 0)]
    objs = get_objects(out, TF2, stretch_fit((640, 480), (300, 300)), quant, threshold=0.5)
    assert len(objs) == 1 and objs[0].id == 3
    assert objs[0].score == pytest.approx(200 / 255)
    assert objs[0].bbox == BBox(0, 0, 640, 240)


def test_get_objects_letterbox_maps_back_to_the_original():
    fit = letterbox_fit((128, 64), (64, 64))  # content 64x32 at y 16
    out = tf2_outputs([0.9], [[16 / 64, 32 / 64, 32 / 64, 48 / 64]], [1], count=1)
    assert get_objects(out, TF2, fit)[0].bbox.as_list() == pytest.approx([64, 0, 96, 32])


# ---------------------------------------------------------------------------------------------
# Real models


@pytest.mark.parametrize("name, how", [
    ("det_op_float", "TFLite_Detection_PostProcess op"),
    ("det_tf1", "TFLite_Detection_PostProcess op"),
    ("det_op_uint8", "TFLite_Detection_PostProcess op"),
    ("plain_tf2", "TF2 output order"),
    ("plain_sig", "signature output_0..3"),
])
def test_real_models_layouts(det_models, name, how):
    from edgeapp.hw.runtime import open_engine

    engine = open_engine(det_models[name], "cpu")
    assert engine_layout(engine).how == how


@pytest.mark.parametrize("name", dm.NAMES)
def test_detect_every_layout_gives_the_same_objects(cli, det_models, tmp_path, name):
    img = paint(tmp_path / "two.png", (64, 64), [(RED, 32, 16, 48, 32), (BLUE, 0, 48, 16, 64)])
    r = cli("detect", det_models[name], img, "--format", "jsonl", "--labels", det_models["labels"])
    assert r.exit_code == 0, r.stderr
    rec = json.loads(r.stdout)
    assert set(rec) == {"path", "device", "model", "objects", "latency_ms", "error"}
    assert rec["error"] is None and rec["device"] == "cpu"
    objs = sorted(rec["objects"], key=lambda o: o["id"])
    assert [(o["id"], o["label"], o["bbox"]) for o in objs] == [
        (RED, "red", [32, 16, 48, 32]), (BLUE, "blue", [0, 48, 16, 64])]
    assert all(o["score"] > 0.9 for o in objs)


def test_letterbox_and_stretch_on_a_non_square_image(cli, det_models, tmp_path):
    # 64x128 portrait: letterbox puts it at x 16..48 of the input, scale 0.5
    img = paint(tmp_path / "tall.png", (64, 128), [(GREEN, 32, 64, 64, 96)])
    r = cli("detect", det_models["det_tf1"], img, "--format", "jsonl", "--resize", "letterbox")
    assert r.exit_code == 0, r.stderr
    assert [o["bbox"] for o in json.loads(r.stdout)["objects"]] == [[32, 64, 64, 96]]
    # stretched, the square covers input x 32..64, y 32..48: two cells, each mapped back
    r = cli("detect", det_models["det_tf1"], img, "--format", "jsonl", "--resize", "stretch")
    boxes = sorted(o["bbox"] for o in json.loads(r.stdout)["objects"])
    assert boxes == [[32, 64, 48, 96], [48, 64, 64, 96]]
    # a wide image, letterboxed vertically
    wide = paint(tmp_path / "wide.png", (128, 64), [(RED, 64, 0, 96, 32)])
    r = cli("detect", det_models["det_op_uint8"], wide, "--format", "jsonl", "--resize", "letterbox")
    assert [o["bbox"] for o in json.loads(r.stdout)["objects"]] == [[64, 0, 96, 32]]


def test_threshold_and_top_k(cli, det_models, tmp_path):
    img = paint(tmp_path / "three.png", (64, 64),
                [(RED, 0, 0, 16, 16), (GREEN, 16, 0, 32, 16), (BLUE, 32, 0, 48, 16)])
    r = cli("detect", det_models["det_tf1"], img, "--format", "jsonl", "--top-k", "2")
    assert len(json.loads(r.stdout)["objects"]) == 2
    r = cli("detect", det_models["det_tf1"], img, "--format", "jsonl", "--threshold", "0.99999")
    assert json.loads(r.stdout)["objects"] == []
    r = cli("detect", det_models["det_tf1"], img, "--format", "table")
    assert "3 object(s)" in r.stdout


def test_bad_images_give_error_records_and_exit_3(cli, det_models, tmp_path):
    good = paint(tmp_path / "good.png", (64, 64), [(RED, 0, 0, 16, 16)])
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    r = cli("detect", det_models["det_tf1"], good, bad, tmp_path / "missing.png", "--format", "jsonl")
    assert r.exit_code == ExitCode.INPUTS_FAILED
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [rec["error"] is None for rec in recs] == [True, False, False]
    assert recs[1]["objects"] == [] and recs[1]["latency_ms"] is None
    assert "2 failed" in r.stderr


def test_bad_model_exit_4(cli, tmp_path, tiny_model):
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"\x00" * 100)
    img = paint(tmp_path / "x.png", (64, 64), [])
    r = cli("detect", junk, img)
    assert r.exit_code == ExitCode.MODEL_INVALID
    r = cli("detect", tiny_model, img)  # a classifier
    assert r.exit_code == ExitCode.MODEL_INVALID and "classify" in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2  # the CPU notice and one error line


def test_csv_and_resume(cli, det_models, tmp_path):
    imgs = [paint(tmp_path / f"i{i}.png", (64, 64), [(RED, 16 * i, 0, 16 * i + 16, 16)]) for i in range(3)]
    out = tmp_path / "out.csv"
    r = cli("detect", det_models["det_tf1"], *imgs[:2], "--format", "csv", "--output", out)
    assert r.exit_code == 0, r.stderr
    r = cli("detect", det_models["det_tf1"], *imgs, "--format", "csv", "--output", out, "--resume")
    # a complete CSV keeps its last image too (only a write a kill cut short is redone)
    assert r.exit_code == 0 and "2 already done" in r.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [Path(row["path"]).name for row in rows] == ["i0.png", "i1.png", "i2.png"]
    assert [(row["xmin"], row["ymin"], row["xmax"], row["ymax"]) for row in rows] == [
        ("0", "0", "16", "16"), ("16", "0", "32", "16"), ("32", "0", "48", "16")]


def test_annotate_draws_boxes(cli, det_models, tmp_path):
    from PIL import Image

    img = paint(tmp_path / "a.png", (128, 128), [(BLUE, 64, 64, 96, 96)])
    other = tmp_path / "sub"
    other.mkdir()
    img2 = paint(other / "a.png", (64, 64), [])  # same name: kept apart
    out = tmp_path / "annotated"
    r = cli("detect", det_models["det_tf1"], img, img2, "--annotate", out, "--format", "jsonl")
    assert r.exit_code == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["a.png", "a_1.png"]
    drawn = np.asarray(Image.open(out / "a.png").convert("RGB")).astype(int)
    orig = np.asarray(Image.open(img).convert("RGB")).astype(int)
    assert drawn.shape == orig.shape
    changed = np.argwhere(np.abs(drawn - orig).sum(-1) > 0)
    assert len(changed) > 0
    # the box outline runs along the object's edges (x 64..96, y 64..96)
    assert np.abs(drawn[80, 63:66] - orig[80, 63:66]).sum() > 0
    assert np.abs(drawn[20, 20] - orig[20, 20]).sum() == 0
