"""--resume after a real SIGKILL mid-batch: nothing lost, nothing doubled, no half lines."""

import json
import signal
import subprocess
import sys
import time

import pytest


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
    data = out.read_bytes()
    before = data.count(b"\n") - (fmt == "csv")  # whole lines: a cut-off one is no result
    assert 0 < before < 300, f"the kill must land mid-batch ({before} results)"

    r = subprocess.run(cmd + ["--resume"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # every whole record is kept; CSV redoes the last image only where a kill can have cut its
    # rows short between two of them: a file ending on a page boundary (sinks/records.py)
    from edgeapp.sinks.records import TORN_WRITE_BOUNDARY

    redone = 1 if fmt == "csv" and (len(data) % TORN_WRITE_BOUNDARY == 0 or not data.endswith(b"\n")) else 0
    assert f"{before - redone} already done" in r.stderr or before - redone == 0, r.stderr
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


def test_output_with_overwrite_starts_over(cli, tiny_model, color_images, tmp_path):
    out = tmp_path / "out.jsonl"
    for _ in range(2):
        r = cli("classify", tiny_model, color_images["red"], "-f", "jsonl", "-o", out, "--overwrite")
        assert r.exit_code == 0, r.stderr
    assert len(out.read_text().splitlines()) == 1


def test_csv_cut_between_rows_of_one_image_is_redone_whole(cli, tiny_model, tiny_data, tmp_path):
    """An image is k rows written at once; a kill may keep only some of them, the last one cut
    mid-row (a cut between two whole rows happens only on a page boundary: test_resume_csv)."""
    import csv

    out = tmp_path / "out.csv"
    folder = tiny_data / "test" / "red"
    r = cli("classify", tiny_model, folder, "-f", "csv", "-o", out, "-k", "3")
    assert r.exit_code == 0
    full = out.read_bytes()
    lines = full.splitlines(keepends=True)
    for keep, part in ((5, 7), (6, 20), (7, 3)):  # header, 1 image, 1-3 rows of the 2nd, part of a row
        cut = b"".join(lines[:keep]) + lines[keep][:part]
        out.write_bytes(cut)
        r = cli("classify", tiny_model, folder, "-f", "csv", "-o", out, "-k", "3", "--resume")
        assert r.exit_code == 0, r.stderr
        rows = list(csv.DictReader(out.read_text().splitlines()))
        per_image = {}
        for row in rows:
            per_image.setdefault(row["path"], []).append(row["rank"])
        assert len(per_image) == 20 and all(v == ["1", "2", "3"] for v in per_image.values()), keep


@pytest.mark.parametrize("fmt,content", [("jsonl", "this is not json\n"), ("csv", "a,b,c\n1,2,3\n"),
                                         ("jsonl", "path,rank,id\n")])
def test_resume_refuses_a_file_that_is_not_ours(cli, tiny_model, color_images, tmp_path, fmt, content):
    out = tmp_path / f"other.{fmt}"
    out.write_text(content)
    r = cli("classify", tiny_model, color_images["red"], "-f", fmt, "-o", out, "--resume")
    assert r.exit_code == 2 and "not an edgeapp" in r.stderr
    assert out.read_text() == content  # untouched


def test_write_failure_is_one_line_and_keeps_what_was_written(cli, tiny_model, color_images):
    r = cli("classify", tiny_model, color_images["red"], "-f", "jsonl", "-o", "/dev/full")
    assert r.exit_code == 2 and "No space left on device" in r.stderr and "internal" not in r.stderr


def test_non_utf8_file_names_stay_valid_output(cli, tiny_model, color_images, tmp_path):
    import csv
    import os

    folder = tmp_path / "names"
    folder.mkdir()
    odd = os.path.join(os.fsencode(folder), b"\xff\xfe,\"q.png")
    with open(odd, "wb") as f:
        f.write(color_images["green"].read_bytes())
    (folder / "z.png").write_bytes(color_images["blue"].read_bytes())
    out = tmp_path / "out.jsonl"
    r = cli("classify", tiny_model, folder, "-f", "jsonl", "-o", out, "-k", "1")
    assert r.exit_code == 0, r.stderr
    recs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    labels = {os.fsencode(rec["path"]): rec["classes"][0]["label"] for rec in recs}
    assert labels == {odd: "green", os.fsencode(folder / "z.png"): "blue"}
    r = cli("classify", tiny_model, folder, "-f", "jsonl", "-o", out, "-k", "1", "--resume")
    assert "2 already done" in r.stderr and len(out.read_text().splitlines()) == 2
    out_csv = tmp_path / "out.csv"
    r = cli("classify", tiny_model, folder, "-f", "csv", "-o", out_csv, "-k", "1")
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(out_csv.read_bytes().decode("utf-8", "surrogateescape").splitlines()))
    assert {os.fsencode(row["path"]): row["label"] for row in rows}[odd] == "green"


def test_resume_takes_the_same_model_spelled_another_way(cli, tiny_model, color_images, tmp_path,
                                                         monkeypatch):
    """Written with a relative model path, resumed with the absolute one from another folder,
    or with a copy of the same file: the same model (its results go on), not a mix."""
    import shutil

    out = tmp_path / "out.jsonl"
    images = [color_images[c] for c in ("red", "green", "blue")]
    monkeypatch.chdir(tiny_model.parent)
    r = cli("classify", tiny_model.name, images[0], "-f", "jsonl", "-o", out)
    assert r.exit_code == 0, r.stderr
    monkeypatch.chdir(tmp_path)
    r = cli("classify", tiny_model, *images[:2], "-f", "jsonl", "-o", out, "--resume")
    assert r.exit_code == 0, r.stderr
    assert "1 already done" in r.stderr

    copy = tmp_path / "copy" / tiny_model.name
    copy.parent.mkdir()
    shutil.copy(tiny_model, copy)
    shutil.copy(tiny_model.with_suffix(".json"), copy.with_suffix(".json"))
    r = cli("classify", copy, *images, "-f", "jsonl", "-o", out, "--resume")
    assert r.exit_code == 0, r.stderr
    assert "2 already done" in r.stderr
    assert [json.loads(line)["path"] for line in out.read_text().splitlines()] == [str(p) for p in images]
