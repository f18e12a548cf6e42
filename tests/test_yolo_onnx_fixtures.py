"""The committed YOLO ONNX fixtures and the shipped shapes detector agree with each other.

scripts/build_yolo_onnx_fixtures.py made them once in its own venv (Ultralytics, torch): ONNX
exports carrying Ultralytics' metadata, a held-out set labelled twice (Ultralytics' text labels
and a COCO JSON whose category ids have gaps), calibration photos, Ultralytics' int8 export and
the mAPs Ultralytics' val measured. Other tests and helpers compare against these files, so here
they are checked against each other: the same boxes in both label formats, names in the ONNX
metadata, and the shipped detector finding the labelled shapes.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "yolo_onnx"
VAL = FIXTURES / "shapes_val"
NAMES = {0: "circle", 1: "square", 2: "triangle"}
SHIPPED = ROOT / "models" / "shapes_yolov8_int8.tflite"
ONNX = sorted(FIXTURES.glob("*.onnx"))


def yolo_boxes(stem: str, w: int, h: int) -> list:
    """(name, x, y, w, h) in pixels from an Ultralytics label file; none when there is no file."""
    path = VAL / "labels" / f"{stem}.txt"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        c, cx, cy, bw, bh = line.split()
        cx, cy, bw, bh = (float(v) for v in (cx, cy, bw, bh))
        out.append((NAMES[int(c)], (cx - bw / 2) * w, (cy - bh / 2) * h, bw * w, bh * h))
    return out


def coco() -> dict:
    return json.loads((VAL / "instances_val.json").read_text())


def test_labels_parse_and_lie_inside_their_images():
    images = sorted((VAL / "images").glob("*.jpg"))
    labelled = sorted((VAL / "labels").glob("*.txt"))
    assert 60 <= len(images) <= 100
    assert {p.stem for p in labelled} < {p.stem for p in images}  # some images have no objects
    for label in labelled:
        lines = label.read_text().splitlines()
        assert lines, label
        for line in lines:
            fields = line.split()
            assert len(fields) == 5 and fields[0] in ("0", "1", "2"), (label, line)
            cx, cy, w, h = (float(v) for v in fields[1:])
            assert 0 < w <= 1 and 0 < h <= 1, (label, line)
            assert cx - w / 2 >= -1e-6 and cx + w / 2 <= 1 + 1e-6, (label, line)
            assert cy - h / 2 >= -1e-6 and cy + h / 2 <= 1 + 1e-6, (label, line)
    yaml_text = (VAL / "data.yaml").read_text()
    for k, v in NAMES.items():
        assert f"{k}: {v}" in yaml_text


def test_coco_json_and_yolo_labels_describe_the_same_boxes():
    data = coco()
    cats = {c["id"]: c["name"] for c in data["categories"]}
    assert sorted(cats.values()) == sorted(NAMES.values())
    assert sorted(cats) != [1, 2, 3] and sorted(cats) != [0, 1, 2]  # gaps: match by name
    by_image = {}
    for a in data["annotations"]:
        assert a["iscrowd"] == 0 and a["area"] == pytest.approx(a["bbox"][2] * a["bbox"][3])
        by_image.setdefault(a["image_id"], []).append((cats[a["category_id"]], *a["bbox"]))
    files = sorted(p.name for p in (VAL / "images").glob("*.jpg"))
    assert sorted(Path(i["file_name"]).name for i in data["images"]) == files
    for image in data["images"]:
        path = VAL / image["file_name"]  # relative to the JSON's folder
        with Image.open(path) as im:
            assert im.size == (image["width"], image["height"])
        ours = sorted(yolo_boxes(path.stem, image["width"], image["height"]))
        theirs = sorted(by_image.get(image["id"], []))
        assert [b[0] for b in ours] == [b[0] for b in theirs], path
        assert np.allclose([b[1:] for b in ours], [b[1:] for b in theirs], atol=0.01), path


def test_calibration_photos_are_not_the_held_out_images():
    def digests(folder: Path) -> set:
        return {hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.glob("*.jpg")}

    calib = digests(FIXTURES / "shapes_calib")
    assert len(calib) >= 50
    assert not calib & digests(VAL / "images")


@pytest.mark.parametrize("model", ONNX, ids=[p.stem for p in ONNX])
def test_onnx_exports_carry_ultralytics_metadata_and_run(model):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    assert ast.literal_eval(meta["names"]) == NAMES
    assert meta["task"] == "detect" and ast.literal_eval(meta["imgsz"]) == [256, 256]
    (inp,) = session.get_inputs()
    assert inp.shape == [1, 3, 256, 256]
    (out,) = session.run(None, {inp.name: np.zeros((1, 3, 256, 256), np.float32)})
    assert out.shape == (1, 4 + len(NAMES), 1344)  # 32² + 16² + 8² anchors at strides 8, 16, 32


def test_reference_metrics_name_the_committed_files():
    ref = json.loads((FIXTURES / "reference_metrics.json").read_text())
    for key in ("yolov8_pytorch", "yolov8_onnx", "yolov8_int8_tflite"):
        m = ref["models"][key]
        assert 0 < m["map"] <= m["map50"] <= 1, key
        assert m["file"].endswith("(not committed)") or (FIXTURES / m["file"]).exists()
    assert ref["versions"]["ultralytics"] and ref["seed"] is not None


def iou(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def detect_jsonl(*inputs: Path) -> list:
    """`edgeapp detect` as a user runs it: no flags beyond the output format."""
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "detect", str(SHIPPED), *map(str, inputs),
                           "--format", "jsonl"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_shipped_detector_finds_shapes_in_its_samples():
    records = detect_jsonl(ROOT / "models" / "samples_shapes")
    assert len(records) == len(list((ROOT / "models" / "samples_shapes").glob("*.jpg"))) >= 3
    for r in records:
        assert r["error"] is None and r["objects"], r["path"]
        assert {o["label"] for o in r["objects"]} <= set(NAMES.values()), r["path"]


def test_shipped_detector_finds_the_labelled_shapes_of_the_held_out_set():
    """Its boxes against the held-out labels at IoU 0.5, names matched: most found, few extra."""
    records = detect_jsonl(VAL / "images")
    sizes = {Path(i["file_name"]).name: (i["width"], i["height"]) for i in coco()["images"]}
    truth_n = hits = found_n = 0
    for r in records:
        path = Path(r["path"])
        truth = [(n, x, y, x + w, y + h) for n, x, y, w, h in yolo_boxes(path.stem, *sizes[path.name])]
        found = [(o["label"], *o["bbox"]) for o in r["objects"]]
        truth_n, found_n = truth_n + len(truth), found_n + len(found)
        for t in truth:
            hits += any(f[0] == t[0] and iou(f[1:], t[1:]) >= 0.5 for f in found)
    assert len(records) == len(sizes)
    assert hits >= 0.8 * truth_n and found_n <= 1.25 * truth_n, (hits, found_n, truth_n)
