"""`convert --max-drop` and `--report` on a trained digits CNN whose first activation holds one
range outlier (tests/outlier_models.py): plain int8 loses about 2 points of top-1, the report
names the outlier's layer first, the trials bring top-1 back within the budget (equalization,
the whole model still on the Edge TPU), the sidecar
records the choice, and a budget no trial meets is exit 14 with the best model written. With
labelled data (`--eval` class folders or a path,label CSV) the budget is in `eval`'s own top-1,
the values `edgeapp eval` prints; without, in top-1 agreement.

Each conversion runs once per module (a subprocess, as a user runs it).
"""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from outlier_models import build_outlier_models

from edgeapp.core.tflite.model import load_model
from edgeapp.errors import ExitCode

pytest.importorskip("onnx2tf", reason="the onnx extra: pip install -e '.[dev]'")
pytest.importorskip("sklearn", reason="the digits come from scikit-learn")
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}


def convert(*args):
    return subprocess.run([sys.executable, "-m", "edgeapp", "convert", *map(str, args), "--format", "json"],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **OFFLINE})


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return build_outlier_models(tmp_path_factory.mktemp("digits"))


@pytest.fixture(scope="module")
def tuned(digits, tmp_path_factory):
    """The ONNX outlier model converted with --report and --max-drop 0.005."""
    out = tmp_path_factory.mktemp("tuned") / "digits.tflite"
    proc = convert(digits["onnx"], "-o", out, "-c", digits["train"], "--eval", digits["test"],
                   "--report", "--max-drop", "0.005")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), out, proc.stderr


def test_plain_int8_loses_accuracy_and_max_drop_brings_it_back(tuned):
    report, out, stderr = tuned
    trials = report["max_drop"]["trials"]
    plain = trials[0]
    assert plain["trial"] == "plain" and plain["metric"] == "top-1 accuracy"
    assert plain["drop"] > 0.01, plain  # the outlier costs more than a point
    assert report["max_drop"]["met"] and report["max_drop"]["chosen"] != "plain"
    # measured by eval's flow on the 500 labelled digits of --eval
    assert report["max_drop"]["measured_on"].startswith("--eval class folders")
    assert report["max_drop"]["samples"] == 500
    # the written model is the kept one: eval's top-1 and agreement's accuracy of it agree
    ev = report["eval"]
    kept = next(t for t in trials if t["trial"] == report["max_drop"]["chosen"])
    assert (kept["float"], kept["int8"]) == (ev["float"]["metrics"]["top1"], ev["int8"]["metrics"]["top1"])
    assert kept["int8"] == pytest.approx(report["int8_accuracy"], abs=1 / 500)
    assert report["float_accuracy"] - report["int8_accuracy"] <= 0.005 + 1 / 500
    assert report["samples"] == 500 and kept["ops_tpu"] == report["edgetpu_check"]["ops_tpu"]
    for t in trials:  # each trial printed with its metric and its share of the Edge TPU
        if t.get("drop") is not None:
            assert f"trial {t['trial']}: top-1 accuracy" in stderr


def test_equalization_keeps_the_whole_model_on_the_edge_tpu(tuned):
    """The outlier's channel rescaled between conv1 and conv2 (the constant Add scaled alike):
    the budget is met with every MAC on the Edge TPU, before any float tail is tried."""
    report, out, stderr = tuned
    trials = report["max_drop"]["trials"]
    kept = next(t for t in trials if t["trial"] == report["max_drop"]["chosen"])
    assert kept["drop"] <= 0.005 and kept["macs_tpu_share"] >= 0.95, kept
    eq = next(t for t in trials if t["trial"] == "equalization")
    assert eq["pairs"] == ["CONV_2D #0 -> CONV_2D #2"] and eq["max_scale"] > 4, eq
    assert eq["macs_tpu_share"] == 1.0 and eq["drop"] < trials[0]["drop"] - 0.01  # most of the loss back
    # kept: the equalized model, or bias correction on top of it
    assert kept is eq or (kept["trial"] == "bias correction" and kept["on"] == "equalization"), kept
    assert not any(t["trial"].startswith("float tail") for t in trials)
    assert "trial equalization: top-1 accuracy" in stderr


def test_the_sidecar_records_the_choice(tuned):
    report, out, _ = tuned
    sidecar = json.loads(out.with_suffix(".json").read_text())
    recorded = sidecar["max_drop"] if "max_drop" in sidecar else sidecar["extra"]["max_drop"]
    assert recorded["chosen"] == report["max_drop"]["chosen"] and recorded["budget"] == 0.005
    assert [t["trial"] for t in recorded["trials"]] == [t["trial"] for t in report["max_drop"]["trials"]]
    # the file is the chosen trial's: a float tail has DEQUANTIZE before its float ops
    ops = load_model(out).op_names
    assert ("DEQUANTIZE" in ops) == recorded["chosen"].startswith("float tail")


def test_report_names_the_outlier_add_first(tuned):
    report, out, _ = tuned
    doc = json.loads(out.with_suffix(".report.json").read_text())
    first = doc["layers"][0]
    assert first["op"] == "ADD" and first["source"] == "outlier_add", first
    assert first["range_inflation"] > 20 and "one outlier sets the int8 step" in first["cause"]
    assert first["output_sqnr_db"] < min(r["output_sqnr_db"] for r in doc["layers"][1:] if r.get("output_sqnr_db"))
    fc = next(r for r in doc["layers"] if r["op"] == "FULLY_CONNECTED")
    assert fc["source"] == "fc", fc  # the model's output layer, not `PartitionedCall:0`


def test_no_trial_within_the_budget_is_exit_14_with_the_best_kept(digits, tmp_path):
    """The Keras source, and no labels (a glob: no class folders), so the budget is in top-1
    agreement with the float model; 0 asks for not one of the 1,297 images to change its answer,
    which every trial keeping some of the model int8 misses (the best ones here: ~10)."""
    out = tmp_path / "k.tflite"
    proc = convert(digits["keras"], "-o", out, "-c", f"{digits['train']}/*/*.png", "--samples", "2000",
                   "--val", "0", "--max-drop", "0")
    assert proc.returncode == ExitCode.OVER_BUDGET, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    tuned = report["max_drop"]
    assert not tuned["met"] and tuned["metric"] == "top-1 agreement"
    best = min((t for t in tuned["trials"] if t.get("drop") is not None), key=lambda t: t["drop"])
    assert tuned["chosen"] == best["trial"] and out.is_file()
    assert "no trial kept the loss within --max-drop" in proc.stderr


def test_with_a_csv_of_labels_the_budget_is_in_evals_top1(digits, tmp_path):
    """--eval a path,label CSV (labelled data eval reads, not class folders): the trials are
    measured by eval's flow on its images, not on held-out calibration images, and the float and
    int8 values the sidecar records are what `edgeapp eval` prints for the float source and the
    written model."""
    rows = sorted(digits["test"].rglob("*.png"))[::2]  # 250 of the 500 held-out digits
    csv_path = digits["test"].parent / "half.csv"
    csv_path.write_text("path,label\n" + "".join(f"{p.relative_to(csv_path.parent)},{p.parent.name}\n"
                                                  for p in rows))
    out = tmp_path / "k.tflite"
    proc = convert(digits["keras"], "-o", out, "-c", digits["train"], "--eval", csv_path, "--max-drop", "0.05")
    assert proc.returncode == 0, proc.stderr[-3000:]
    recorded = json.loads(out.with_suffix(".json").read_text())["max_drop"]
    assert recorded["metric"] == "top-1 accuracy" and recorded["samples"] == len(rows)
    assert recorded["measured_on"].startswith(f"--eval CSV of path,label {csv_path}")
    assert json.loads(proc.stdout)["agreement_detail"]["measured_on"] == "held-out calibration images"
    chosen = next(t for t in recorded["trials"] if t["trial"] == recorded["chosen"])
    ev = subprocess.run([sys.executable, "-m", "edgeapp", "eval", str(digits["keras"]), str(out), "--data",
                         str(csv_path), "--format", "json"], capture_output=True, text=True, cwd=ROOT,
                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **OFFLINE})
    assert ev.returncode == 0, ev.stderr[-3000:]
    flt, int8 = json.loads(ev.stdout)["models"]
    assert flt["runs_on"] == "float on Keras" and flt["images"] == int8["images"] == len(rows)
    assert chosen["float"] == flt["metrics"]["top1"] and chosen["int8"] == int8["metrics"]["top1"]
    assert f"trial plain: top-1 accuracy float {flt['metrics']['top1']:.4f}" in proc.stderr
