"""camera --alert on rendered videos through the shipped shapes detector and the real runtime:
each kind fires on the frames where the shapes do it, clips hold the pre-roll (the trigger
frame's index in the clip, read back from the MP4 by the frames' own markers), snapshots and
sidecars, a full disk is an event and one warning, and detect's box filters count what they
removed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_run import edgeapp
from conftest import ROOT
from media import make_video, marker_index
from shapes_video import Mover, Scene, crossing_scene

pytest.importorskip("scipy")
cv2 = pytest.importorskip("cv2")
DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"
FPS = 30.0
# the frame markers' bars at the right edge look like small squares to the detector: the area
# filter drops them (the shapes are 44 px wide, the bars' boxes about 22 x 30)
LINES = ("--count-line", "door:160,0,160,240", "--zone", "right:160,0,320,0,320,240,160,240",
         "--min-area", "1200")


@pytest.fixture(scope="module")
def marked_video(tmp_path_factory) -> Path:
    """The crossing scene (a circle and a square pass x = 160 around frame 44, a triangle
    stands in the right half), 80 px wider on the right, where each frame carries its index
    (no overlay is drawn there)."""
    scene = crossing_scene()
    scene.width = 400
    return make_video(tmp_path_factory.mktemp("alerts") / "crossing.avi",
                      (scene.render(f) for f in range(scene.frames)), fps=FPS, marked=True)


def _lines(path: Path) -> list:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def alerted(marked_video, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("alerted")
    r = edgeapp("camera", DETECTOR, "--source", marked_video, "--no-display", "--track", *LINES,
                "--alert", "cross:line=door", "--alert", "sq_in:line=door,direction=in,label=square",
                "--alert", "stay:zone=right,dwell=1,label=triangle", "--alert", "two:count=right,over=1,for=0.5",
                "--alert", "new:appear,label=circle",
                "--events", out / "events.jsonl", "--clips", out / "clips", "--pre", "1", "--post", "0.5",
                "-o", out / "records.jsonl", "--summary", "json")
    assert r.returncode == 0, r.stderr
    events = _lines(out / "events.jsonl")
    return {"dir": out, "video": marked_video, "events": events, "alerts": [e for e in events if e["event"] == "alert"],
            "records": _lines(out / "records.jsonl"),
            "summary": json.loads(r.stderr.strip().splitlines()[-1])}


def test_each_kind_fires_on_its_frames(alerted):
    by = {}
    for a in alerted["alerts"]:
        by.setdefault(a["rule"], []).append(a)
    crossed = {e["track_id"]: e["frame"] for e in alerted["events"] if e["event"] == "line_crossed"}
    # a line rule fires on the frame the stage counts the crossing, once per track
    assert sorted((a["label"], a["frame"]) for a in by["cross"]) == sorted(
        (a["label"], crossed[a["track_id"]]) for a in by["cross"])
    assert [a["label"] for a in by["cross"]] and {a["label"] for a in by["cross"]} == {"circle", "square"}
    assert [(a["label"]) for a in by["sq_in"]] == ["square"]
    # the triangle stands in the right half from the first frame: 1 s dwell at 30 FPS
    (stay,) = by["stay"]
    first = min(r["frame"] for r in alerted["records"] for o in r["objects"]
                if o["label"] == "triangle" and o["track_id"] == stay["track_id"])
    assert stay["frame"] == first + 30 and stay["seconds"] == pytest.approx(1.0)
    # the square starts in the right half with the triangle: two inside (the square's track
    # entered after 3 frames in a row) for 0.5 s
    (two,) = by["two"]
    square = min(r["frame"] for r in alerted["records"] for o in r["objects"]
                 if o["label"] == "square" and o["track_id"] is not None)
    assert two["count"] == 2 and two["track_id"] is None and two["frame"] == square + 2 + 15
    # appear: the circle's track, seen 3 frames in a row
    (new,) = by["new"]
    assert new["label"] == "circle" and new["frame"] <= 5
    for a in alerted["alerts"]:
        assert {"rule", "track_id", "label", "source", "frame", "clip", "snapshot", "sidecar"} <= set(a)
        assert a["source"] == str(alerted["video"])
    assert alerted["summary"]["tracking"]["alerts"] == {k: len(v) for k, v in by.items()}


def _clip_frames(path: Path) -> list:
    cap = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, img = cap.read()
        if not ok:
            break
        frames.append(img)
    cap.release()
    return frames


def test_the_clip_starts_pre_seconds_before_its_trigger(marked_video, tmp_path):
    r = edgeapp("camera", DETECTOR, "--source", marked_video, "--no-display", "--track", *LINES,
                "--alert", "cross:line=door", "--events", tmp_path / "e.jsonl",
                "--clips", tmp_path / "clips", "--pre", "1", "--post", "0.5", "-o", tmp_path / "r.jsonl")
    assert r.returncode == 0, r.stderr
    alerts = sorted((e for e in _lines(tmp_path / "e.jsonl") if e["event"] == "alert"),
                    key=lambda a: a["frame"])
    assert len(alerts) == 2 and alerts[0]["clip"] == alerts[1]["clip"]  # overlapping: one clip
    first = alerts[0]
    frames = _clip_frames(tmp_path / "clips" / first["clip"])
    shown = [marker_index(f) for f in frames]
    assert shown == list(range(shown[0], shown[0] + len(shown)))  # every frame, in order
    # the first frame is the one recorded 1 s (30 frames) before the first trigger
    assert shown[0] == first["frame"] - 30
    for a in alerts:
        side = json.loads((tmp_path / "clips" / a["sidecar"]).read_text())
        assert side["first_frame"] == shown[0] and shown[side["trigger_position"]] == a["frame"]
        assert side["boxes"] and {b["track_id"] for b in side["boxes"]} == {a["track_id"]}
    # the clip ends 0.5 s (15 frames) after the last alert it holds
    assert shown[-1] == alerts[-1]["frame"] + 15


def test_snapshots_are_the_tracks_best_frame(alerted):
    clips = alerted["dir"] / "clips"
    for a in alerted["alerts"]:
        jpeg = clips / a["snapshot"]
        assert jpeg.read_bytes()[:2] == b"\xff\xd8"
        image = cv2.imdecode(np.frombuffer(jpeg.read_bytes(), np.uint8), cv2.IMREAD_COLOR)
        if a["track_id"] is None:
            continue
        scores = {r["frame"]: o["score"] for r in alerted["records"] for o in r["objects"]
                  if o["track_id"] == a["track_id"] and r["frame"] <= a["frame"]}
        assert scores[marker_index(image)] == max(s for f, s in scores.items() if f >= a["frame"] - 31)


def test_flicker_shorter_than_the_inertia_fires_nothing(tmp_path):
    """A square shows for 3 frames (a leaf blowing through: its track gets its id on its second
    frame, so it is tracked in 2), a circle stays: with the default inertia of 3 only the
    circle enters the zone and appears; with inertia 2 the square does too."""
    scene = Scene(320, 240, 40)
    scene.movers = [Mover(1, 44, (230, 80, 40), (230.0, 150.0), (0.0, 0.0), (10, 13)),
                    Mover(0, 44, (40, 220, 240), (100.0, 80.0), (1.0, 0.0), (0, 40))]
    video = scene.write(tmp_path / "flicker.avi")

    def alerts(inertia: int) -> list:
        events = tmp_path / f"e{inertia}.jsonl"
        r = edgeapp("camera", DETECTOR, "--source", video, "--no-display", "--track",
                    "--zone", "all:0,0,1,0,1,1,0,1", "--alert", f"in:zone=all,inertia={inertia}",
                    "--alert", f"new:appear,inertia={inertia}", "--events", events, "-o", tmp_path / "r.jsonl")
        assert r.returncode == 0, r.stderr
        return sorted((e["rule"], e["label"]) for e in _lines(events) if e["event"] == "alert")
    assert alerts(3) == [("in", "circle"), ("new", "circle")]
    assert alerts(2) == [("in", "circle"), ("in", "square"), ("new", "circle"), ("new", "square")]


def test_alerts_without_clips_are_events_with_null_paths(marked_video, tmp_path):
    r = edgeapp("camera", DETECTOR, "--source", marked_video, "--no-display", "--track", *LINES,
                "--alert", "cross:line=door,direction=out", "--events", tmp_path / "e.jsonl",
                "-o", tmp_path / "r.jsonl")
    assert r.returncode == 0, r.stderr
    (alert,) = [e for e in _lines(tmp_path / "e.jsonl") if e["event"] == "alert"]
    assert alert["label"] == "circle" and alert["clip"] is None and alert["snapshot"] is None


@pytest.fixture()
def tiny_disk(tmp_path):
    """A 64 kB tmpfs: room for a few snapshots, none for a clip (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    where = tmp_path / "disk"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield where
    subprocess.run(["umount", "-l", str(where)])


def test_a_full_disk_is_an_event_and_one_warning(marked_video, tiny_disk, tmp_path):
    r = edgeapp("camera", DETECTOR, "--source", marked_video, "--no-display", "--track", *LINES,
                "--alert", "cross:line=door", "--alert", "new:appear", "--events", tmp_path / "e.jsonl",
                "--clips", tiny_disk / "clips", "--pre", "1", "--post", "1", "-o", tmp_path / "r.jsonl")
    assert r.returncode == 0, r.stderr
    assert len(_lines(tmp_path / "r.jsonl")) == 90  # the run went on to the end
    warnings = [x for x in r.stderr.splitlines() if "--clips" in x]
    assert len(warnings) == 1 and "disk full" in warnings[0], r.stderr
    failed = [e for e in _lines(tmp_path / "e.jsonl") if e["event"] == "clip_failed"]
    assert failed and all(e["reason"] == "disk full" for e in failed)
    assert not any(p.suffix == ".mp4" for p in (tiny_disk / "clips").iterdir())  # no partial clip left


def test_detect_filters_count_what_they_removed(tmp_path):
    images = ROOT / "models" / "samples_shapes"
    plain = edgeapp("detect", DETECTOR, images, "-f", "jsonl")
    assert plain.returncode == 0, plain.stderr
    small = edgeapp("detect", DETECTOR, images, "-f", "jsonl", "--min-area", "0.02", "--max-ratio", "1.05")
    assert small.returncode == 0, small.stderr
    for before, after in zip(plain.stdout.splitlines(), small.stdout.splitlines()):
        b, a = json.loads(before), json.loads(after)
        removed = a["filtered"]
        assert set(removed) == {"min_area", "max_ratio"}
        assert len(b["objects"]) - len(a["objects"]) == sum(removed.values())
        for o in a["objects"]:
            x0, y0, x1, y1 = o["bbox"]
            assert (x1 - x0) / (y1 - y0) <= 1.05
    assert any(sum(json.loads(x)["filtered"].values()) for x in small.stdout.splitlines())


def test_the_clips_folder_stays_under_its_size_oldest_first(tmp_path):
    """Three alerts far apart on the clip sink itself (frames of a rendered scene): with room
    for about one alert's files, the oldest go first and the newest stay."""
    from edgeapp.sinks.clips import ClipSettings, ClipSink

    class Every:
        policy = "every"

    scene = crossing_scene()
    folder = tmp_path / "clips"
    sink = ClipSink(ClipSettings(folder, pre=0.2, post=0.2, max_gb=20e-6), None, FPS)
    for f in range(90):
        if f in (10, 40, 70):
            sink.claim({"event": "alert", "rule": "r", "track_id": f, "frame": f, "media_time": f / FPS})
        sink.on_frame(scene.render(f), {"frame": f, "source_ms": f * 1000 / FPS}, annotated=True,
                      stats=Every())
    sink.close()
    left = sorted(p.name for p in folder.iterdir())
    assert sum(p.stat().st_size for p in folder.iterdir()) <= 20e3
    assert sink.summary()["removed"] >= 3 and sink.summary()["clips"] == 3
    assert left and all("_r_70." in name for name in left), left
