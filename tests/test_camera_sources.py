"""Several sources in one camera run: each source's records, events and counts are those of a
run of that source alone; the engine is shared fairly; names and scoped lines are checked
before the model opens; the API takes a list or a dict of sources. Rendered videos
(tests/media.py, tests/shapes_video.py), the tiny classifier and the shipped shapes detector on
the real runtime; the fairness test runs the real loop and runner over a slow stand-in engine."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import numpy as np
import pytest
from conftest import ROOT
from media import CLASSES, colour_frame, make_video

import edgeapp
from edgeapp.errors import ExitCode, UsageError
from edgeapp.execution.runner import SingleRunner
from edgeapp.flows.camera.loop import Sinks, Stream, run_cameras
from edgeapp.flows.camera.sources import parse_sources, record_path, split_scope
from edgeapp.hw.capture import ReconnectPolicy
from edgeapp.tasks.base import Result

pytest.importorskip("cv2")
DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"
TIMING = ("latency_ms", "frame_ms", "timestamp", "device")


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> dict:
    """Three short videos of the tiny classifier's colours, each its own sequence and length."""
    folder = tmp_path_factory.mktemp("sources")
    return {name: make_video(folder / f"{name}.avi", [CLASSES[(i * step + shift) % 3] for i in range(n)],
                             fps=15, seed=seed, marked=True)
            for name, n, step, shift, seed in (("yard", 9, 1, 0, 1), ("gate", 7, 2, 1, 2),
                                               ("door", 5, 1, 2, 3))}


def comparable(records: list) -> list:
    return [{k: v for k, v in r.items() if k not in TIMING + ("source",)} for r in records]


def jsonl(text: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_each_sources_records_are_its_single_runs(cli, tiny_model, videos, tmp_path):
    alone = {}
    for name, path in videos.items():
        r = cli("camera", tiny_model, "--source", path, "--no-display", "-f", "jsonl", "-k", "2")
        assert r.exit_code == 0, r.stderr
        alone[name] = jsonl(r.stdout)
        assert "source" not in alone[name][0]  # one unnamed source: the records as they were
    args = [a for name, path in videos.items() for a in ("--source", f"{name}={path}")]
    summary = tmp_path / "summary.json"
    r = cli("camera", tiny_model, *args, "--no-display", "-f", "jsonl", "-k", "2", "--summary", "json",
            "--summary-file", summary)
    assert r.exit_code == 0, r.stderr
    together = jsonl(r.stdout)
    assert len(together) == sum(len(v) for v in alone.values())
    for name, records in alone.items():
        mine = [x for x in together if x["source"] == name]
        assert comparable(mine) == comparable(records), name
    s = json.loads(summary.read_text())
    assert [x["source"] for x in s["sources"]] == list(videos)
    for entry, name in zip(s["sources"], videos):
        n = len(alone[name])
        assert (entry["frames_captured"], entry["frames_processed"], entry["frames_dropped"]) == (n, n, 0)
        assert entry["stop"] == "end of stream" and entry["fps"] > 0
    assert s["frames_processed"] == len(together)
    (device, load), = s["engines"].items()
    assert device == "cpu" and load["frames"] == len(together) and 0 < load["busy"] <= 1


def test_text_summary_has_a_line_per_source_and_the_engine(cli, tiny_model, videos):
    r = cli("camera", tiny_model, "--source", videos["yard"], "--source", videos["gate"],
            "--no-display", "-o", "/dev/null")
    assert r.exit_code == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("edgeapp: ")]
    assert lines[-3].startswith("edgeapp: yard: 9 frame(s) captured, 9 processed")
    assert lines[-2].startswith("edgeapp: gate: 7 frame(s) captured, 7 processed")
    assert lines[-1].startswith("edgeapp: 2 sources: 16 frame(s) captured, 16 processed")
    assert "cpu busy " in lines[-1]


def test_record_writes_one_file_per_source(cli, tiny_model, videos, tmp_path):
    import cv2

    out = tmp_path / "clips" / "run.avi"
    r = cli("camera", tiny_model, "--source", f"yard={videos['yard']}", "--source",
            f"door={videos['door']}", "--no-display", "--record", out, "-o", "/dev/null")
    assert r.exit_code == 0, r.stderr
    for name, frames in (("yard", 9), ("door", 5)):
        cap = cv2.VideoCapture(str(out.parent / f"run.{name}.avi"))
        assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == frames
        cap.release()
    assert not out.exists()


def test_lines_scoped_to_a_source_count_there_only(tmp_path):
    """Two rendered scenes, a counting line on the first only: each source's events are those of
    its run alone, stamped with its name; its counts are its own."""
    pytest.importorskip("scipy")
    from cli_run import edgeapp as run
    from shapes_video import crossing_scene

    one = crossing_scene(frames=45).write(tmp_path / "one.avi", fps=15)
    two = crossing_scene(frames=40, occlude=None).write(tmp_path / "two.avi", fps=15)
    line = "door:200,0,200,240"
    alone = tmp_path / "alone.jsonl"
    r = run("camera", DETECTOR, "--source", one, "--no-display", "--track", "--count-line", line,
            "--events", alone, "-o", "/dev/null")
    assert r.returncode == 0, r.stderr
    alone_two = tmp_path / "alone_two.jsonl"
    r = run("camera", DETECTOR, "--source", two, "--no-display", "--track", "--events", alone_two,
            "-o", "/dev/null")
    assert r.returncode == 0, r.stderr
    both, summary = tmp_path / "both.jsonl", tmp_path / "summary.json"
    r = run("camera", DETECTOR, "--source", f"one={one}", "--source", f"two={two}", "--no-display",
            "--track", "--count-line", f"one/{line}", "--events", both, "-o", "/dev/null",
            "--summary", "json", "--summary-file", summary)
    assert r.returncode == 0, r.stderr
    events = jsonl(both.read_text())

    def plain(evs: list) -> list:
        return [{k: v for k, v in e.items() if k not in ("timestamp", "source")} for e in evs]

    for name, path in (("one", alone), ("two", alone_two)):
        expected = jsonl(path.read_text())
        assert expected and "source" not in expected[0]
        assert plain([e for e in events if e["source"] == name]) == plain(expected), name
    crossed = [e for e in events if e["event"] == "line_crossed"]
    assert crossed and {e["source"] for e in crossed} == {"one"}
    s = json.loads(summary.read_text())
    tracking = {x["source"]: x["tracking"] for x in s["sources"]}
    assert set(tracking["one"]["lines"]) == {"door"} and tracking["two"]["lines"] == {}
    assert s["tracking"]["tracks"] == tracking["one"]["tracks"] + tracking["two"]["tracks"]
    assert s["tracking"]["lines"] == tracking["one"]["lines"]  # the totals: door is one's only


@pytest.mark.parametrize("args, words", [
    (["--source", "a={v}", "--source", "a={v}"], "given to two sources"),
    (["--source", "a={v}", "--source", "b={v}", "--track", "--count-line", "c/door:0,0,1,1"],
     "no source is named 'c'"),
    (["--source", "{v}", "--track", "--zone", "yard/z:0,0,1,0,1,1"], "no source is named 'yard'"),
    (["--source", "a={v}", "--source", "b={v}", "--clips", "{tmp}/clips", "--alert", "x:appear",
      "--track"], "--clips records one source"),
    (["--source", "{v}", "--source", "{v}", "--mqtt", "mqtt://127.0.0.1/x", "--mqtt-mode", "events"],
     "--mqtt-mode events follows one source"),
])
def test_bad_source_flags_exit_2_in_one_line_before_the_model(args, words, tiny_model, videos, tmp_path):
    from cli_run import edgeapp as run
    from cli_run import error_lines

    given = [a.format(v=videos["yard"], tmp=tmp_path) for a in args]
    r = run("camera", tiny_model, "--no-display", *given)
    assert r.returncode == ExitCode.USAGE, r.stderr
    assert len(error_lines(r.stderr)) == 1 and words in r.stderr and "Traceback" not in r.stderr


def test_source_names():
    got = parse_sources(["0", "/dev/video2", "v/yard.mp4", "x/yard.avi", "rtsp://u:p@cam:554/live?a=1",
                         "gate=rtsp://h/s", "v4l2src device=/dev/video0 ! appsink"])
    assert [s.name for s in got] == ["camera0", "video2", "yard", "yard-2", "cam-554-live", "gate",
                                     "pipeline"]
    assert got[5].spec == "rtsp://h/s" and all(s.named for s in got)
    lone, = parse_sources("v/yard.mp4")
    assert (lone.name, lone.named) == ("v/yard.mp4", False)  # as the capture names it
    named, = parse_sources({"porch": 1}, "source")
    assert (named.name, named.spec, named.named) == ("porch", "1", True)
    assert parse_sources(())[0].spec == "0"
    assert split_scope("yard/door:0,0,1,1") == ("yard", "door:0,0,1,1")
    assert split_scope("door:0,0,1,1") == (None, "door:0,0,1,1")
    assert record_path(Path("a/out.mp4"), got[0], True) == Path("a/out.camera0.mp4")
    assert record_path(Path("a/out.mp4"), got[0], False) == Path("a/out.mp4")
    with pytest.raises(UsageError, match="letters"):
        parse_sources({"a/b": "0"}, "source")


def test_api_takes_several_sources(tiny_model, videos):
    with edgeapp.open_model(tiny_model, "cpu") as model:
        alone = {}
        for name in ("yard", "gate"):
            alone[name] = []
            assert model.camera(videos[name], on_record=alone[name].append, top_k=2).error is None
        got: list = []
        outcome = model.camera({"yard": videos["yard"], "gate": videos["gate"]}, on_record=got.append,
                               top_k=2)
        listed = model.camera([videos["yard"], videos["gate"]], max_frames=3)
    assert outcome.error is None and list(outcome.sources) == ["yard", "gate"]
    for name in ("yard", "gate"):
        assert comparable([r for r in got if r["source"] == name]) == comparable(alone[name])
        assert outcome.sources[name].processed == len(alone[name])
    assert outcome.stats.processed == len(got) and outcome.summary()["engines"]["cpu"]["frames"] == len(got)
    assert {n: s.processed for n, s in listed.sources.items()} == {"yard": 3, "gate": 3}
    assert all(s.stop == "max frames" for s in listed.sources.values())


# ---------------------------------------------------------------------------------------------
# Fair sharing, through the loop's extension points: live sources and a slow stand-in engine


class LiveSource:
    """A camera giving a frame every `interval` seconds until closed."""

    def __init__(self, name: str, interval: float) -> None:
        self.live, self.fps, self.name, self.interval = True, 0.0, name, interval
        self.rng = np.random.default_rng(0)
        self.frame = colour_frame("red", self.rng, (64, 48))

    def open(self) -> None:
        pass

    def read(self) -> Optional[np.ndarray]:
        time.sleep(self.interval)
        return self.frame.copy()

    def at_end(self) -> bool:
        return False

    def close(self) -> None:
        pass


def slow_runner(seconds: float) -> SingleRunner:
    """The real single-device runner over a stand-in engine that takes `seconds` a frame."""
    engine = SimpleNamespace(name="slow", model_path="slow.tflite", requested_model="slow.tflite",
                             notice=None)

    def work(_engine, image) -> tuple:
        time.sleep(seconds)
        return Result({"mean": float(image.mean())}), seconds * 1000.0

    return SingleRunner(engine, work=work)


def run_until(streams: list, runner: SingleRunner, total: int):
    stop, seen = threading.Event(), []

    def count(record: dict) -> None:
        seen.append(record["source"])
        if len(seen) >= total:
            stop.set()

    for stream in streams:
        stream.sinks.on_record = count
    return run_cameras(streams, runner, stop_event=stop, reconnect=ReconnectPolicy(timeout=0),
                       duration=60.0)


def test_a_busy_engine_is_shared_equally():
    """Three cameras, each far faster than its share of the engine: each gets a third of the
    frames run (within 10%) and drops the rest."""
    streams = [Stream(LiveSource(n, 0.004), Sinks(), n) for n in ("a", "b", "c")]
    ran = run_until(streams, slow_runner(0.03), 60)
    processed = [s.processed for s in ran.streams]
    mean = sum(processed) / len(processed)
    assert all(abs(p - mean) <= 0.1 * mean for p in processed), processed
    assert all(s.dropped > 0 and s.policy == "newest" for s in ran.streams)
    assert ran.frames == {"slow": sum(processed)} and ran.engines()["slow"]["busy"] > 0


def test_a_fast_source_never_delays_a_slow_one():
    """A 10 fps camera beside one far faster than the engine: the slow one has every frame run
    (at most the one in hand when the run stops is not), the fast one drops."""
    streams = [Stream(LiveSource("fast", 0.003), Sinks(), "fast"),
               Stream(LiveSource("slow", 0.1), Sinks(), "slow")]
    ran = run_until(streams, slow_runner(0.03), 60)
    fast, slow = ran.streams
    assert fast.dropped > 0 and slow.processed >= 5
    assert slow.dropped <= 1, (slow.captured, slow.processed, slow.dropped)


def test_live_view_shows_a_tile_per_source():
    """Two sources' newest frames side by side in the snapshot (and the stream), each in its
    place whatever order they came in."""
    import cv2

    from edgeapp.sinks.live_view import LiveView, parse_serve

    rng = np.random.default_rng(0)
    view = LiveView(parse_serve("0"))
    view.on_frame(colour_frame("red", rng), {"source": "a", "frame": 0}, annotated=True)
    assert cv2.imdecode(np.frombuffer(view.snapshot(), np.uint8), 1).shape == (240, 320, 3)
    view.on_frame(colour_frame("blue", rng), {"source": "b", "frame": 0}, annotated=True)
    view.on_frame(colour_frame("green", rng), {"source": "a", "frame": 1}, annotated=True)
    tiles = cv2.imdecode(np.frombuffer(view.snapshot(), np.uint8), 1).astype(int)
    assert tiles.shape == (240, 640, 3)
    left, right = tiles[:, :320].mean(axis=(0, 1)), tiles[:, 320:].mean(axis=(0, 1))
    assert left.argmax() == 1 and right.argmax() == 0  # BGR: a's newest is green, b is blue
    assert view.stats()["sources"] == {"a": 1, "b": 0}


def test_motion_is_found_per_source(cli, tmp_path):
    """--motion over two sources: each one's regions come from its own previous frames, so its
    records are those of its run alone."""
    from shapes_video import small_movers

    videos = {name: small_movers(seed=seed, frames=8, objects=4).write(tmp_path / f"{name}.avi")
              for name, seed in (("left", 3), ("right", 5))}
    alone = {}
    for name, path in videos.items():
        r = cli("camera", DETECTOR, "--source", path, "--no-display", "--device", "cpu", "--motion")
        assert r.exit_code == 0, r.stderr
        alone[name] = jsonl(r.stdout)
    r = cli("camera", DETECTOR, *[a for n, p in videos.items() for a in ("--source", f"{n}={p}")],
            "--no-display", "--device", "cpu", "--motion", "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    together = jsonl(r.stdout)
    for name, records in alone.items():
        assert any(rec["objects"] for rec in records[1:])
        assert comparable([x for x in together if x["source"] == name]) == comparable(records), name


def test_frames_skipped_by_an_engine_outage_are_counted_per_source():
    """Each source's frames dropped while the engine was gone count once, from its own count
    (the sources' counts are not one number that jumps between them)."""
    from edgeapp.flows.camera.engine_watch import EngineWatch
    from edgeapp.hw.worker.events import LOST, RECOVERED, EngineEvent

    watch = EngineWatch()

    def frame(source: str, dropped: int) -> None:
        watch.on_frame(None, {}, stats=SimpleNamespace(source=source, dropped=dropped))

    frame("a", 3)
    frame("b", 100)
    watch(EngineEvent(LOST, "usb:0", "hang", None, 0.0))
    watch(EngineEvent(RECOVERED, "usb:0", "hang", "restart", 2.0))
    frame("a", 8)  # 5 skipped
    frame("b", 130)  # 30 skipped
    frame("a", 9)  # after the outage: not skipped by it
    assert watch.skipped == 35
    watch(EngineEvent(LOST, "usb:0", "hang", None, 0.0))
    watch(EngineEvent(RECOVERED, "usb:0", "hang", "restart", 1.0))
    frame("a", 12)
    assert watch.skipped == 38


def test_metrics_are_per_source():
    pytest.importorskip("prometheus_client")
    from edgeapp.sinks.metrics import Metrics

    metrics = Metrics("a, b")
    for source, processed in (("a", 4), ("b", 7)):
        stats = SimpleNamespace(source=source, captured=9, processed=processed, dropped=9 - processed,
                                reconnects=0)
        metrics.on_frame(None, {"source": source, "device": "cpu", "latency_ms": 5.0}, stats=stats, fps=2.0)
    metrics.on_events([{"event": "track_started", "source": "b"}], {})
    text = metrics.exposition()[0].decode()
    assert 'edgeapp_frames_total{source="a",state="processed"} 4.0' in text
    assert 'edgeapp_frames_total{source="b",state="processed"} 7.0' in text
    assert 'edgeapp_inference_seconds_count{device="cpu",source="b"} 1.0' in text
    assert 'edgeapp_events_total{kind="track_started",source="b"} 1.0' in text
