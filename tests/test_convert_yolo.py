"""`edgeapp convert yolo.onnx --calibration photos/`: a trained Ultralytics YOLOv8 export
(tests/fixtures/yolo_onnx, scripts/build_yolo_onnx_fixtures.py) converted once, as a user does
it (a subprocess, offline), then run with no flags by `detect`, `camera` and the Python API and scored
by `edgeapp eval` (COCO mAP) on the labelled held-out set against the float ONNX and
Ultralytics' own int8.
"""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

pytest.importorskip("onnx2tf", reason="the onnx extra: pip install -e '.[dev]'")
pytest.importorskip("pycocotools", reason="the eval extra: pip install -e '.[dev]'")

FIXTURES = ROOT / "tests" / "fixtures" / "yolo_onnx"
ONNX = FIXTURES / "yolov8_shapes_256.onnx"
ULTRALYTICS_INT8 = FIXTURES / "yolov8_shapes_256_full_integer_quant.tflite"
VAL = FIXTURES / "shapes_val"
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
NAMES = ["circle", "square", "triangle"]


def edgeapp(*args, cwd=ROOT):
    proc = subprocess.run([sys.executable, "-m", "edgeapp", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **OFFLINE})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def converted(yolov8_converted):
    """(report, output path): the export converted once (tests/convert_fixtures.py), with the
    per-layer report and a --max-drop its plain conversion meets."""
    report, out, _ = yolov8_converted
    return report, out


def test_converts_fully_mapped_with_the_decode_on_the_cpu(converted):
    from edgeapp.core.tflite.model import load_model

    report, out = converted
    m = load_model(out)
    assert [t.shape for t in m.output_tensors] == [(1, 1344, 64), (1, 1344, 3)]  # DFL logits, class logits
    assert {t.dtype for t in m.tensors} <= {"int8", "uint8", "int32"}
    assert not {"TRANSPOSE", "SOFTMAX", "SUB", "DEQUANTIZE"} & set(m.op_names), m.op_names  # no decode
    check = report["edgetpu_check"]
    assert check["macs_tpu_share"] >= 0.95 and check["ops_tpu"] == check["ops_total"], report["edgetpu_verdict"]
    assert report["task"] == "detect" and set(report["times_s"]) >= {
        "onnx2tf: the float TensorFlow graph", "calibrate and quantize", "--report per layer"}


def test_sidecar_names_the_layout_and_the_classes(converted):
    report, out = converted
    side = json.loads(out.with_suffix(".json").read_text())
    assert side["task"] == "detect" and side["labels"] == NAMES
    assert (side["preprocessing"]["mean"], side["preprocessing"]["std"]) == (0.0, 255.0)
    y = side["yolo"]
    assert (y["layout"], y["boxes"], y["scores"], y["classes"]) == ("dfl", 0, 1, 3)
    assert y["input_size"] == [256, 256] and y["strides"] == [8, 16, 32]
    assert y["letterbox"]["pad_value"] == 114


def test_agreement_in_detection_terms(converted):
    """Without labels: the float export's own boxes are the truth the int8 model is scored on."""
    report, _ = converted
    det = report["agreement_detail"]["detection"]
    assert det["measured_on"] == "held-out calibration images" and det["float_boxes"] > 20
    assert det["map50"] >= 0.95 and det["map50_95"] >= 0.8, det


def test_detect_runs_it_with_no_flags(converted):
    _, out = converted
    truth = json.loads((VAL / "instances_val.json").read_text())
    cats = {c["id"]: c["name"] for c in truth["categories"]}
    images = [im for im in truth["images"] if any(a["image_id"] == im["id"] for a in truth["annotations"])][:6]
    proc = edgeapp("detect", out, *[VAL / im["file_name"] for im in images], "--format", "jsonl")
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(records) == len(images)
    hits = total = 0
    for im, rec in zip(images, records):
        for a in (a for a in truth["annotations"] if a["image_id"] == im["id"]):
            total += 1
            x, y, w, h = a["bbox"]
            hits += any(o["label"] == cats[a["category_id"]] and iou(o["bbox"], [x, y, x + w, y + h]) >= 0.7
                        for o in rec["objects"])
    assert hits >= 0.9 * total, (hits, total)
    from edgeapp import open_model

    with open_model(out, "cpu") as m:  # the API: the same objects, no options either
        assert m.run(str(VAL / images[0]["file_name"]))["objects"] == records[0]["objects"]


def test_camera_runs_it_with_no_flags(converted, tmp_path):
    """A rendered video of moving shapes (tests/shapes_video.py) through `camera`."""
    pytest.importorskip("cv2")
    from shapes_video import crossing_scene

    _, out = converted
    video = crossing_scene().write(tmp_path / "crossing.avi")
    proc = edgeapp("camera", out, "--source", video, "--no-display", "--max-frames", "5")
    frames = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(frames) == 5 and any(f["objects"] for f in frames), frames
    assert {o["label"] for f in frames for o in f["objects"]} <= set(NAMES)


def iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
    return ix * iy / union if union > 0 else 0.0


def test_int8_map_within_a_point_of_float_and_above_ultralytics_int8(converted):
    """`edgeapp eval` on the labelled held-out set (never calibrated on): COCO mAP50-95 of the
    float ONNX, edgeapp's int8 and Ultralytics' own full-integer export of the same checkpoint,
    all through the same pipeline (conf 0.001, IoU 0.7, 300 boxes)."""
    _, out = converted
    proc = edgeapp("eval", ONNX, out, ULTRALYTICS_INT8, "--data", VAL, "--format", "json")
    models = json.loads(proc.stdout)["models"]
    float_map, int8_map, theirs = (m["metrics"]["map"] for m in models)
    assert models[0]["runs_on"] == "float on ONNX Runtime" and models[0]["model"] == str(ONNX)
    assert float_map > 0.5, float_map  # a trained model: the comparison means something
    assert int8_map >= float_map - 0.01, (float_map, int8_map)
    assert int8_map >= theirs, (int8_map, theirs)
