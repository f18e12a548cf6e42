"""`edgeapp pose`: keypoints in original pixels, on a pose-shaped model converted by our own
`edgeapp convert` whose keypoints follow the image's colour (see posesegment_models), and the
libcoral-style resize checked against TFLite's own RESIZE_BILINEAR kernel."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import posesegment_models as pm
import pytest
from conftest import make_edgetpu_stand_in
from PIL import Image

from edgeapp.core.vision.boxes import stretch_fit
from edgeapp.core.vision.pose import KEYPOINTS, posenet_poses
from edgeapp.core.vision.preprocess import resize_bilinear
from edgeapp.errors import ExitCode

TOL = 0.02  # normalized: the model's uint8 output steps are ~0.004


@pytest.fixture(scope="session")
def ps_models(tmp_path_factory) -> dict[str, Path]:
    return pm.build(tmp_path_factory)


def expected(rgb, k: int) -> tuple[float, float, float]:
    """(x, y, score) of keypoint k, normalized to the input, for a uniform image of `rgb`."""
    r, g, b = (v / 255 for v in rgb)
    return g / 2 + 0.45 - 0.02 * k, r / 2 + 0.02 * k, b * (1 - k / 17)


def save(folder: Path, name: str, pixels: np.ndarray) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    Image.fromarray(pixels).save(p)
    return p


def test_keypoints_in_original_pixels(cli, ps_models, tmp_path):
    colors = {"a.png": ((200, 100, 204), (64, 48)), "b.png": ((40, 230, 240), (30, 90))}
    paths = [save(tmp_path, n, pm.uniform_image(c, size)) for n, (c, size) in colors.items()]
    r = cli("pose", ps_models["pose"], *paths, "--format", "jsonl", "--threshold", "0.3")
    assert r.exit_code == 0, r.stderr
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(recs) == 2
    for rec, (name, (rgb, (w, h))) in zip(recs, colors.items()):
        assert set(rec) == {"path", "device", "model", "poses", "latency_ms", "error"}
        assert rec["path"].endswith(name) and rec["error"] is None and rec["device"] == "cpu"
        (pose,) = rec["poses"]
        want = [k for k in range(17) if expected(rgb, k)[2] >= 0.3]  # no score within 0.02 of it
        assert [kp["name"] for kp in pose["keypoints"]] == [KEYPOINTS[k] for k in want]
        for k, kp in zip(want, pose["keypoints"]):
            x, y, s = expected(rgb, k)
            assert kp["x"] == pytest.approx(x * w, abs=TOL * w)
            assert kp["y"] == pytest.approx(y * h, abs=TOL * h)
            assert kp["score"] == pytest.approx(s, abs=TOL)
        mean = np.mean([expected(rgb, k)[2] for k in range(17)])
        assert pose["score"] == pytest.approx(mean, abs=TOL)  # the mean of all 17 scores


def test_letterbox_maps_keypoints_back_through_the_padding(cli, ps_models, tmp_path):
    rgb, (w, h) = (180, 120, 240), (64, 32)
    path = save(tmp_path, "wide.png", pm.uniform_image(rgb, (w, h)))
    r = cli("pose", ps_models["pose"], path, "-f", "jsonl", "--resize", "letterbox", "-t", "0")
    assert r.exit_code == 0, r.stderr
    (pose,) = json.loads(r.stdout)["poses"]
    assert len(pose["keypoints"]) == 17
    # in the 32x32 input the image is 32x16 at y 8..24: half the pixels, so half each mean
    half = tuple(v / 2 for v in rgb)
    for k, kp in enumerate(pose["keypoints"]):
        x, y, _ = expected(half, k)
        assert kp["x"] == pytest.approx(x * 32 * (w / 32), abs=TOL * w)
        want_y = min(max((y * 32 - 8) * (h / 16), 0), h)  # minus the pad, clipped to the image
        assert kp["y"] == pytest.approx(want_y, abs=TOL * 32 * (h / 16))


def test_csv_table_annotate_bad_input_and_resume(cli, ps_models, tmp_path):
    good = save(tmp_path / "in", "good.png", pm.uniform_image((200, 90, 230), (48, 48)))
    bad = tmp_path / "in" / "broken.png"
    bad.write_bytes(b"not an image")
    out = tmp_path / "poses.csv"
    r = cli("pose", ps_models["pose"], good, bad, "-f", "csv", "-o", out, "-t", "0.5",
            "--annotate", tmp_path / "ann")
    assert r.exit_code == ExitCode.INPUTS_FAILED, r.stderr
    rows = list(csv.DictReader(out.open()))
    good_rows = [row for row in rows if row["path"] == str(good)]
    assert [row["keypoint"] for row in good_rows] == \
        [KEYPOINTS[k] for k in range(17) if expected((200, 90, 230), k)[2] >= 0.5]  # k = 0..7
    assert all(row["pose"] == "1" and float(row["score"]) >= 0.5 for row in good_rows)
    (bad_row,) = [row for row in rows if row["path"] == str(bad)]
    assert "not an image" in bad_row["error"] and bad_row["keypoint"] == ""
    # the annotated copy has the keypoints drawn: red dots where the keypoints are
    ann = np.asarray(Image.open(tmp_path / "ann" / "good.png").convert("RGB")).astype(int)
    x, y = round(float(good_rows[0]["x"])), round(float(good_rows[0]["y"]))
    assert ann[y, x].tolist() == [255, 0, 0]
    assert not (tmp_path / "ann" / "broken.png").exists()
    # --resume redoes nothing that is in the file (a failed image's record included, as in JSONL)
    r = cli("pose", ps_models["pose"], good, bad, "-f", "csv", "-o", out, "--resume")
    assert "2 already done" in r.stderr
    # ... and appends to results of this model only, as classify and detect do
    other = tmp_path / "other_pose.tflite"
    other.write_bytes(Path(ps_models["pose"]).read_bytes() + b"\0" * 64)  # other bytes: another model
    before = out.read_bytes()
    r = cli("pose", other, good, "-f", "csv", "-o", out, "--resume")
    assert r.exit_code == ExitCode.USAGE and f"not of {other}" in r.stderr, r.stderr
    assert out.read_bytes() == before
    table = cli("pose", ps_models["pose"], good, "-t", "0.7")
    assert table.exit_code == 0
    assert table.stdout.startswith(f"{good}  pose ") and "nose (" in table.stdout


def test_the_wrong_command_names_the_right_one(cli, ps_models, tiny_model, tmp_path):
    img = save(tmp_path, "x.png", pm.uniform_image((10, 200, 10), (40, 40)))
    r = cli("classify", ps_models["pose"], img)
    assert r.exit_code == ExitCode.MODEL_INVALID
    assert "pose estimation model" in r.stderr and "`edgeapp pose`" in r.stderr
    r = cli("pose", tiny_model, img)
    assert r.exit_code == ExitCode.MODEL_INVALID and "`edgeapp classify`" in r.stderr
    r = cli("pose", ps_models["seg"], img)
    assert r.exit_code == ExitCode.MODEL_INVALID and "`edgeapp segment`" in r.stderr


def test_posenet_models_are_refused_with_the_reason(cli, ps_models, tmp_path):
    posenet = make_edgetpu_stand_in(ps_models["pose"], tmp_path / "posenet_decoder.tflite",
                                    custom_code="PosenetDecoderOp")
    img = save(tmp_path, "x.png", pm.uniform_image((10, 200, 10), (40, 40)))
    r = cli("pose", posenet, img)
    assert r.exit_code == ExitCode.MODEL_INVALID, r.stderr
    assert "PoseNet" in r.stderr and "PosenetDecoderOp" in r.stderr and "MoveNet" in r.stderr
    assert "Traceback" not in r.stderr


def test_posenet_outputs_are_decoded_when_the_op_exists():
    """The decoder op's outputs: (y, x) in input pixels, keypoint and pose scores, the count."""
    fit = stretch_fit((200, 100), (50, 25))  # the image is 4x the 50x25 input
    yx = np.zeros((1, 2, 17, 2), np.float32)
    yx[0, 0, :, 0], yx[0, 0, :, 1] = 10.0, np.arange(17)  # y = 10, x = k input pixels
    scores = np.full((1, 2, 17), 0.8, np.float32)
    poses = posenet_poses([yx, scores, np.array([[0.9, 0.1]], np.float32),
                           np.array([1.0], np.float32)], fit)
    assert len(poses) == 1 and poses[0].score == pytest.approx(0.9)
    assert [k.name for k in poses[0].keypoints] == list(KEYPOINTS)
    assert [(k.x, k.y) for k in poses[0].keypoints] == \
        [(pytest.approx(4.0 * k), pytest.approx(40.0)) for k in range(17)]


def test_resize_is_tflite_bilinear_with_half_pixel_centres(ps_models):
    """libcoral resizes with TFLite's float RESIZE_BILINEAR; ours must give the same bytes."""
    from edgeapp.hw.runtime import open_engine

    rng = np.random.default_rng(11)
    (sw, sh), (dw, dh) = pm.RESIZE_SRC, pm.RESIZE_DST
    pixels = rng.integers(0, 256, size=(sh, sw, 3), dtype=np.uint8)
    engine = open_engine(ps_models["resize_float"], "cpu", cpu_kernels="reference")
    (out,) = engine.run(pixels[None].astype(np.float32))
    want = out[0].astype(np.uint8)  # libcoral copies the floats into uint8: truncation
    assert np.array_equal(resize_bilinear(pixels, (dw, dh)), want)
    up = rng.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    assert resize_bilinear(up, (7, 5)) is up  # same size: untouched
