#!/usr/bin/env python3
"""The numbers `camera --clips` promises (docs/alerts.md), measured on a rendered 1280x720
video of moving shapes (tests/shapes_video.py) through the shipped shapes detector:

1. frames per second with --clips (and an alert rule that fires) beside the same run without
   --clips, in interleaved rounds after a warm-up, median of the rounds; both as a camera runs
   (--drop-frames: the file plays at its frame rate, the newest frame is taken) and frame by
   frame (a file's every frame: there the clips' encoder sets the pace, by design);
2. the ring buffer's RSS when full (its peak): child processes feed 720p frames one at a time
   to the clip sink with --pre 10 and with --pre 0; the difference of their RSS growth
   (medians) against the documented figure ceil(pre x fps) x J (J: the mean JPEG size the
   sink measured);
3. how long before its trigger a clip starts, against --pre (read from the sidecar).

    python scripts/bench_alerts.py [--rounds 3] [--frames 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"
W, H, FPS = 1280, 720, 30.0


def render(path: Path, frames: int) -> Path:
    from media import make_video
    from shapes_video import random_scene

    scene = random_scene(7, frames=frames, objects=10, width=W, height=H)
    return make_video(path, (scene.render(f) for f in range(frames)), fps=FPS, marked=True)


def camera(video: Path, out: Path, clips: bool, paced: bool, pre: float = 2.0) -> dict:
    """One run's summary (JSON)."""
    args = [sys.executable, "-m", "edgeapp", "camera", str(DETECTOR), "--source", str(video),
            "--no-display", "--track", "--alert", "new:appear", "--min-area", "3000",
            "--events", str(out / "events.jsonl"), "-o", str(out / "records.jsonl"), "--summary", "json"]
    if paced:
        args.append("--drop-frames")
    if clips:
        args += ["--clips", str(out / "clips"), "--pre", str(pre), "--post", "1"]
    r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    if r.returncode:
        raise SystemExit(r.stderr)
    return json.loads(r.stderr.strip().splitlines()[-1])


def fps_ratio(video: Path, work: Path, rounds: int, paced: bool) -> dict:
    camera(video, work / "warm", False, paced)  # warm-up: page cache, imports
    runs = {False: [], True: []}
    for n in range(rounds):
        for clips in (False, True):  # interleaved: a loaded machine slows both alike
            out = work / f"{'paced' if paced else 'every'}-{n}-{clips}"
            out.mkdir(parents=True)
            runs[clips].append(camera(video, out, clips, paced)["fps"])
    without, with_ = statistics.median(runs[False]), statistics.median(runs[True])
    return {"fps_without": without, "fps_with": with_, "ratio": round(with_ / without, 3),
            "rounds": runs}


RSS_CHILD = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[4]); sys.path.insert(0, sys.argv[4] + "/tests")
from edgeapp.sinks.clips import ClipSettings, ClipSink
from shapes_video import random_scene

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024

pre, frames, folder = float(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
scene = random_scene(7, frames=frames, objects=10, width=1280, height=720)
rendered = [scene.render(f) for f in range(8)]  # kept from the start: the same in every run

class Every:  # a file's policy: every frame reaches the ring
    policy = "every"

sink = ClipSink(ClipSettings(folder, pre, 0.0, None), None, 30.0)
sink.on_frame(rendered[0], {"frame": 0, "source_ms": 0.0}, annotated=True, stats=Every())
sink.wait_encoded()
before = rss()
for f in range(1, frames):
    sink.on_frame(rendered[f % 8], {"frame": f, "source_ms": f * 1000 / 30.0}, annotated=True,
                  stats=Every())
    sink.wait_encoded()  # one frame at a time: the queue's raw frames are no part of the figure
grown = rss() - before  # the ring is full: its peak
s = sink.summary()
sink.close()
print(json.dumps({"peak_growth": grown, "jpeg_mean": s["jpeg_mean_bytes"],
                  "ring_frames": s["buffer_frames"], "buffer_peak_bytes": s["buffer_peak_bytes"]}))
"""


def ring_rss(work: Path, pre: float, frames: int) -> dict:
    folder = work / f"rss-{pre}"
    r = subprocess.run([sys.executable, "-c", RSS_CHILD, str(pre), str(frames), str(folder), str(ROOT)],
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(r.stderr)
    return json.loads(r.stdout)


def ring_figure(work: Path, rounds: int, pre: float = 10.0) -> dict:
    """The ring's peak RSS (with --pre `pre` minus with --pre 0, medians of `rounds` child
    processes each) against the stated ceil(pre x fps) x J."""
    frames = int(pre * FPS) + 120
    runs = {pre: [], 0.0: []}
    for _ in range(rounds):
        for p in (pre, 0.0):
            runs[p].append(ring_rss(work, p, frames))
    grown = {p: statistics.median(r["peak_growth"] for r in runs[p]) for p in runs}
    jpeg = runs[pre][0]["jpeg_mean"]
    stated = math.ceil(pre * FPS) * jpeg  # the ring's frames beyond --pre 0's two
    measured = grown[pre] - grown[0.0]
    return {"pre": pre, "fps": FPS, "jpeg_mean_bytes": jpeg, "stated_bytes": stated,
            "measured_bytes": measured, "measured_over_stated": round(measured / stated, 3),
            "buffer_peak_bytes": runs[pre][0]["buffer_peak_bytes"]}


def clip_start(video: Path, work: Path, pre: float) -> dict:
    out = work / "start"
    out.mkdir()
    camera(video, out, True, False, pre)
    first: dict = {}  # each clip's opening alert (later ones extend it: their pre-roll is longer)
    for side in sorted((out / "clips").glob("*.json")):
        data = json.loads(side.read_text())
        clip = data["clip"]
        if clip not in first or data["alert"]["frame"] < first[clip]["alert"]["frame"]:
            first[clip] = data
    starts = [(d["alert"]["frame"] - d["first_frame"]) / d["fps"] for d in first.values()
              if d["alert"]["frame"] >= pre * FPS + 1]  # not those before --pre s of video existed
    return {"pre": pre, "clips": len(starts), "seconds_before_min": min(starts) if starts else None,
            "seconds_before_max": max(starts) if starts else None,
            "within_one_frame": all(pre <= s <= pre + 1 / FPS + 1e-6 for s in starts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        video = render(work / "shapes720.avi", a.frames)
        result = {"video": f"{W}x{H} at {FPS:g} FPS, {a.frames} frames",
                  "fps_paced": fps_ratio(video, work, a.rounds, True),
                  "fps_every_frame": fps_ratio(video, work, a.rounds, False)}
        result["ring_rss"] = ring_figure(work, a.rounds)
        result["clip_start"] = clip_start(video, work, 2.0)
    text = json.dumps(result, indent=1)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
