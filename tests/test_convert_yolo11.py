"""`edgeapp convert yolo11.onnx --calibration photos/`: the trained YOLO11 fixture
(tests/fixtures/yolo_onnx), whose C2PSA attention the export writes as a MatMul of two
activations and TRANSPOSEs, converted once as a user does it (a subprocess, offline): its
attention rewritten into operators the Edge TPU maps, the whole model predicted on the Edge TPU
by `edgeapp check`, and `edgeapp eval` (COCO mAP) on the labelled held-out set within a point
of the float ONNX.
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
ONNX = FIXTURES / "yolo11_shapes_256.onnx"
VAL = FIXTURES / "shapes_val"
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}


def edgeapp(*args, ok=(0,)):
    proc = subprocess.run([sys.executable, "-m", "edgeapp", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **OFFLINE})
    assert proc.returncode in ok, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(report, output path): the export converted once."""
    out = tmp_path_factory.mktemp("yolo11") / "shapes11.tflite"
    proc = edgeapp("convert", ONNX, "-o", out, "--calibration", FIXTURES / "shapes_calib", "--format", "json")
    return json.loads(proc.stdout), out


def test_the_whole_model_is_predicted_on_the_edge_tpu(converted):
    report, out = converted
    check = json.loads(edgeapp("check", out, "--format", "json").stdout)["summary"]
    assert check["macs_tpu_share"] >= 0.95, check["cpu_ops"][:3]
    assert check["verdict"] == "fully_mapped" and check["ops_tpu"] == check["ops_total"], check["cpu_ops"][:3]
    assert not {"BATCH_MATMUL", "TRANSPOSE"} & set(report["ops"]), report["ops"]
    assert report["edgetpu_check"]["ops_tpu"] == check["ops_tpu"]  # convert's own line says the same


def test_the_rewrite_is_said_and_recorded(converted):
    report, out = converted
    said = [n for n in report["notes"] if n.startswith("attention rewritten for the Edge TPU")]
    assert len(said) == 1 and "1 head(s), 64 positions (8x8)" in said[0], report["notes"]
    side = json.loads(out.with_suffix(".json").read_text())
    assert side["yolo"]["rewritten_for_edgetpu"] == [
        "attention /model.10/m/m.0/attn: 1 head(s), 64 positions (8x8), key dim 16, value dim 32"]


def test_int8_map_within_a_point_of_float(converted):
    """`edgeapp eval` on the labelled held-out set (never calibrated on): COCO mAP50-95 of the
    float ONNX (the export as it is, attention included) and of the int8 model."""
    _, out = converted
    models = json.loads(edgeapp("eval", ONNX, out, "--data", VAL / "data.yaml", "--format", "json").stdout)["models"]
    float_map, int8_map = (m["metrics"]["map"] for m in models)
    assert models[0]["runs_on"] == "float on ONNX Runtime" and float_map > 0.5, models[0]
    assert int8_map >= float_map - 0.01, (float_map, int8_map)
