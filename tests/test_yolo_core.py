"""YOLO post-processing (core/vision/yolo.py) against Ultralytics' own results on real exports.

The fixtures under tests/fixtures/yolo/ were made once by scripts/build_yolo_fixtures.py in a
separate environment: small YOLOv8/YOLO11/YOLOv5u nets trained on generated shapes, exported by
Ultralytics (format="edgetpu" up to the compiler), the split-DFL and classic-YOLOv5 layouts made
from the same nets, and for each model and held-out image the detections of Ultralytics' own
NMS and scale_boxes on the interpreter's outputs (input quantized by round to nearest). Here the
same files run in edgeapp's runtime and are decoded by core/vision/yolo.py; the two must agree.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from yolo_reference import assert_same_detections

from edgeapp.core.meta import metadata_names, ultralytics_metadata
from edgeapp.core.vision import yolo
from edgeapp.core.vision.boxes import letterbox_fit
from edgeapp.core.vision.classify import dequantize
from edgeapp.errors import InvalidModel, UsageError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "yolo"
MODELS = sorted(p for p in FIXTURES.glob("*.tflite"))
IMAGES = sorted((FIXTURES / "images").glob("*.png"))


def record(model: Path) -> dict:
    return json.loads(model.with_suffix(".json").read_text())


def iou(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


# ----------------------------------------------------------------------------- real models


def test_the_fixtures_are_there():
    kinds = {record(m)["layout"] for m in MODELS}
    assert kinds == {"yolov8", "yolov5", "dfl"} and len(IMAGES) >= 3
    assert sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file()) < 6_000_000


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.stem)
def test_decoding_matches_ultralytics(model):
    """Same detections as Ultralytics' NMS on the same file: class, IoU >= 0.9, score within
    one output quantization step, for every image; and the same quantized input bytes. The
    image goes the way `edgeapp detect` takes it: the model opened for the detect task at its
    defaults, which prepares (letterbox, pixel / 255) and interprets."""
    from edgeapp.flows.open_task import Placement, open_task

    rec = record(model)
    with open_task(model, "detect", Placement(device="cpu")) as opened:
        detect = opened.task
        layout = detect.plan.layout
        assert layout.kind == rec["layout"]
        quant = yolo.output_quantizations(opened.engine)
        assert [list(q) for q in quant] == [[o["scale"], o["zero_point"]] for o in rec["outputs"]]
        step = quant[layout.scores][0]  # one step of the score tensor, in score units:
        if layout.kind == "dfl":  # logits there; the sigmoid's slope is at most 1/4
            step /= 4
        total = 0
        for name, want in rec["images"].items():
            tensor, prepared = detect.prepare(FIXTURES / "images" / name)
            assert hashlib.sha256(tensor.tobytes()).hexdigest() == want["input_sha256"], name
            got = detect.interpret(opened.engine.run(tensor), prepared).fields["objects"]
            assert_same_detections([(o["id"], o["score"], o["bbox"]) for o in got],
                                   want["detections"], step, name)
            total += len(got)
    assert total > 0, "the fixture model detects nothing: it cannot test decoding"


@pytest.mark.parametrize("model", [m for m in MODELS if record(m)["metadata"]], ids=lambda p: p.stem)
def test_names_from_ultralytics_metadata(model):
    meta = ultralytics_metadata(model.read_bytes())
    assert meta["names"] == record(model)["metadata"]["names"]
    assert metadata_names(meta) == {0: "circle", 1: "square", 2: "triangle"}


@pytest.mark.parametrize("image", IMAGES, ids=lambda p: p.stem)
def test_letterbox_is_ultralytics_letterbox(image):
    from PIL import Image

    recs = json.loads((FIXTURES / "letterbox.json").read_text())[image.name]
    pixels = np.asarray(Image.open(image).convert("RGB"))
    for rec in recs:
        boxed, fit = yolo.letterbox(pixels, (rec["size"], rec["size"]))
        assert [fit.content_w, fit.content_h] == rec["new_unpad"]
        assert (fit.pad_x, fit.pad_y) == (rec["left"], rec["top"])
        assert fit.dst_w - fit.content_w - fit.pad_x == rec["right"]
        assert fit.dst_h - fit.content_h - fit.pad_y == rec["bottom"]
        assert hashlib.sha256(np.ascontiguousarray(boxed).tobytes()).hexdigest() == rec["sha256"]
        plain = yolo.bilinear(pixels, (fit.content_w, fit.content_h))  # the path without OpenCV
        exact = yolo.resize_linear(pixels, (fit.content_w, fit.content_h))
        assert np.abs(plain.astype(int) - exact).max() <= 1


# ----------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("shapes,size,kind,classes", [
    ([(1, 84, 8400)], (640, 640), "yolov8", 80),
    ([(1, 7, 2100)], (320, 320), "yolov8", 3),
    ([(1, 7, 1344)], (256, 256), "yolov8", 3),
    ([(1, 6, 1570)], (320, 240), "yolov8", 2),  # 40x30 + 20x15 + 10x7 (floor of 240/32)
    ([(1, 25200, 85)], (640, 640), "yolov5", 80),
    ([(1, 2100, 64), (1, 2100, 80)], (320, 320), "dfl", 80),
    ([(1, 2100, 80), (1, 2100, 64)], (320, 320), "dfl", 80),
    ([(1, 2100, 80), (1, 2100, 64), (1, 2100, 1)], (320, 320), "dfl", 80),
])
def test_layouts_are_told_apart_by_shape(shapes, size, kind, classes):
    layout = yolo.find_yolo_layout(shapes, size)
    assert (layout.kind, layout.classes) == (kind, classes)
    if kind == "dfl":
        assert shapes[layout.boxes][2] == 64 and shapes[layout.scores][2] == classes


@pytest.mark.parametrize("shapes,size", [
    ([(1, 1001)], (224, 224)),  # a classifier
    ([(1, 10, 4), (1, 10), (1, 10), (1,)], (300, 300)),  # SSD with the post-process op
    ([(1, 84, 8400)], (320, 320)),  # anchors of another input size
    ([(1, 8400, 84)], (640, 640)),  # transposed: only when forced
    ([(1, 4, 2100)], (320, 320)),  # no class row
    ([(1, 2100, 64), (1, 2000, 80)], (320, 320)),  # DFL halves of different N
    ([(1, 21, 21, 2)], (320, 320)),
])
def test_non_yolo_shapes_are_refused(shapes, size):
    with pytest.raises(InvalidModel, match="not a YOLO layout"):
        yolo.find_yolo_layout(shapes, size, name="m.tflite")
    assert not yolo.is_yolo_output(shapes, size)


def test_forcing_a_layout():
    t = yolo.find_yolo_layout([(1, 8400, 84)], (640, 640), force="yolov8")
    assert t.kind == "yolov8" and t.transposed and t.classes == 80
    with pytest.raises(InvalidModel, match="not a yolov5 layout"):
        yolo.find_yolo_layout([(1, 84, 8400)], (640, 640), force="yolov5")
    with pytest.raises(InvalidModel, match="not a dfl layout"):
        yolo.find_yolo_layout([(1, 84, 8400)], (640, 640), force="dfl")
    with pytest.raises(UsageError, match="yolov8, yolov5, dfl"):
        yolo.find_yolo_layout([(1, 84, 8400)], (640, 640), force="yolov9")
    with pytest.raises(InvalidModel, match="both DFL outputs are 64 wide"):
        yolo.find_yolo_layout([(1, 2100, 64), (1, 2100, 64)], (320, 320))


def test_anchors_are_cell_centres_rows_first():
    points, strides = yolo.make_anchors(64, 32, (8, 16, 32))
    assert len(points) == yolo.anchor_count(64, 32) == 8 * 4 + 4 * 2 + 2 * 1
    assert points[:3].tolist() == [[0.5, 0.5], [1.5, 0.5], [2.5, 0.5]]
    assert points[8].tolist() == [0.5, 1.5] and strides[32] == 16 and strides[-1] == 32


# ----------------------------------------------------------------------------- scores


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
@pytest.mark.parametrize("logits", [False, True])
def test_quantized_filter_keeps_exactly_what_float_filtering_keeps(dtype, logits):
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    raw = rng.integers(info.min, int(info.max) + 1, size=20000).astype(dtype)
    raw[:2] = info.min, info.max
    for _ in range(40):
        scale = float(rng.uniform(1e-4, 0.2)) if dtype != np.int16 else float(rng.uniform(1e-6, 1e-3))
        zero = int(rng.integers(info.min, int(info.max) + 1)) if dtype != np.int16 else 0
        thr = float(rng.choice([0.25, 0.5, 0.0, 0.999, float(rng.uniform(0, 1))]))
        real = dequantize(raw, scale, zero)
        want = (yolo.sigmoid(real) if logits else real) > np.float32(thr)
        got = yolo._mask_above(raw, thr, (scale, zero), logits)
        assert np.array_equal(got, want), (scale, zero, thr)


def test_raw_floor_at_an_exact_step():
    # scale 1/256, zero -128: q = -64 dequantizes to exactly 0.25, which does not pass (strict)
    assert yolo.raw_floor(0.25, 1 / 256, -128, "int8") == -63
    assert yolo.raw_floor(2.0, 1 / 256, -128, "int8") is None  # nothing can pass
    assert yolo.raw_floor(-1.0, 1 / 256, -128, "int8") == -128


# ----------------------------------------------------------------------------- NMS


def naive_nms(boxes, scores, classes, thr, max_det=300):
    """An independent, plain-Python greedy NMS: best first, ties by index, strict IoU > thr."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    kept = []
    for i in order:
        if all(classes[k] != classes[i] or iou(boxes[k], boxes[i]) <= thr for k in kept):
            kept.append(i)
    return kept[:max_det]


def test_nms_of_nothing():
    assert yolo.nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, int)).size == 0


def test_nms_suppresses_overlaps_of_one_class_and_keeps_other_classes():
    boxes = np.array([[0, 0, 10, 10], [.5, .5, 10.5, 10.5], [0, 0, 10, 9.5], [0, 0, 10, 10]], np.float32)
    scores = np.array([0.9, 0.8, 0.95, 0.5], np.float32)
    classes = np.array([0, 0, 0, 1])
    assert yolo.nms(boxes, scores, classes, 0.7).tolist() == [2, 3]  # all of class 0 but the best
    assert yolo.nms(boxes, scores, classes, 0.7, max_det=1).tolist() == [2]


def test_nms_iou_at_the_limit_is_kept_and_ties_keep_index_order():
    boxes = np.array([[0, 0, 1, 1], [0, 0, 2, 1], [5, 5, 6, 6]], np.float32)  # IoU exactly 0.5
    scores = np.array([0.5, 0.5, 0.5], np.float32)
    assert yolo.nms(boxes, scores, np.zeros(3, int), 0.5).tolist() == [0, 1, 2]
    assert yolo.nms(boxes, scores, np.zeros(3, int), 0.49).tolist() == [0, 2]


def test_nms_agrees_with_a_naive_implementation_on_random_boxes():
    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(1, 200))
        xy = rng.uniform(0, 300, size=(n, 2))
        wh = rng.uniform(1, 80, size=(n, 2))
        boxes = np.concatenate((xy, xy + wh), 1).astype(np.float32)
        scores = rng.integers(1, 40, size=n).astype(np.float32) / 40  # quantized: many ties
        classes = rng.integers(0, 3, size=n)
        thr = float(rng.uniform(0.2, 0.8))
        got = yolo.nms(boxes, scores, classes, thr, max_det=50).tolist()
        assert got == naive_nms(boxes.tolist(), scores.tolist(), classes.tolist(), thr, 50)


# ----------------------------------------------------------------------------- decoding


def test_v8_decode_on_a_hand_made_output():
    n = yolo.anchor_count(64, 64)
    out = np.zeros((1, 4 + 2, n), np.float32)
    out[0, :4, 5] = [0.5, 0.25, 0.25, 0.5]  # cx, cy, w, h normalized
    out[0, 4:, 5] = [0.1, 0.8]
    out[0, 4:, 6] = [0.25, 0.0]  # exactly the threshold: not kept (strictly greater)
    layout = yolo.find_yolo_layout([out.shape], (64, 64))
    fit = letterbox_fit((128, 64), (64, 64))  # 128x64 image: scale 0.5, 16 px of padding on top
    objs = yolo.get_yolo_objects([out], [(0.0, 0)], layout, fit)
    assert len(objs) == 1 and objs[0].id == 1 and objs[0].score == pytest.approx(0.8)
    # input pixels: x 24..40, y 0..32; minus the padding and / 0.5, clipped to the 128x64 image
    assert objs[0].bbox.as_list() == pytest.approx([48, 0, 80, 32])


def test_v5_decode_multiplies_objectness_and_filters_it_first():
    n = 3 * yolo.anchor_count(32, 32)
    out = np.zeros((1, n, 5 + 2), np.float32)
    out[0, 0] = [0.5, 0.5, 0.5, 0.5, 0.9, 0.2, 0.5]  # 0.9 x 0.5 = 0.45
    out[0, 1] = [0.5, 0.5, 0.5, 0.5, 0.24, 1.0, 1.0]  # objectness under the threshold
    out[0, 2] = [0.5, 0.5, 0.5, 0.5, 0.3, 0.8, 0.1]  # 0.24 after the product
    layout = yolo.find_yolo_layout([out.shape], (32, 32))
    found = yolo.decode([out], [(0.0, 0)], layout, (32, 32))
    assert found.classes.tolist() == [1] and found.scores.tolist() == pytest.approx([0.45])
    assert found.boxes[0].tolist() == pytest.approx([8, 8, 24, 24])


def test_dfl_decode_expected_bins_anchors_and_sigmoid():
    size = (32, 32)
    n = yolo.anchor_count(*size)
    boxes = np.full((1, n, 64), -20.0, np.float32)
    boxes[0, 0].reshape(4, 16)[[0, 1, 2, 3], [1, 2, 3, 4]] = 20.0  # ltrb = 1, 2, 3, 4 cells
    scores = np.full((1, n, 3), -9.0, np.float32)
    scores[0, 0, 2] = 2.0
    layout = yolo.find_yolo_layout([boxes.shape, scores.shape], size)
    found = yolo.decode([boxes, scores], [(0.0, 0), (0.0, 0)], layout, size)
    assert found.classes.tolist() == [2]
    assert found.scores[0] == pytest.approx(1 / (1 + np.exp(-2.0)))
    # anchor (0.5, 0.5) at stride 8: x1 = (0.5 - 1) * 8, y1 = (0.5 - 2) * 8, ...
    assert found.boxes[0].tolist() == pytest.approx([-4, -12, 28, 36], abs=1e-3)


# ----------------------------------------------------------------------------- metadata


def zipped(files: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


def test_metadata_json_appended_to_a_flatbuffer():
    data = b"TFL3" + bytes(100) + zipped({"metadata.json": json.dumps({"names": {"0": "a", "1": "b"},
                                                                         "imgsz": [320, 320]})})
    meta = ultralytics_metadata(data)
    assert meta["imgsz"] == [320, 320] and metadata_names(meta) == {0: "a", 1: "b"}


def test_older_metadata_as_a_python_literal():
    data = b"TFL3" + zipped({"temp_meta.txt": "{'names': {0: 'person', 1: 'bicycle'}, 'stride': 32}"})
    assert metadata_names(ultralytics_metadata(data)) == {0: "person", 1: "bicycle"}


@pytest.mark.parametrize("data", [b"", b"TFL3" + bytes(50), zipped({"labels.txt": "cat\ndog\n"}),
                                  zipped({"metadata.json": "[1, 2]"}), zipped({"metadata.json": "{"})])
def test_no_or_unreadable_metadata_is_empty(data):
    assert ultralytics_metadata(data) == {}


def test_names_in_other_forms():
    assert metadata_names({"names": ["x", "y"]}) == {0: "x", 1: "y"}
    assert metadata_names({"names": "{0: 'x'}"}) == {0: "x"}
    assert metadata_names({"names": {"a": "x"}}) is None
    assert metadata_names({}) is None
