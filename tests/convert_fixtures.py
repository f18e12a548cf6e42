"""Conversions several test modules read, each run once per session (a subprocess, offline, as
a user runs it): the trained YOLOv8 export of tests/fixtures/yolo_onnx converted with no flags
but `--report` and a `--max-drop` its plain conversion meets (the written model is the plain
one; the trial measure, box agreement, adds its record)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

YOLO_FIXTURES = ROOT / "tests" / "fixtures" / "yolo_onnx"
YOLOV8_ONNX = YOLO_FIXTURES / "yolov8_shapes_256.onnx"
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
YOLOV8_BUDGET = 0.05


@pytest.fixture(scope="session")
def yolov8_converted(tmp_path_factory) -> tuple:
    """(report, output path, stderr) of `convert yolov8_shapes_256.onnx --calibration
    shapes_calib --report --max-drop 0.05`."""
    pytest.importorskip("onnx2tf", reason="the onnx extra: pip install -e '.[dev]'")
    pytest.importorskip("pycocotools", reason="the eval extra: pip install -e '.[dev]'")
    out = tmp_path_factory.mktemp("yolov8") / "shapes.tflite"
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "convert", str(YOLOV8_ONNX), "-o", str(out),
                           "--calibration", str(YOLO_FIXTURES / "shapes_calib"), "--report",
                           "--max-drop", str(YOLOV8_BUDGET), "--format", "json"],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **OFFLINE})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), out, proc.stderr
