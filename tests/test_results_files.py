"""Results files: the format --output's extension names, a new folder made for them, a file
where the folder should be, table lines apart though labels hold commas, --resume refusing
another model's results, the camera's CSV precision, and a full disk.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_run import edgeapp, error_lines
from media import CLASSES, make_video

from edgeapp.errors import ExitCode


def test_output_extension_picks_the_format_and_resume_takes_it(cli, tiny_model, color_images, tmp_path):
    csv_out, jsonl_out = tmp_path / "results.csv", tmp_path / "results.jsonl"
    red, green, blue = (color_images[c] for c in ("red", "green", "blue"))
    r = cli("classify", tiny_model, red, green, "-o", csv_out)
    assert r.exit_code == 0, r.stderr
    assert csv_out.read_text().splitlines()[0].startswith("path,rank,id,label,score")
    r = cli("classify", tiny_model, red, green, blue, "-o", csv_out, "--resume")
    assert r.exit_code == 0, r.stderr
    assert "2 already done (--resume)" in r.stderr  # a complete CSV keeps its last image
    rows = csv_out.read_text().splitlines()
    names = [Path(row.split(",")[0]).name for row in rows[1:]]
    assert rows.count(rows[0]) == 1 and names == ["red.png"] * 3 + ["green.png"] * 3 + ["blue.png"] * 3

    r = cli("classify", tiny_model, color_images["blue"], "-o", jsonl_out)
    assert r.exit_code == 0, r.stderr
    (record,) = map(json.loads, jsonl_out.read_text().splitlines())
    assert record["classes"][0]["label"] == "blue"

    r = cli("classify", tiny_model, color_images["blue"], "-o", tmp_path / "x.csv", "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    assert "warning: --format jsonl into" in r.stderr and "extension says csv" in r.stderr
    json.loads((tmp_path / "x.csv").read_text())  # as asked: JSON lines


def test_classify_output_into_a_new_folder(cli, tiny_model, color_images, tmp_path):
    out = tmp_path / "results" / "today" / "x.csv"
    r = cli("classify", tiny_model, color_images["red"], "-f", "csv", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert out.read_text().splitlines()[0].startswith("path,rank,id,label,score")


def test_output_under_a_file_says_it_is_not_a_folder(cli, tiny_model, color_images, tmp_path):
    photo = tmp_path / "some.png"
    photo.write_bytes(color_images["red"].read_bytes())
    for out in (photo / "out.jsonl", photo / "deeper" / "out.jsonl"):
        r = cli("classify", tiny_model, color_images["red"], "-o", out)
        assert r.exit_code == ExitCode.USAGE
        assert error_lines(r.stderr) == [
            f"edgeapp: error: cannot write {out}: {photo} is a file, not a folder"]


def test_table_entries_are_apart_though_labels_hold_commas(cli, tiny_model, color_images, tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"{i} {name}, {name}ish\n" for i, name in enumerate(CLASSES)))
    r = cli("classify", tiny_model, color_images["red"], "--labels", labels, "-k", "3")
    assert r.exit_code == 0, r.stderr
    path, rest = r.stdout.strip().split("  ", 1)
    entries = rest.split(" | ")
    assert len(entries) == 3 and entries[0].startswith("red, redish ")
    assert sorted(e.rsplit(" ", 1)[0] for e in entries) == sorted(f"{c}, {c}ish" for c in CLASSES)


def test_resume_refuses_results_of_another_model(cli, tiny_model, color_images, tmp_path):
    other = tmp_path / "other.tflite"
    other.write_bytes(tiny_model.read_bytes() + b"\0" * 64)  # other bytes: another model (a copy is the same)
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"results.{fmt}"
        r = cli("classify", tiny_model, color_images["red"], "-f", fmt, "-o", out)
        assert r.exit_code == 0, r.stderr
        before = out.read_bytes()
        r = cli("classify", other, color_images["red"], color_images["blue"], "-f", fmt, "-o", out,
                "--resume")
        assert r.exit_code == ExitCode.USAGE
        assert f"holds results of {tiny_model}, not of {other}" in r.stderr
        assert out.read_bytes() == before
        r = cli("classify", tiny_model, color_images["red"], color_images["blue"], "-f", fmt, "-o", out,
                "--resume")  # the same model resumes
        assert r.exit_code == 0, r.stderr
        assert "1 already done" in r.stderr  # a complete CSV keeps its last image, as JSONL does


def test_camera_csv_keeps_timestamps_and_latencies_precise(cli, tiny_model, tmp_path):
    import csv
    import re
    import time

    out = tmp_path / "frames.csv"
    video = make_video(tmp_path / "v.avi", ["red"] * 3, size=(64, 48))
    started = round(time.time(), 3)
    r = cli("camera", tiny_model, "--source", video, "--no-display", "-f", "csv", "-o", out, "-k", "1")
    ended = round(time.time(), 3)
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 3
    for row in rows:
        assert re.fullmatch(r"\d{10}\.\d{3}", row["timestamp"]), row["timestamp"]  # not 1.79542e+09
        assert started <= float(row["timestamp"]) <= ended  # the wall clock when it was captured
        assert re.fullmatch(r"\d+\.\d{3}", row["latency_ms"]) and re.fullmatch(r"\d+\.\d{3}", row["frame_ms"])
        assert row["label"] == "red"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_full_disk_keeps_the_camera_summary_and_the_bench_json(cli, tiny_model, tmp_path):
    video = make_video(tmp_path / "v.avi", ["red"] * 5, size=(64, 48))
    r = cli("camera", tiny_model, "--source", video, "--no-display",
            "-o", "/dev/full")
    assert r.exit_code == ExitCode.USAGE
    lines = r.stderr.strip().splitlines()
    assert "error: cannot write results to /dev/full: No space left on device" in lines[-2]
    assert "processed" in lines[-1] and "stop: output error" in lines[-1]

    r = edgeapp("bench", tiny_model, "--runs", "3", "--warmup", "0", "-o", "/dev/full")
    assert r.returncode == ExitCode.USAGE
    assert r.stderr.strip().splitlines()[-1] == ("edgeapp: error: cannot append to /dev/full: No space "
                                                 "left on device; the JSON document is on stdout instead")
    doc = json.loads(r.stdout.strip().splitlines()[-1])  # after the table
    assert doc["schema"] == "edgeapp.bench/1" and doc["results"][0]["runs"] == 3
    r = edgeapp("bench", tiny_model, "--runs", "3", "--warmup", "0", "-o", "/dev/full", "-f", "json")
    assert r.returncode == ExitCode.USAGE and json.loads(r.stdout)["results"][0]["runs"] == 3
