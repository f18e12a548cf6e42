"""The example scripts in scripts/: their errors are one line with the CLI's exit codes.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

from edgeapp.errors import ExitCode


def classify_folder(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "classify_folder.py"), *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def test_classify_folder_script_errors_are_one_line_with_the_clis_codes(tiny_model, color_images, tmp_path):
    folder = color_images["red"].parent
    r = classify_folder(tmp_path / "missing.tflite", folder, tmp_path / "a.csv")
    assert r.returncode == ExitCode.MODEL_INVALID and "Traceback" not in r.stderr
    missing = tmp_path / "missing.tflite"
    assert r.stderr.strip().splitlines() == [f"classify_folder: error: model not found: {missing}"]
    r = classify_folder(tiny_model, tmp_path / "nowhere", tmp_path / "b.csv")
    assert r.returncode == ExitCode.USAGE and "no such folder" in r.stderr
    assert not (tmp_path / "b.csv").exists()
    images = tmp_path / "images"
    images.mkdir()
    (images / "red.png").write_bytes(color_images["red"].read_bytes())
    (images / "broken.png").write_bytes(b"not a png")
    r = classify_folder(tiny_model, images, tmp_path / "c.csv")
    assert r.returncode == ExitCode.INPUTS_FAILED, r.stderr
    rows = (tmp_path / "c.csv").read_text().splitlines()
    assert len(rows) == 3 and "not an image" in rows[1] and rows[2].split(",")[1] == "red"
