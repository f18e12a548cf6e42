"""camera --track's outputs as a user relies on them: durations and dwell in the video's own
time, a `track_id` column in CSV records, and an --events file as well-behaved as a results
file (its folder made, a bad path or a failed write one line and exit 2, never the path of
another output, whole lines only). Rendered videos of drawn shapes (tests/shapes_video.py)
through the shipped shapes YOLO detector and the real runtime."""

from __future__ import annotations

import csv
import io
import json
import os
import resource
from pathlib import Path

import pytest
from cli_run import edgeapp, error_lines
from conftest import ROOT
from shapes_video import crossing_scene

from edgeapp.flows.camera.tracking import TrackingSettings, TrackStage

pytest.importorskip("scipy")
DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"
FPS = 15
# the square moves 3 px a frame leftwards along y = 150 from x = 290: its centre is inside this
# band for frames 22 to 46, 25 frames (1.67 s at 15 fps)
BAND = "band:150,120,225,120,225,180,150,180"


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    pytest.importorskip("cv2")
    return crossing_scene().write(tmp_path_factory.mktemp("events") / "crossing.avi", fps=FPS)


@pytest.fixture(scope="module")
def tracked(video, tmp_path_factory) -> dict:
    """One tracked run with CSV records and events into folders that do not exist yet."""
    out = tmp_path_factory.mktemp("tracked")
    events, records = out / "new" / "events.jsonl", out / "records.csv"
    r = edgeapp("camera", DETECTOR, "--source", video, "--no-display", "--track", "--zone", BAND,
                "--events", events, "-f", "csv", "-o", records)
    return {"run": r, "events": events, "records": records}


def _events(tracked: dict) -> list:
    assert tracked["run"].returncode == 0, tracked["run"].stderr
    return [json.loads(x) for x in tracked["events"].read_text().splitlines()]


def test_events_make_their_folder(tracked):
    assert _events(tracked)


def test_zone_dwell_is_in_the_files_time(tracked):
    """25 frames inside at 15 fps is 1.67 s of video, however fast the frames were processed."""
    left = [e for e in _events(tracked) if e["event"] == "zone_left" and e["label"] == "square"]
    assert len(left) == 1
    assert left[0]["seconds"] == pytest.approx(25 / FPS, abs=1.5 / FPS)
    assert left[0]["source_ms"] == pytest.approx(1000 * left[0]["frame"] / FPS, abs=1)


def test_track_duration_is_in_the_files_time(tracked):
    ended = {e["label"]: e for e in _events(tracked) if e["event"] == "track_ended"}
    square = ended["square"]
    frames = square["last_frame"] - square["first_frame"]
    assert frames > 80
    assert square["duration"] == pytest.approx(frames / FPS, abs=0.01)


def test_tracked_csv_records_have_a_track_id_column(tracked):
    assert tracked["run"].returncode == 0, tracked["run"].stderr
    rows = list(csv.DictReader(io.StringIO(tracked["records"].read_text())))
    header = tracked["records"].read_text().splitlines()[0].split(",")
    assert header.index("track_id") == header.index("rank") + 1
    square = {r["track_id"] for r in rows if r["label"] == "square" and r["track_id"]}
    assert len(square) == 1 and square.pop().isdigit()


def test_a_live_sources_durations_are_wall_time():
    """Without a file's time (a camera, a stream), durations and dwell are the wall clock's."""
    written: list = []
    stage = TrackStage(TrackingSettings(), 0.5, write_events=written.extend)
    box = [100.0, 100.0, 140.0, 140.0]
    for f in range(10):
        stage.update({"objects": [{"bbox": box, "score": 0.9, "id": 0}]}, f, 1000.0 + 0.5 * f, 320, 240)
    stage.finish(9, 1004.5)
    ended = [e for e in written if e["event"] == "track_ended"]
    assert ended[0]["duration"] == pytest.approx(4.5) and ended[0]["source_ms"] is None


# ---------------------------------------------------------------------------------------------
# --events paths that cannot be written


@pytest.fixture()
def broken_model(tmp_path) -> Path:
    """A model file that fails to load: an error about --events must come before it."""
    bad = tmp_path / "broken.tflite"
    bad.write_text("not a model")
    return bad


def _refused_before_the_model(video, model, events, words) -> None:
    r = edgeapp("camera", model, "--source", video, "--no-display", "--track", "--events", events)
    assert r.returncode == 2, r.stderr
    assert len(error_lines(r.stderr)) == 1 and words in r.stderr and "Traceback" not in r.stderr


def test_an_events_path_under_a_file_is_exit_2_before_the_model(video, broken_model, tmp_path):
    blocker = tmp_path / "plain"
    blocker.write_text("x")
    _refused_before_the_model(video, broken_model, blocker / "ev.jsonl", "is a file, not a folder")


def test_an_events_symlink_loop_is_exit_2_before_the_model(video, broken_model, tmp_path):
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    _refused_before_the_model(video, broken_model, loop, "--events")


def test_an_events_name_too_long_is_exit_2_before_the_model(video, broken_model, tmp_path):
    _refused_before_the_model(video, broken_model, tmp_path / ("e" * 300 + ".jsonl"),
                              "File name too long")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_an_events_folder_that_cannot_be_made_is_exit_2_before_the_model(video, broken_model,
                                                                          tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        _refused_before_the_model(video, broken_model, locked / "missing" / "ev.jsonl", "locked")
    finally:
        locked.chmod(0o700)


def test_a_full_disk_is_one_line_exit_2_after_the_summary(video):
    r = edgeapp("camera", DETECTOR, "--source", video, "--no-display", "--track",
                "--events", "/dev/full", "-o", os.devnull)
    assert r.returncode == 2, r.stderr
    errors = error_lines(r.stderr)
    assert len(errors) == 1 and "/dev/full" in errors[0] and "No space left" in errors[0]
    assert "Traceback" not in r.stderr and "stop: output error" in r.stderr


def _file_size_limit(limit: int):
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    return preexec


def test_an_events_write_cut_short_leaves_whole_lines(video, tmp_path):
    """A write that does not fit (here a file size limit) leaves the lines before it whole and
    none cut: each line is one write, taken back when it fails."""
    events = tmp_path / "ev.jsonl"
    r = edgeapp("camera", DETECTOR, "--source", video, "--no-display", "--track",
                "--count-line", "door:160,0,160,240", "--events", events,
                preexec_fn=_file_size_limit(1000))
    assert r.returncode == 2, r.stderr
    assert len(error_lines(r.stderr)) == 1 and "--events" in r.stderr
    text = events.read_text()
    assert text.endswith("\n") and 0 < len(text) <= 1000
    assert all(json.loads(line)["event"] for line in text.splitlines())


# ---------------------------------------------------------------------------------------------
# One path, two outputs


@pytest.mark.parametrize("other", [("-o",), ("--record",)])
def test_one_path_for_events_and_another_output_is_refused(video, tmp_path, other):
    same = tmp_path / "out.avi"
    r = edgeapp("camera", DETECTOR, "--source", video, "--no-display", "--track",
                "--events", same, *other, same)
    assert r.returncode == 2, r.stderr
    assert len(error_lines(r.stderr)) == 1 and "the same file" in r.stderr
    assert not same.exists()
