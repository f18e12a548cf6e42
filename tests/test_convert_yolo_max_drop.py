"""`convert yolo.onnx --max-drop X` on the trained YOLOv8 export of tests/fixtures/yolo_onnx: with
labelled data (`--eval` an Ultralytics data.yaml) the budget is in mAP50-95 as `edgeapp eval`
computes it, and every trial either applies to the detector (letterboxed calibration images
included) or is skipped with why; without labels it is in box agreement, the int8 model's mAP
against the float export's own boxes. Each conversion runs as a user runs it (a subprocess,
offline); the one without labels is shared with tests/test_convert_yolo.py (tests/convert_fixtures.py).
"""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from edgeapp.errors import ExitCode

pytest.importorskip("onnx2tf", reason="the onnx extra: pip install -e '.[dev]'")
pytest.importorskip("pycocotools", reason="the eval extra: pip install -e '.[dev]'")

FIXTURES = ROOT / "tests" / "fixtures" / "yolo_onnx"
ONNX = FIXTURES / "yolov8_shapes_256.onnx"
DATA = FIXTURES / "shapes_val" / "data.yaml"
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}


def edgeapp(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "edgeapp", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **OFFLINE})


def test_with_labelled_data_every_trial_is_measured_in_evals_map(tmp_path):
    """Budget 0: no int8 file scores above the float export, so every trial runs (exit 14, the
    best one written); 16 calibration images leave `more calibration` room to load more."""
    out = tmp_path / "shapes.tflite"
    proc = edgeapp("convert", ONNX, "-o", out, "-c", FIXTURES / "shapes_calib", "--samples", "16", "--eval", DATA,
                   "--max-drop", "0", "--format", "json")
    assert proc.returncode in (0, ExitCode.OVER_BUDGET), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    tuned = report["max_drop"]
    assert tuned["metric"] == "mAP50-95" and tuned["samples"] == 84, tuned
    assert tuned["measured_on"].startswith(f"--eval Ultralytics data.yaml {DATA}")
    names = [t["trial"] for t in tuned["trials"]]
    # re-measured ranges by default (a YOLO export), then --max-drop's fixes; ranges are not
    # re-measured twice on one calibration (again only when more calibration was kept)
    assert names[:4] == ["plain", "ranges re-measured", "per-channel weights", "more calibration"], names
    assert names.index("ranges clipped") < names.index("equalization") and names.count("ranges re-measured") == 1
    assert report["ranges"]["metric"] == "mAP50-95" and report["ranges"]["calibration_samples"] == 16
    equalization = tuned["trials"][names.index("equalization")]  # SiLU between the convolutions: no pair
    assert equalization["skipped"].startswith("no two linear layers joined only by ReLU"), equalization
    assert any(n.startswith("float tail") for n in names), names
    for t in tuned["trials"]:  # measured in mAP50-95, or skipped with why; none failed
        assert t.get("metric") == "mAP50-95" or t.get("skipped"), t
        assert not t.get("error"), t
    more = next(t for t in tuned["trials"] if t["trial"] == "more calibration")
    assert more["calibration_samples"] == 52 and more["drop"] < 0.02, more  # all that the held-out split leaves
    chosen = next(t for t in tuned["trials"] if t["trial"] == tuned["chosen"])
    mapped = [t for t in tuned["trials"] if t.get("drop") is not None and t["macs_tpu_share"] >= tuned["min_tpu"]]
    assert tuned["min_tpu"] == 0.9 and chosen["drop"] == min(t["drop"] for t in mapped)
    # the values are eval's: the float export and the written model through `edgeapp eval`, run
    # from another folder (the sidecar's source is relative to its own folder), with the decode
    # the sidecar records for both (convert measured the float export with it too)
    assert json.loads(out.with_suffix(".json").read_text())["preprocessing"]["decode"] == "full"
    ev = edgeapp("eval", ONNX, out, "--data", DATA, "--format", "json", cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr[-3000:]
    flt, int8 = json.loads(ev.stdout)["models"]
    assert int8["metrics"]["map"] == chosen["int8"] and report["eval"]["int8"]["metrics"]["map"] == chosen["int8"]
    assert flt["metrics"]["map"] == chosen["float"] == report["eval"]["float"]["metrics"]["map"]
    assert "trial plain: mAP50-95 float" in proc.stderr


def test_without_labels_the_budget_is_in_box_agreement(yolov8_converted):
    """No labelled data: the float export's boxes on the held-out calibration images are the
    truth; a budget the plain conversion meets keeps it (the shared conversion of
    tests/convert_fixtures.py, --max-drop 0.05)."""
    report, out, stderr = yolov8_converted
    recorded = json.loads(out.with_suffix(".json").read_text())["max_drop"]
    written = "ranges re-measured" if report["ranges"]["kept"] else "plain"  # by default (a YOLO export)
    assert recorded["metric"] == "box agreement mAP50-95" and recorded["chosen"] == written and recorded["met"]
    assert recorded["measured_on"] == "held-out calibration images" and recorded["samples"] == 12
    plain, chosen = recorded["trials"][0], next(t for t in recorded["trials"] if t["trial"] == written)
    det = report["agreement_detail"]["detection"]
    assert plain["float"] == 1.0 and chosen["int8"] == det["map50_95"] and det["float_boxes"] > 20
    assert chosen["drop"] == pytest.approx(1.0 - det["map50_95"])
    assert "trial plain: box agreement mAP50-95 float 1.0000" in stderr
    assert "equalization" not in report  # SiLU between the convolutions: nothing to try by default


def test_re_measured_ranges_are_tried_by_default_and_said(yolov8_converted):
    """A YOLO export's conversion tries every tensor's range re-measured on the calibration
    images (the shared conversion: no labels, so measured in box agreement on the held-out
    images), writes it only when it measures better than plain, and says so in its report, its
    output and its sidecar."""
    report, out, stderr = yolov8_converted
    ranges = report["ranges"]
    assert ranges["metric"] == "box agreement mAP50-95" and ranges["samples"] == 12 and ranges["against"] == "plain"
    assert ranges["calibration_samples"] == 52 and 0 < ranges["narrowed"] < ranges["tensors"], ranges
    sidecar = json.loads(out.with_suffix(".json").read_text())
    trials = {t["trial"]: t for t in sidecar["max_drop"]["trials"]}
    plain, remeasured = trials["plain"], trials["ranges re-measured"]
    assert ranges["before"]["int8"] == plain["int8"] and ranges["remeasured"]["int8"] == remeasured["int8"]
    assert ranges["kept"] == (remeasured["int8"] > plain["int8"]), ranges
    assert remeasured["macs_tpu_share"] == 1.0 and remeasured["ops_tpu"] == remeasured["ops_total"]
    written = trials["ranges re-measured" if ranges["kept"] else "plain"]
    assert report["agreement_detail"]["detection"]["map50_95"] == written["int8"]
    verdict = "kept" if ranges["kept"] else "not kept (no better than plain)"
    assert (f"ranges re-measured on 52 calibration image(s) ({ranges['narrowed']} of {ranges['tensors']} tensor "
            f"ranges narrowed") in stderr and f"re-measured on held-out calibration images: {verdict}" in stderr
    assert sidecar["ranges"] == ranges and report["times_s"]["ranges re-measured"] == ranges["seconds"]
