"""`edgeapp detect` on Ultralytics' YOLO exports, end to end: the boxes a user gets from the
command (Pillow decoding, Ultralytics' letterbox, quantization, decode, NMS, boxes back in the
image's pixels) equal Ultralytics' own decoding of the same file (tests/fixtures/yolo, made by
scripts/build_yolo_fixtures.py), and `check` / `--decoder` say what a YOLO user needs.
tests/test_yolo_core.py tests the pure functions; tests/test_tasks_contract.py takes a YOLO
export down every other path (camera, live view, MQTT, --device all, --cluster, the API).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from media import make_video
from yolo_reference import assert_same_detections, exact_runtime, iou

from edgeapp.errors import ExitCode

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "yolo"
MODELS = sorted(FIXTURES.glob("*.tflite"))
IMAGES = sorted((FIXTURES / "images").glob("*.png"))


def output_step(reference: dict) -> float:
    """One quantization step of the score tensor, in score units (split DFL: of its class
    logits, through a sigmoid whose slope is at most 1/4)."""
    outputs = reference["outputs"]
    if len(outputs) == 1:
        return float(outputs[0]["scale"])
    scores = next(o for o in outputs if o["shape"][-1] != 64)
    return float(scores["scale"]) / 4


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.stem)
def test_detect_gives_ultralytics_boxes(cli, model):
    reference = json.loads(model.with_suffix(".json").read_text())
    r = cli("detect", model, *IMAGES, "-f", "jsonl", "--top-k", "300")
    assert r.exit_code == 0, r.stderr
    step = output_step(reference)
    lines = r.stdout.splitlines()
    assert len(lines) == len(IMAGES)  # one record per image: the loop below checks each
    for line in lines:
        rec = json.loads(line)
        want = reference["images"][Path(rec["path"]).name]["detections"]
        got = [(o["id"], o["score"], o["bbox"]) for o in rec["objects"]]
        assert_same_detections(got, want, step, rec["path"])


def test_labels_come_from_ultralytics_metadata(cli):
    r = cli("detect", FIXTURES / "yolov8_256_full_integer_quant.tflite", IMAGES[0], "-f", "jsonl")
    labels = {o["label"] for o in json.loads(r.stdout)["objects"]}
    assert labels and labels <= {"circle", "square", "triangle"}


def test_threshold_defaults_to_ultralytics_and_can_be_raised(cli):
    model = FIXTURES / "yolov8_256_full_integer_quant.tflite"
    default = json.loads(cli("detect", model, IMAGES[0], "-f", "jsonl").stdout)["objects"]
    assert min(o["score"] for o in default) > 0.25
    if exact_runtime():  # (another runtime's rounding may drop the 0.35 box below 0.25)
        assert min(o["score"] for o in default) < 0.4  # a low one only YOLO's 0.25 default lets in
    high = json.loads(cli("detect", model, IMAGES[0], "-f", "jsonl", "-t", "0.95").stdout)["objects"]
    assert all(o["score"] >= 0.95 for o in high) and len(high) < len(default)


def test_iou_and_max_det_options(cli):
    model = FIXTURES / "yolov8_256_full_integer_quant.tflite"
    loose = json.loads(cli("detect", model, IMAGES[2], "-f", "jsonl", "--iou", "0.95").stdout)["objects"]
    strict = json.loads(cli("detect", model, IMAGES[2], "-f", "jsonl", "--iou", "0.3").stdout)["objects"]
    assert len(strict) < len(loose)  # overlapping boxes of a class dropped at a lower IoU
    one = json.loads(cli("detect", model, IMAGES[2], "-f", "jsonl", "--max-det", "1").stdout)["objects"]
    assert len(one) == 1 and one[0] == loose[0]


def test_a_wrong_decoder_is_refused_in_one_line(cli):
    model = FIXTURES / "yolov8_256_full_integer_quant.tflite"
    r = cli("detect", model, IMAGES[0], "--decoder", "dfl")
    assert r.exit_code == ExitCode.MODEL_INVALID and "not a dfl layout" in r.stderr
    assert [line for line in r.stderr.splitlines() if "error" in line][0].endswith("anchors")
    assert "Traceback" not in r.stderr
    r = cli("detect", model, IMAGES[0], "--decoder", "bogus")
    assert r.exit_code == ExitCode.USAGE and "yolov8" in r.stderr


def test_classify_names_detect_for_a_yolo_export(cli):
    """Before: `detect` said a YOLO export "looks like a classifier"."""
    r = cli("classify", FIXTURES / "yolov8_256_full_integer_quant.tflite", IMAGES[0])
    assert r.exit_code == ExitCode.MODEL_INVALID and "use `edgeapp detect`" in r.stderr


def test_check_explains_a_yolo_export(cli):
    r = cli("check", FIXTURES / "yolov8_256_full_integer_quant.tflite")
    assert r.exit_code == ExitCode.NOT_MAPPABLE, r.stderr  # the head's decode stays on the CPU
    advice = [line for line in r.stdout.splitlines() if line.startswith("advice")]
    assert "a YOLO export (yolov8 layout" in advice[0] and "edgeapp detect" in advice[0]
    assert "head's box decode" in advice[0]
    assert not any("segmentation" in a for a in advice)


def test_compile_passes_the_delegate_search_step(cli, tmp_path, monkeypatch):
    """As Ultralytics' export does: --search_delegate --delegate_search_step 30."""
    import stat

    seen = tmp_path / "argv.txt"
    fake = tmp_path / "edgetpu_compiler"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {seen}\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("EDGETPU_COMPILER", str(fake))
    model = tmp_path / "y.tflite"
    model.write_bytes((FIXTURES / "yolov8_256_full_integer_quant.tflite").read_bytes())
    cli("compile", model, "--search-delegate", "--delegate-search-step", "30")
    argv = seen.read_text().split()
    assert "--search_delegate" in argv and argv[argv.index("--delegate_search_step") + 1] == "30"
    r = cli("compile", model, "--delegate-search-step", "30")
    assert r.exit_code == ExitCode.USAGE


def test_camera_frames_are_letterboxed_like_files(cli, tmp_path):
    """A video of a fixture image finds what the image command finds (OpenCV decodes frames;
    the same Ultralytics letterbox fits them)."""
    import cv2

    image = cv2.imread(str(IMAGES[0]))
    video = make_video(tmp_path / "v.avi", [image] * 3, fps=10)
    model = FIXTURES / "yolov8_256_full_integer_quant.tflite"
    cam = cli("camera", model, "--source", video, "--no-display", "--max-frames", "1", "-f", "jsonl")
    assert cam.exit_code == 0, cam.stderr
    got = json.loads(cam.stdout.splitlines()[0])["objects"]
    files = json.loads(cli("detect", model, IMAGES[0], "-f", "jsonl").stdout)["objects"]
    strong = [o for o in files if o["score"] > 0.5]
    assert strong, "the image has objects the detector is sure of: the check below needs them"
    for o in strong:  # MJPG blurs a little: the clear objects are found at the same places
        assert max(iou(o["bbox"], g["bbox"]) for g in got if g["id"] == o["id"]) > 0.8
    assert np.isfinite([g["score"] for g in got]).all()


def test_decoder_ssd_on_a_yolo_export_says_what_it_is(cli):
    r = cli("detect", FIXTURES / "yolov8_256_full_integer_quant.tflite", IMAGES[0], "--decoder", "ssd")
    assert r.exit_code == ExitCode.MODEL_INVALID
    assert "YOLO export" in r.stderr and "classif" not in r.stderr
