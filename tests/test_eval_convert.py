"""`convert --eval DATA`: float vs int8 in the task's own metric (eval's flow), in the report and
the sidecar, for class folders and for the other layouts eval reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from media import write_color_folders

from edgeapp.errors import ExitCode


def test_class_folders_give_the_task_metric_beside_agreement(converted, tiny_model):
    ev = converted["eval"]
    assert ev["data"]["format"] == "class folders" and ev["data"]["images"] == 60
    assert ev["float"]["runs_on"] == "float on Keras" and ev["int8"]["runs_on"] == "cpu"
    # the same images and labels as agreement's accuracy, measured by another path
    assert ev["float"]["metrics"]["top1"] == pytest.approx(converted["float_accuracy"], abs=1 / 60)
    assert ev["int8"]["metrics"]["top1"] == pytest.approx(converted["int8_accuracy"], abs=1 / 60)
    assert ev["drop"]["top1"] == pytest.approx(ev["float"]["metrics"]["top1"] - ev["int8"]["metrics"]["top1"])
    sidecar = json.loads(tiny_model.with_suffix(".json").read_text())
    assert sidecar["eval"]["int8"] == ev["int8"]["metrics"] and sidecar["eval"]["drop"] == ev["drop"]


def test_a_csv_is_measured_and_agreement_uses_held_out_calibration(tiny_data, tiny_keras, tmp_path):
    images = write_color_folders(tmp_path / "imgs", 5, seed=21)
    csv_path = tmp_path / "truth.csv"
    csv_path.write_text("path,label\n" + "".join(
        f"{p.relative_to(tmp_path)},{p.parent.name}\n" for p in sorted(images.rglob("*.png"))))
    out = tmp_path / "m.tflite"
    proc = subprocess.run(
        [sys.executable, "-m", "edgeapp", "convert", str(tiny_keras), "-o", str(out), "--calibration",
         str(tiny_data / "train"), "--samples", "60", "--eval", str(csv_path), "--format", "json"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["agreement_detail"]["measured_on"] == "held-out calibration images"
    ev = report["eval"]
    assert ev["data"]["format"] == "CSV of path,label" and ev["int8"]["images"] == 15
    assert ev["int8"]["metrics"]["top1"] > 0.9
    assert json.loads(out.with_suffix(".json").read_text())["eval"]["data"]["path"] == str(csv_path)


def test_labelled_data_whose_images_cannot_be_read_is_exit_2(tiny_data, tiny_keras, tmp_path):
    """An empty measurement is never a success: a CSV naming images that are not there gives
    one line and exit 2, not a task metric of 0.0 in the sidecar."""
    csv_path = tmp_path / "truth.csv"
    csv_path.write_text("path,label\n" + "".join(f"gone/{i}.png,red\n" for i in range(3)))
    out = tmp_path / "m.tflite"
    proc = subprocess.run(
        [sys.executable, "-m", "edgeapp", "convert", str(tiny_keras), "-o", str(out), "--calibration",
         str(tiny_data / "train"), "--samples", "60", "--eval", str(csv_path)],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == ExitCode.USAGE, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "3 of 3 image(s) could not be read" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
