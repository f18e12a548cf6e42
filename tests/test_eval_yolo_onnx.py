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

pytestmark = pytest.mark.skipif(not (ONNX.is_file() and INT8.is_file()),
                                reason="tests/fixtures/yolo_onnx's models are not committed yet")
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
    assert flt["metrics"]["map50"] > 0.8 and q["metrics"]["map50"] > 0.8
    assert abs(q["delta"]["map"]) < 0.1  # int8 costs this net little on its own kind of images
    gt = COCO(str(VAL / "instances_val.json"))
    for entry, name in zip(coco["models"], (ONNX.stem, INT8.stem)):
        ev = COCOeval(gt, gt.loadRes(str(tmp_path / f"{name}.json")), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
        assert entry["metrics"]["map"] == pytest.approx(ev.stats[0], abs=1e-9)
        assert entry["metrics"]["map50"] == pytest.approx(ev.stats[1], abs=1e-9)
