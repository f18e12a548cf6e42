"""`edgeapp eval` on tests/fixtures/yolo_onnx (scripts/build_yolo_onnx_fixtures.py): a float
YOLOv8 ONNX export (NCHW input, boxes in input pixels) beside Ultralytics' own int8 export of
the same net, in one run, on a held-out set given as an Ultralytics dataset and as a COCO JSON
whose category ids have gaps and another order."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

FIX = ROOT / "tests" / "fixtures" / "yolo_onnx"
ONNX = FIX / "yolov8_shapes_256.onnx"
INT8 = FIX / "yolov8_shapes_256_full_integer_quant.tflite"
VAL = FIX / "shapes_val"

pytest.importorskip("onnxruntime", reason="the onnx extra: pip install -e '.[dev]'")


def run_json(cli, *args) -> dict:
    r = cli("eval", *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_float_onnx_beside_its_int8_on_both_layouts(cli, tmp_path):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    yolo = run_json(cli, ONNX, INT8, "--data", VAL / "data.yaml")
    coco = run_json(cli, ONNX, INT8, "--data", VAL / "instances_val.json", "--save-predictions", tmp_path)
    flt, q = yolo["models"]
    assert flt["runs_on"] == "float on ONNX Runtime" and q["runs_on"] == "cpu"
    assert [m["metrics"] for m in yolo["models"]] == [m["metrics"] for m in coco["models"]]
    # Ultralytics' val of the same files (reference_metrics.json): its own AP, close to COCO's
    ref = json.loads((FIX / "reference_metrics.json").read_text())["models"]
    for entry, name in ((flt, "yolov8_onnx"), (q, "yolov8_int8_tflite")):
        assert entry["metrics"]["map"] == pytest.approx(ref[name]["map"], abs=0.02), name
        assert entry["metrics"]["map50"] == pytest.approx(ref[name]["map50"], abs=0.02), name
    assert q["delta"]["map"] == pytest.approx(q["metrics"]["map"] - flt["metrics"]["map"], abs=1e-6)
    gt = COCO(str(VAL / "instances_val.json"))
    for entry, name in zip(coco["models"], (ONNX.stem, INT8.stem)):
        ev = COCOeval(gt, gt.loadRes(str(tmp_path / f"{name}.json")), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
        assert entry["metrics"]["map"] == pytest.approx(ev.stats[0], abs=1e-9)
        assert entry["metrics"]["map50"] == pytest.approx(ev.stats[1], abs=1e-9)
