"""`convert`'s inputs: paths checked before TensorFlow loads, and photos that do not decode.

A missing model is exit 4 as for every other command, an empty --calibration folder exit 2,
both at once (TensorFlow never imported); one undecodable calibration image is skipped with one
line as `retrain` does, and only a folder where most images fail is an error (exit 2), leaving
no empty output folder behind.
"""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from media import write_color_folders

from edgeapp.errors import ExitCode

ONNX = ROOT / "tests" / "fixtures" / "onnx" / "colors_nchw.onnx"


def convert_in_process(*args):
    """The CLI in a fresh interpreter; the last line printed says whether TensorFlow was imported."""
    code = ("import sys\nfrom edgeapp.cli.app import app\n"
            f"try:\n    app(['convert', *{[str(a) for a in args]!r}])\nexcept SystemExit as e:\n"
            "    code = e.code\nprint('EXIT', code, 'TF', 'tensorflow' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    last = proc.stdout.strip().splitlines()[-1].split()
    return int(last[1]), last[3] == "True", proc.stderr


def test_missing_model_is_exit_4_before_tensorflow(tmp_path, tiny_data):
    code, tf_loaded, err = convert_in_process(tmp_path / "nothere.keras", "-o", tmp_path / "o.tflite",
                                              "-c", tiny_data / "train")
    assert code == ExitCode.MODEL_INVALID and not tf_loaded, err
    assert "model not found" in err and "loading" not in err


def test_empty_calibration_folder_is_exit_2_before_tensorflow(tmp_path, tiny_keras):
    (tmp_path / "empty").mkdir()
    code, tf_loaded, err = convert_in_process(tiny_keras, "-o", tmp_path / "o.tflite", "-c", tmp_path / "empty")
    assert code == ExitCode.USAGE and not tf_loaded, err
    assert "no images" in err.strip().splitlines()[-1]
    assert not (tmp_path / "o.tflite").exists()


def test_one_undecodable_photo_is_skipped(tmp_path, tiny_keras):
    photos = write_color_folders(tmp_path / "photos", 10, seed=4)
    good = (photos / "red" / "000.png").read_bytes()
    (photos / "red" / "corrupt.png").write_bytes(good[:len(good) // 3])  # truncated
    out = tmp_path / "out" / "m.tflite"
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "convert", str(tiny_keras), "-o", str(out), "-c",
                           str(photos), "--val", "0", "--format", "json"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    skipped = [line for line in proc.stderr.splitlines() if "skipping" in line]
    assert len(skipped) == 1 and "corrupt.png" in skipped[0]
    assert json.loads(proc.stdout)["calibration_samples"] == 30 and out.is_file()


def test_mostly_undecodable_photos_fail_without_leaving_a_folder(tmp_path):
    pytest.importorskip("onnx", reason="the onnx extra: pip install -e '.[dev]'")
    photos = write_color_folders(tmp_path / "photos", 1, seed=4)
    for i in range(4):
        (photos / "red" / f"bad{i}.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    out = tmp_path / "new" / "deeper" / "m.tflite"
    code, tf_loaded, err = convert_in_process(ONNX, "-o", out, "-c", photos, "--val", "0")
    assert code == ExitCode.USAGE and not tf_loaded, err
    assert "3 of 7 images" in err.strip().splitlines()[-1]
    assert not (tmp_path / "new").exists()
