"""--resume after a real SIGKILL mid-batch: nothing lost, nothing doubled, no half lines."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from conftest import CLASSES, color_pixels


@pytest.fixture(scope="module")
def many_images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("many")
    rng = np.random.default_rng(11)
    for i in range(300):  # 384x384 JPEGs: slow enough to kill the batch half-way
        big = np.kron(color_pixels(i % 3, rng, 48), np.ones((8, 8, 1), np.uint8))
        Image.fromarray(big).save(folder / f"{i:04d}_{CLASSES[i % 3]}.jpg", quality=95)
    return folder


def lines(path):
    return path.read_text().splitlines()


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_kill_then_resume(tiny_model, many_images, tmp_path, fmt):
    out = tmp_path / f"out.{fmt}"
    cmd = [sys.executable, "-m", "edgeapp", "classify", str(tiny_model), str(many_images),
           "-f", fmt, "-o", str(out), "-k", "1", "--workers", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if out.exists() and len(lines(out)) >= 20:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = len(lines(out)) - (fmt == "csv")
    assert 0 < before < 300, f"the kill must land mid-batch ({before} results)"

    r = subprocess.run(cmd + ["--resume"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"{before} already done" in r.stderr or before == 0
    if fmt == "jsonl":
        paths = [json.loads(line)["path"] for line in lines(out)]
        labels = {json.loads(line)["path"]: json.loads(line)["classes"][0]["label"] for line in lines(out)}
    else:
        rows = lines(out)
        assert rows[0].startswith("path,rank,") and rows.count(rows[0]) == 1
        import csv
        parsed = list(csv.DictReader(rows))
        paths = [row["path"] for row in parsed]
        labels = {row["path"]: row["label"] for row in parsed}
    assert len(paths) == 300 and len(set(paths)) == 300
    wrong = [p for p, lab in labels.items() if not p.endswith(f"_{lab}.jpg")]
    assert len(wrong) <= 3, wrong[:5]


def test_partial_last_line_is_trimmed_and_redone(cli, tiny_model, color_images, tmp_path):
    out = tmp_path / "out.jsonl"
    r = cli("classify", tiny_model, color_images["red"], "-f", "jsonl", "-o", out)
    assert r.exit_code == 0 and r.stdout == ""
    whole = out.read_text()
    out.write_text(whole + '{"path": "' + str(color_images["blue"]) + '", "dev')  # a killed write
    r = cli("classify", tiny_model, color_images["red"], color_images["blue"], "-f", "jsonl",
            "-o", out, "--resume")
    assert r.exit_code == 0, r.stderr
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [rec["classes"][0]["label"] for rec in recs] == ["red", "blue"]
    assert out.read_text().endswith("\n")


def test_output_without_resume_starts_over(cli, tiny_model, color_images, tmp_path):
    out = tmp_path / "out.jsonl"
    for _ in range(2):
        cli("classify", tiny_model, color_images["red"], "-f", "jsonl", "-o", out)
    assert len(out.read_text().splitlines()) == 1
