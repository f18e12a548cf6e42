"""`edgeapp camera`: real OpenCV, real video files, real TFLite models.

Videos are written by tests/media.py's `make_video` (MJPG in AVI) from frames whose expected class is
known: frames filled with blue, green or red for the tiny colour classifier, coloured squares
for the detection models. Lost sources and slow inference use the loop's own extension points:
a `FrameSource` that stops giving frames and a frame runner that sleeps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pytest
from conftest import ROOT
from media import colour_frame, make_video

from edgeapp.core.vision.boxes import ResizeMode
from edgeapp.core.vision.frames import fit_frame
from edgeapp.errors import ExitCode
from edgeapp.flows.camera.loop import CameraStats, run_camera
from edgeapp.hw.capture import FrameGrabber, OpenCVSource, ReconnectPolicy, parse_source
from edgeapp.sinks.display import has_display

cv2 = pytest.importorskip("cv2")

W, H = 640, 480


def last_json(stderr: str) -> dict:
    return json.loads(stderr.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# The command on real video files


def test_classify_every_frame_of_a_video(cli, tiny_model, color_video):
    path, expected = color_video
    r = cli("camera", tiny_model, "--source", path, "--no-display", "--format", "jsonl",
            "--summary", "json")
    assert r.exit_code == 0, r.stderr
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [rec["frame"] for rec in recs] == list(range(len(expected)))  # every frame, in order
    assert [rec["classes"][0]["label"] for rec in recs] == expected
    for rec in recs:
        assert set(rec) == {"frame", "timestamp", "source_ms", "device", "classes", "latency_ms",
                            "frame_ms"}
        assert rec["latency_ms"] > 0 and rec["frame_ms"] >= rec["latency_ms"]
    assert recs[3]["source_ms"] == pytest.approx(100.0)  # frame 3 at 30 FPS
    s = last_json(r.stderr)
    assert (s["frames_captured"], s["frames_processed"], s["frames_dropped"]) == (24, 24, 0)
    assert s["stop"] == "end of stream" and s["policy"] == "every"
    assert s["device"] == "cpu" and s["task"] == "classify" and s["fps"] > 0
    for key in ("inference_ms", "frame_ms", "end_to_end_ms"):
        assert 0 < s[key]["p50"] <= s[key]["p99"]


def test_text_summary_and_max_frames(cli, tiny_model, color_video):
    path, expected = color_video
    r = cli("camera", tiny_model, "--source", path, "--no-display", "--max-frames", "5")
    assert r.exit_code == 0, r.stderr
    assert len(r.stdout.splitlines()) == 5
    line = r.stderr.strip().splitlines()[-1]
    # the frames read ahead of the limit are no part of the run: not "9 captured, 5 processed"
    assert "5 frame(s) captured, 5 processed, 0 dropped" in line and "stop: max frames" in line
    assert "p50" in line and "p99" in line and "cpu" in line


def test_table_and_csv_records(cli, tiny_model, color_video, tmp_path):
    import csv

    path, expected = color_video
    r = cli("camera", tiny_model, "--source", path, "--no-display", "--format", "table",
            "--max-frames", "2", "--top-k", "1", "--width", "320")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[1].startswith("frame 1  blue ")
    assert "ask a camera" in r.stderr  # --width does not resize a file
    out = tmp_path / "f.csv"
    r = cli("camera", tiny_model, "--source", path, "--no-display", "--format", "csv", "--output",
            out, "--top-k", "2")
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 2 * len(expected)
    assert [row["label"] for row in rows if row["rank"] == "1"] == expected


def test_detect_on_a_video_maps_boxes_to_frame_pixels(cli, det_models, tmp_path):
    # a 640x480 frame: the model's 4x4 grid is 160x120 pixels per cell when stretched
    frames = []
    for i in range(6):
        f = np.zeros((H, W, 3), np.uint8)
        f[120:240, 160 * (i % 4):160 * (i % 4) + 160, 2] = 255  # red (BGR channel 2)
        frames.append(f)
    video = make_video(tmp_path / "squares.avi", frames)
    r = cli("camera", det_models["det_tf1"], "--source", video, "--no-display",
            "--labels", det_models["labels"])
    assert r.exit_code == 0, r.stderr
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(recs) == 6
    for i, rec in enumerate(recs):
        assert [(o["label"], o["bbox"]) for o in rec["objects"]] == [
            ("red", [160 * (i % 4), 120, 160 * (i % 4) + 160, 240])]


def test_detect_letterbox_on_video_frames(cli, det_models, tmp_path):
    # letterboxed 640x480 -> 64x48 content at y 8..56 (scale 0.1): cell row 1 (y 16..32) is
    # frame y 80..240, column 2 (x 32..48) frame x 320..480
    f = np.zeros((H, W, 3), np.uint8)
    f[80:240, 320:480, 1] = 255  # green
    video = make_video(tmp_path / "lb.avi", [f, f])
    r = cli("camera", det_models["det_op_float"], "--source", video, "--no-display", "--task",
            "detect", "--resize", "letterbox")
    assert r.exit_code == 0, r.stderr
    for line in r.stdout.splitlines():
        assert [(o["id"], o["bbox"]) for o in json.loads(line)["objects"]] == [(1, [320, 80, 480, 240])]


def test_record_writes_annotated_frames(cli, tiny_model, color_video, tmp_path):
    path, expected = color_video
    out = tmp_path / "annotated.avi"
    r = cli("camera", tiny_model, "--source", path, "--no-display", "--record", out,
            "--output", tmp_path / "frames.jsonl")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == ""  # records went to --output
    assert len((tmp_path / "frames.jsonl").read_text().splitlines()) == len(expected)
    cap = cv2.VideoCapture(str(out))
    got = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        got.append(frame)
    cap.release()
    assert len(got) == len(expected)
    src = cv2.VideoCapture(str(path))
    ok, first = src.read()
    src.release()
    diff = np.abs(got[0].astype(int) - first.astype(int)).sum(-1)
    assert diff[:30, :200].mean() > 20  # the label at the top left
    assert diff[-30:, :200].mean() > 20  # the status line at the bottom left
    assert diff[200:300, 300:400].mean() < 10  # the middle untouched (bar JPEG noise)


def test_truncated_video_ends_at_its_last_frame(cli, tiny_model, color_video, tmp_path):
    """A file that ends early is the end of the file: no reconnecting as for a lost camera."""
    path, expected = color_video
    data = path.read_bytes()
    cut = tmp_path / "cut.avi"
    cut.write_bytes(data[: len(data) // 2])
    r = cli("camera", tiny_model, "--source", cut, "--no-display", "--summary", "json")
    assert r.exit_code == 0, r.stderr
    s = last_json(r.stderr)
    assert s["stop"] == "end of stream" and s["reconnect_attempts"] == 0
    assert 0 < s["frames_processed"] < len(expected)
    assert s["frames_processed"] == s["frames_captured"] == len(r.stdout.splitlines())
    assert f"short of the {len(expected)} its container declares (truncated?)" in r.stderr


def test_camera_that_cannot_be_opened_exits_5_with_one_line(tiny_model, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "camera", str(tiny_model), "--source",
                           "/dev/video99", "--no-display"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == ExitCode.DEVICE_UNAVAILABLE
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1 and errors[0].startswith("edgeapp: error: cannot open /dev/video99")
    assert "WARN" not in proc.stderr and "[ERROR" not in proc.stderr  # OpenCV's logging silenced
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "camera", str(tiny_model), "--source",
                           "57", "--no-display"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == ExitCode.DEVICE_UNAVAILABLE
    assert "edgeapp: error: cannot open camera 57" in proc.stderr
    assert "WARN" not in proc.stderr and "[ERROR" not in proc.stderr
    if not os.path.exists("/dev/video0"):  # the default source, with no camera here
        proc = subprocess.run([sys.executable, "-m", "edgeapp", "camera", str(tiny_model), "--source",
                               "0", "--no-display"], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == ExitCode.DEVICE_UNAVAILABLE
        assert "edgeapp: error: cannot open camera 0" in proc.stderr


def _unopenable_sources(tmp_path: Path, video: Path) -> dict:
    data = video.read_bytes()
    (tmp_path / "head.avi").write_bytes(data[:200])  # not even a whole header
    movi = data.index(b"movi")  # the frames' list: cut just after its first chunk header
    (tmp_path / "no_frames.avi").write_bytes(data[:movi + 12])
    (tmp_path / "folder.avi").mkdir()
    return {"missing": tmp_path / "nothing.mp4", "not a video": ROOT / "README.md",
            "truncated header": tmp_path / "head.avi", "no frame": tmp_path / "no_frames.avi",
            "a folder": tmp_path / "folder.avi"}


def test_a_source_that_cannot_be_opened_exits_5(cli, tiny_model, color_video, tmp_path):
    """One documented exit code (docs/exit-codes.md), whatever the reason the source gives no frame."""
    for case, source in _unopenable_sources(tmp_path, color_video[0]).items():
        r = cli("camera", tiny_model, "--source", source, "--no-display")
        assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE, (case, r.exit_code, r.stderr)
        errors = [ln for ln in r.stderr.splitlines() if "error" in ln]
        assert len(errors) == 1 and str(source) in errors[0], (case, r.stderr)
        assert r.stdout == ""


def test_source_and_model_errors(cli, tiny_model, color_video, tmp_path):
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"TFL3" * 4)
    r = cli("camera", junk, "--source", color_video[0], "--no-display")
    assert r.exit_code == ExitCode.MODEL_INVALID
    # a missing source is known before the model is opened
    r = cli("camera", junk, "--source", tmp_path / "nothing.mp4", "--no-display")
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE and "no such file" in r.stderr


def test_contradictory_limits_and_options_without_effect(cli, tiny_model, color_video):
    path, _ = color_video
    for extra in (["--max-frames", "2", "--duration", "0"], ["--duration", "0"], ["--duration", "-1"]):
        r = cli("camera", tiny_model, "--source", path, "--no-display", *extra)
        assert r.exit_code == ExitCode.USAGE and "stops before the first frame" in r.stderr, r.stderr
        assert r.stdout == ""
    r = cli("camera", tiny_model, "--source", path, "--no-display", "--max-frames", "2",
            "--serve-fps", "5", "--mqtt-mode", "events")
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 2
    warnings = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert warnings == ["edgeapp: warning: --serve-fps has no effect without --serve",
                        "edgeapp: warning: --mqtt-mode has no effect without --mqtt"]
    r = cli("camera", tiny_model, "--source", path, "--no-display", "--max-frames", "2")
    assert "warning" not in r.stderr  # the defaults say nothing


@pytest.mark.parametrize("extra", [["--tiles", "2x2"], ["--motion"], ["--then", "classify:other.tflite"]])
def test_a_detector_option_given_for_a_classifier_is_one_line_and_exit_2(cli, tiny_model, color_video, extra):
    path, _ = color_video
    r = cli("camera", tiny_model, "--source", path, "--no-display", *extra)
    assert r.exit_code == ExitCode.USAGE and r.stdout == "", r.stderr
    assert f"{extra[0]} is an option of detect models" in r.stderr and "classify model" in r.stderr


def test_headless_is_automatic_without_a_display(cli, tiny_model, color_video, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    if sys.platform.startswith("linux"):
        assert not has_display()
    path, expected = color_video
    r = cli("camera", tiny_model, "--source", path, "--max-frames", "3")
    assert r.exit_code == 0, r.stderr
    assert len(r.stdout.splitlines()) == 3 and json.loads(r.stdout.splitlines()[0])["frame"] == 0
    if sys.platform.startswith("linux"):
        r = cli("camera", tiny_model, "--source", path, "--display")
        assert r.exit_code == ExitCode.USAGE and "no display" in r.stderr


# ---------------------------------------------------------------------------------------------
# The loop, through its extension points


class FakeSource:
    """A live source giving `frames` frames at `interval` s, then nothing; `recover` frames
    more after the first reopen (0: it stays dead)."""

    def __init__(self, frames: int, interval: float = 0.0, recover: int = 0,
                 fail_open_after_loss: bool = False) -> None:
        self.live, self.fps, self.name = True, 0.0, "fake camera"
        self.left, self.interval, self.recover = frames, interval, recover
        self.fail_open = fail_open_after_loss
        self.opens = self.closes = 0
        self.rng = np.random.default_rng(0)

    def open(self) -> None:
        self.opens += 1
        if self.opens > 1:
            if self.fail_open:
                raise OSError("device gone")
            self.left += self.recover
            self.recover = 0

    def read(self) -> Optional[np.ndarray]:
        if self.left <= 0:
            return None
        self.left -= 1
        if self.interval:
            time.sleep(self.interval)
        return colour_frame("red", self.rng, (W, H))[:120, :160].copy()

    def at_end(self) -> bool:
        return False

    def close(self) -> None:
        self.closes += 1


class FakeTask:
    """A frame runner (the runners' submit/next_done face, one frame in flight, as
    execution/placement opens one with frames=True) that takes `delay` seconds per frame in the
    caller's thread and records what it saw."""

    label = "fake"
    window = 1

    def __init__(self, delay: float = 0.0, interrupt_at: Optional[int] = None,
                 wait_for: Optional[Callable[[], bool]] = None) -> None:
        self.delay, self.seen, self.interrupt_at = delay, 0, interrupt_at
        self.wait_for = wait_for  # the first frame waits until this holds (no timing involved)
        self.queued: list = []

    @property
    def pending(self) -> int:
        return len(self.queued)

    @property
    def has_room(self) -> bool:
        return not self.queued

    def submit(self, key, frame) -> None:
        self.queued.append((key, frame))

    def next_done(self, timeout=None):
        from edgeapp.execution.runner import Done
        from edgeapp.tasks.base import Result

        key, frame = self.queued.pop(0)
        fields, latency = self.run(frame)
        return key, Done((Result(fields), latency), self.label, latency)

    def run(self, frame):
        self.seen += 1
        if self.interrupt_at is not None and self.seen >= self.interrupt_at:
            raise KeyboardInterrupt
        if self.wait_for is not None and self.seen == 1:
            end = time.monotonic() + GUARD
            while not self.wait_for() and time.monotonic() < end:
                time.sleep(0.005)
        time.sleep(self.delay)
        return {"classes": [{"id": 0, "label": "x", "score": 1.0}]}, self.delay * 1000.0


FAST_RECONNECT = ReconnectPolicy(timeout=0.6, first_delay=0.05, max_delay=0.2)
GUARD = 20.0  # seconds: a loop test that would hang stops here and fails its asserts


def most_attempts(policy: ReconnectPolicy) -> int:
    """How many reopenings the backoff leaves room for: each waits its delay (first_delay,
    doubling up to max_delay; the last one cut to what is left of the timeout) and a wait never
    ends early, so a loaded machine makes fewer, never more."""
    waited, delay, attempts = 0.0, policy.first_delay, 0
    while waited < policy.timeout:
        waited += min(delay, policy.timeout - waited)
        delay = min(delay * 2, policy.max_delay)
        attempts += 1
    return attempts


def test_lost_live_source_bounded_reconnect_then_summary():
    src = FakeSource(frames=10, fail_open_after_loss=True)
    records = []
    stats = run_camera(src, FakeTask(), drop=False, reconnect=FAST_RECONNECT,
                       on_record=records.append, duration=GUARD)
    # given up by the reconnect policy, not stopped by the guard's duration
    assert stats.stop == "source lost" and stats.lost
    assert stats.processed == stats.captured == 10 == len(records)
    # every attempt closed and reopened the source, with backoff: not a busy loop
    assert 1 <= stats.reconnect_attempts <= most_attempts(FAST_RECONNECT) == 5
    assert stats.reconnects == 0 and src.opens == 1 + stats.reconnect_attempts
    assert stats.reopen_error == "device gone"
    assert f"0 reconnect(s) in {stats.reconnect_attempts} attempt(s)" in stats.summary_line()
    assert src.closes >= 1


def test_live_source_that_comes_back_is_resumed():
    src = FakeSource(frames=5, recover=5)
    notices = []
    stats = run_camera(src, FakeTask(), drop=False, reconnect=FAST_RECONNECT,
                       on_notice=notices.append, duration=GUARD)
    assert stats.captured == 10 and stats.processed == 10  # 5, then 5 more after reopening
    assert stats.reconnects == 1 and stats.stop == "source lost"
    assert any("reconnected" in n for n in notices)


def test_no_reconnect_when_disabled():
    stats = run_camera(FakeSource(frames=3), FakeTask(), drop=False,
                       reconnect=ReconnectPolicy(timeout=0), duration=GUARD)
    assert stats.stop == "source lost" and stats.reconnect_attempts == 0 and stats.processed == 3


def test_slow_inference_drops_stale_frames_never_queues():
    src = FakeSource(frames=60)
    records = []
    # the first inference lasts until the camera has given every frame: a camera far faster
    # than inference, without depending on how fast this machine is
    stats = run_camera(src, FakeTask(wait_for=lambda: src.left == 0),
                       reconnect=ReconnectPolicy(timeout=0), on_record=records.append,
                       duration=GUARD)
    assert stats.policy == "newest"
    assert stats.captured == 60
    assert stats.dropped >= 57 and stats.processed <= 3
    assert stats.max_pending == 1  # one frame waiting at most: nothing piles up
    assert stats.processed + stats.dropped <= stats.captured <= stats.processed + stats.dropped + 1
    idx = [r["frame"] for r in records]
    assert idx == sorted(idx) and len(set(idx)) == len(idx)
    assert max(b - a for a, b in zip(idx, idx[1:])) > 1  # gaps: the dropped frames
    # the newest frame is taken: the processed frames are spread over the whole capture
    assert idx[-1] == 59  # the last frame captured is the last processed


def test_video_file_keeps_every_frame_even_with_slow_inference(color_video):
    path, expected = color_video
    stats = run_camera(OpenCVSource(str(path)), FakeTask(delay=0.01), queue_size=3)
    assert stats.policy == "every"
    assert (stats.captured, stats.processed, stats.dropped) == (24, 24, 0)
    assert stats.max_pending <= 3
    assert stats.stop == "end of stream"


def test_video_file_played_as_live_drops(color_video):
    path, expected = color_video  # 24 frames at 30 FPS: 0.8 s of video
    class Source(OpenCVSource):
        ended = False  # a read found the end: every frame before it was handed over

        def read(self):
            frame = super().read()
            self.ended = self.ended or frame is None
            return frame

    src = Source(str(path))
    # the first inference lasts until the whole file is read: inference far slower than the
    # file's frame rate, whatever this machine's speed
    stats = run_camera(src, FakeTask(wait_for=lambda: src.ended), drop=True, duration=GUARD)
    assert stats.policy == "newest"
    assert stats.captured == 24 and stats.processed <= 2 and stats.dropped >= 22
    assert stats.processed + stats.dropped == stats.captured
    # paced at the file's frame rate, not decoded flat out: frame 23 is due 23/30 s after frame 0
    # (the bound pacing's own schedule sets: a loaded machine takes longer, never less)
    assert stats.seconds >= 23 / 30


def test_ctrl_c_stops_cleanly():
    src = FakeSource(frames=1000, interval=0.001)
    stats = run_camera(src, FakeTask(interrupt_at=3), reconnect=ReconnectPolicy(timeout=0),
                       duration=GUARD)
    assert stats.stop == "interrupted" and stats.processed == 2
    assert src.closes == 1  # the capture thread stopped and the source was released


def test_stop_event_and_duration():
    ev = threading.Event()
    threading.Timer(0.2, ev.set).start()
    stats = run_camera(FakeSource(frames=10**6, interval=0.002), FakeTask(), stop_event=ev,
                       duration=GUARD)
    assert stats.stop == "stopped"
    stats = run_camera(FakeSource(frames=10**6, interval=0.002), FakeTask(), duration=0.3)
    assert stats.stop == "duration"  # said only once the run's own clock passed --duration


def test_grabber_keep_mode_blocks_instead_of_growing():
    src = FakeSource(frames=50)
    g = FrameGrabber(src, drop=False, reconnect=ReconnectPolicy(timeout=0), queue_size=4)
    g.start()
    end = time.monotonic() + GUARD
    while src.left > 45 and time.monotonic() < end:  # until the reader holds a 5th frame
        time.sleep(0.01)
    assert src.left == 45  # and reads no 6th: it waits for the consumer
    assert g.pending == 4 and g.captured == 4
    got = [g.get(1.0) for _ in range(50)]
    assert [f.index for f in got] == list(range(50))
    assert g.stop() and g.max_pending <= 4 and g.dropped == 0


# ---------------------------------------------------------------------------------------------
# Pieces


@pytest.mark.parametrize("text, kind", [
    ("0", "camera"), ("12", "camera"), ("/dev/video2", "device"), ("rtsp://cam.local/stream", "url"),
    ("v4l2src device=/dev/video0 ! videoconvert ! appsink", "gstreamer"), ("clip.mp4", "file"),
    ("file:///tmp/x.avi", "file"),
])
def test_parse_source(text, kind):
    assert parse_source(text)[0] == kind


def test_fit_frame_converts_bgr_and_letterboxes():
    f = np.zeros((H, W, 3), np.uint8)
    f[:, :, 0] = 255  # blue in BGR
    pixels, fit = fit_frame(f, (64, 64), 3, ResizeMode.letterbox)
    assert pixels.shape == (64, 64, 3) and pixels.dtype == np.uint8
    assert (fit.content_w, fit.content_h, fit.pad_x, fit.pad_y) == (64, 48, 0, 8)
    assert pixels[32, 32].tolist() == [0, 0, 255]  # RGB now
    assert pixels[:8].max() == 0 and pixels[56:].max() == 0  # the padding
    gray, _ = fit_frame(f, (16, 16), 1)
    assert gray.shape == (16, 16, 1)


def test_stats_summary_has_the_documented_fields():
    s = CameraStats(source="x", device="cpu", policy="newest", captured=10, processed=8, dropped=2,
                    seconds=2.0, stop="end of stream", inference_ms=[1.0, 2.0, 3.0],
                    frame_ms=[2.0, 3.0, 4.0])
    d = s.summary()
    assert d["fps"] == 4.0 and d["inference_ms"]["p50"] == 2.0 and d["frame_ms"]["p99"] <= 4.0
    assert {"frames_captured", "frames_processed", "frames_dropped", "device", "stop"} <= set(d)


def test_overlay_draws_boxes_label_and_status():
    from edgeapp.core.vision.overlay import color_for
    from edgeapp.tasks import kind
    from edgeapp.tasks.base import Result, annotate_frame

    img = np.zeros((H, W, 3), np.uint8)
    annotate_frame(kind("detect"), img, Result(
        {"objects": [{"id": 3, "label": "cat", "score": 0.9, "bbox": [100, 100, 200, 200]}]}),
        4.2, 30.0, "edgetpu")
    assert tuple(img[150, 100]) == color_for(3)  # the box edge
    assert img[150, 150].sum() == 0  # inside untouched
    assert img[-20:, :150].any()  # status line
    assert color_for(3) == color_for(3) and color_for(3) != color_for(4)


def test_bench_script_reports_overhead():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_camera_overhead.py"),
                           "--runs", "30", "--json"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ})
    assert proc.returncode in (0, 1), proc.stderr
    result = json.loads(proc.stdout)
    assert result["frame"] == [640, 480]
    assert {"capture_copy", "resize", "colour", "overlay", "total"} <= set(result["ms"])


def test_frames_read_ahead_of_max_frames_are_not_counted_as_captured(cli, tpus, compiled_pair, color_video):
    """A slow device (the stand-in Edge TPU, 40 ms per frame) lets the capture thread read ahead
    of the last frame run: those frames are no part of the run ("9 captured, 5 processed, 0
    dropped" said otherwise)."""
    tpus("usb", delay_ms=40)
    path, _ = color_video
    r = cli("camera", compiled_pair[0], "--source", path, "--no-display", "--max-frames", "5",
            "--device", "usb:0")
    assert r.exit_code == 0, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "5 frame(s) captured, 5 processed, 0 dropped" in line and "on usb:0" in line, line
