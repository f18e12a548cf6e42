"""`edgeapp segment` and `camera --task pose|segment`: on segmentation-shaped models converted by
our own `edgeapp convert` (class scores [1, 16, 16, 4] and a class map [1, 16, 16], see
posesegment_models), real images and real OpenCV video files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import posesegment_models as pm
import pytest
from media import make_video
from PIL import Image

from edgeapp.core.vision.boxes import letterbox_fit, stretch_fit
from edgeapp.core.vision.segmentation import class_map, colorize, mask_to_original, pascal_palette
from edgeapp.errors import ExitCode

cv2 = pytest.importorskip("cv2")

LABELS = list(pm.SEG_LABELS)


@pytest.fixture(scope="session")
def ps_models(tmp_path_factory) -> dict[str, Path]:
    return pm.build(tmp_path_factory)


def save(folder: Path, name: str, pixels: np.ndarray) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    Image.fromarray(pixels).save(p)
    return p


def quadrant_classes(h: int, w: int) -> np.ndarray:
    """The class each pixel of a `quadrants` image has: red 1, green 2, blue 3, black 0."""
    m = np.zeros((h, w), np.int64)
    m[:h // 2, :w // 2], m[:h // 2, w // 2:], m[h // 2:, :w // 2] = 1, 2, 3
    return m


@pytest.mark.parametrize("name", ["seg", "segmap"])
def test_classes_shares_and_mask_at_the_original_size(cli, ps_models, tmp_path, name):
    w, h = 320, 240
    img = save(tmp_path / "in", "quads.png", pm.quadrants((w, h)))
    r = cli("segment", ps_models[name], img, "-f", "jsonl", "--mask", tmp_path / "masks",
            "--annotate", tmp_path / "ann")
    assert r.exit_code == 0, r.stderr
    rec = json.loads(r.stdout)
    assert set(rec) == {"path", "device", "model", "classes", "mask", "latency_ms", "error"}
    assert {c["id"] for c in rec["classes"]} == {0, 1, 2, 3}
    for c in rec["classes"]:  # labels from the model's sidecar (convert --labels)
        assert c["label"] == LABELS[c["id"]] and c["share"] == pytest.approx(0.25, abs=0.05)
    assert sum(c["share"] for c in rec["classes"]) == pytest.approx(1.0, abs=1e-5)
    shares = [c["share"] for c in rec["classes"]]
    assert shares == sorted(shares, reverse=True)
    mask = np.asarray(Image.open(rec["mask"]))
    assert rec["mask"] == str(tmp_path / "masks" / "quads.png")
    assert mask.shape == (h, w) and mask.dtype == np.uint8
    want = quadrant_classes(h, w)
    inner = np.zeros((h, w), bool)  # away from the quadrant edges, where blocks straddle them
    edge = w // 16 + 2  # a model pixel covers 20 image pixels here; one may straddle an edge
    inner[:h // 2 - edge, :w // 2 - edge] = inner[:h // 2 - edge, w // 2 + edge:] = True
    inner[h // 2 + edge:, :w // 2 - edge] = inner[h // 2 + edge:, w // 2 + edge:] = True
    assert np.array_equal(mask[inner], want[inner])
    assert (mask == want).mean() > 0.9
    # the overlay: each pixel halfway between the image and its class's PASCAL colour (the
    # legend sits at the top left)
    ann = np.asarray(Image.open(tmp_path / "ann" / "quads.png").convert("RGB")).astype(int)
    palette = pascal_palette().astype(int)
    for (y, x), rgb, cls in [((h // 4, 3 * w // 4), (0, 255, 0), 2), ((3 * h // 4, w // 4), (0, 0, 255), 3),
                             ((3 * h // 4, 3 * w // 4), (0, 0, 0), 0)]:
        assert np.abs(ann[y, x] - (np.array(rgb) + palette[cls]) / 2).max() <= 1


def test_letterbox_brings_the_map_back_through_the_padding(cli, ps_models, tmp_path):
    w, h = 96, 32  # padded top and bottom in the square input
    a = np.zeros((h, w, 3), np.uint8)
    a[:, :w // 2] = (255, 0, 0)
    a[:, w // 2:] = (0, 0, 255)
    img = save(tmp_path, "wide.png", a)
    r = cli("segment", ps_models["seg"], img, "-f", "jsonl", "--resize", "letterbox", "--mask",
            tmp_path / "m")
    assert r.exit_code == 0, r.stderr
    rec = json.loads(r.stdout)
    shares = {c["label"]: c["share"] for c in rec["classes"]}
    # the image is 32x11 in the input, in 2x2 model pixels: the last row of them is half
    # padding (black), so background there
    assert set(shares) <= {"red", "blue", "background"} and shares.get("background", 0) < 0.15
    assert shares["red"] == pytest.approx(shares["blue"], abs=0.05) and shares["red"] > 0.4
    mask = np.asarray(Image.open(rec["mask"]))
    assert mask.shape == (h, w)
    rows = slice(h // 4, 3 * h // 4)
    assert (mask[rows, :w // 2 - 6] == 1).all() and (mask[rows, w // 2 + 6:] == 3).all()


def test_csv_table_bad_input_resume_and_reference_kernels(cli, ps_models, tmp_path):
    img = save(tmp_path / "in", "q.png", pm.quadrants((40, 40)))
    bad = tmp_path / "in" / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 truncated")
    out = tmp_path / "seg.csv"
    r = cli("segment", ps_models["seg"], img, bad, "-f", "csv", "-o", out, "--cpu-kernels",
            "reference")
    assert r.exit_code == ExitCode.INPUTS_FAILED, r.stderr
    rows = list(csv.DictReader(out.open()))
    good = [row for row in rows if row["path"] == str(img)]
    assert sorted(row["label"] for row in good) == sorted(LABELS)
    assert [row["rank"] for row in good] == ["1", "2", "3", "4"] and all(row["mask"] == "" for row in good)
    (bad_row,) = [row for row in rows if row["path"] == str(bad)]
    assert bad_row["error"] and bad_row["id"] == ""
    r = cli("segment", ps_models["seg"], img, bad, "-f", "csv", "-o", out, "--resume")
    assert "2 already done" in r.stderr  # both records are whole: nothing is redone
    table = cli("segment", ps_models["segmap"], img)
    assert table.exit_code == 0 and table.stdout.startswith(f"{img}  ")
    assert "red 25.0%" in table.stdout or "red 2" in table.stdout
    r = cli("classify", ps_models["segmap"], img)
    assert r.exit_code == ExitCode.MODEL_INVALID and "`edgeapp segment`" in r.stderr


def test_map_to_original_is_nearest_through_the_fit():
    """Pure geometry: a 4x4 map over an 8x2 image stretched, and over a letterboxed one."""
    m = np.arange(16).reshape(4, 4)
    full = mask_to_original(m, stretch_fit((8, 2), (4, 4)))
    # pixel centres: image rows 0.5 and 1.5 fall on map rows 1.0 and 3.0
    assert full.tolist() == [[4, 4, 5, 5, 6, 6, 7, 7], [12, 12, 13, 13, 14, 14, 15, 15]]
    fit = letterbox_fit((8, 2), (4, 4))  # content 4x1 at y = 1 (pad 1 above)
    assert mask_to_original(m, fit).tolist() == [[4, 4, 5, 5, 6, 6, 7, 7]] * 2
    scores = np.zeros((1, 2, 2, 3), np.uint8)
    scores[0, 0, 0, 2] = scores[0, 1, 1, 1] = 9
    assert class_map(scores).tolist() == [[2, 0], [0, 1]]  # ties go to the first class
    assert colorize(np.array([[15]])).tolist() == [[[192, 128, 128]]]  # VOC's person colour


# ---------------------------------------------------------------------------------------------
# camera --task pose|segment on real video files


def test_camera_segment_task_on_a_video(cli, ps_models, tmp_path):
    frames = [pm.quadrants((160, 120)), pm.quadrants((160, 120), colors=((0, 0, 0),) * 4)]
    video = make_video(tmp_path / "quads.avi", frames * 2, fps=10, rgb=True)
    rec_path = tmp_path / "out.avi"
    r = cli("camera", ps_models["seg"], "--source", video, "--no-display", "--format", "jsonl",
            "--summary", "json", "--record", rec_path)
    assert r.exit_code == 0, r.stderr
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [rec["frame"] for rec in recs] == [0, 1, 2, 3]
    for rec in recs[0::2]:
        assert {c["label"] for c in rec["classes"]} == set(LABELS)
    for rec in recs[1::2]:  # an all-black frame is all background
        assert rec["classes"] == [{"id": 0, "label": "background", "share": 1.0}]
    assert json.loads(r.stderr.strip().splitlines()[-1])["task"] == "segment"  # from the sidecar
    cap = cv2.VideoCapture(str(rec_path))
    ok, frame = cap.read()
    cap.release()
    assert ok and frame.shape == (120, 160, 3)
    # the recorded frame has the overlay: green (0, 255, 0) blended with class 2's (0, 128, 0)
    b, g, r_ = frame[30, 140].astype(int)
    assert 170 < g < 215 and r_ < 40 and b < 40


def test_camera_pose_task_on_a_video(cli, ps_models, tmp_path):
    rgb = (200, 60, 230)
    video = make_video(tmp_path / "pose.avi", [pm.uniform_image(rgb, (96, 64))] * 3, fps=10, rgb=True)
    r = cli("camera", ps_models["pose"], "--source", video, "--no-display", "--format", "csv",
            "--threshold", "0.5", "--summary", "json")
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(r.stdout.splitlines()))
    first = [row for row in rows if row["frame"] == "0"]
    assert [row["keypoint"] for row in first][:2] == ["nose", "left_eye"]  # as `edgeapp pose` writes
    assert all(row["pose"] == "1" and float(row["score"]) >= 0.5 for row in first)
    r_, g_ = rgb[0] / 255, rgb[1] / 255  # MJPG blurs colours a little: a looser tolerance
    assert float(first[0]["x"]) == pytest.approx((g_ / 2 + 0.45) * 96, abs=0.04 * 96)
    assert float(first[0]["y"]) == pytest.approx((r_ / 2) * 64, abs=0.04 * 64)
    assert json.loads(r.stderr.strip().splitlines()[-1])["task"] == "pose"
    r = cli("camera", ps_models["pose"], "--source", video, "--no-display", "--task", "classify")
    assert r.exit_code == ExitCode.MODEL_INVALID and "--task pose" in r.stderr


def test_python_api_pose_and_segment(ps_models):
    import edgeapp

    seg = edgeapp.open_model(ps_models["segmap"], "cpu", cpu_kernels="reference")
    classes, full = seg.segment(pm.quadrants((120, 90)))  # a uint8 array, as a camera gives
    assert full.shape == (90, 120) and {c["label"] for c in classes} == set(LABELS)
    assert full[10, 10] == 1 and full[80, 110] == 0  # red top-left, black bottom-right
    pose = edgeapp.open_model(ps_models["pose"]).pose(pm.uniform_image((200, 60, 230), (50, 40)),
                                                      threshold=0.5)
    assert pose[0]["keypoints"][0]["name"] == "nose"
    assert pose[0]["keypoints"][0]["x"] == pytest.approx((60 / 255 / 2 + 0.45) * 50, abs=1)
