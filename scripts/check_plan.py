"""Check `edgeapp bench MODEL --plan NxRES@FPS` against a real camera run of that plan.

    python scripts/check_plan.py models/digits_int8.tflite --plan 1x1280x720@60
    python scripts/check_plan.py models/shapes_yolov8_int8.tflite --plan 1x640x480@120 --repeats 5

Each repeat runs, back to back (the machine's load moves; a prediction is only comparable with
a run made under the same load):
  (a) `edgeapp bench MODEL --plan PLAN --format json`: each stream's predicted frame rate;
  (b) `edgeapp camera MODEL --source v.avi ...` on a rendered MJPG video at RES and FPS, N times
      as N sources of one run when this edgeapp takes a repeatable --source (read from
      `edgeapp camera --help`), else only N=1; with --drop-frames, so the file plays at its own
      frame rate as a camera does, the newest frame is taken and the rest dropped; headless,
      records to a file. Each source's measured frame rate is taken from its records after
      --warmup seconds: (frames - 1) over the time between the first and the last.
Then it prints predicted and measured frame rates per repeat, their ratio, and the medians.
The plan should say more than the camera can give (e.g. @200) to check the prediction of what
the machine reaches; a plan that fits is met at its own frame rate.

--edgeapp names the command to run (default: this Python's `-m edgeapp`), e.g. to check
another checkout: PYTHONPATH=/path/to/checkout python scripts/check_plan.py ...
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--plan", required=True, help="one group: NxRES@FPS, e.g. 1x1280x720@200 or 2x720p@30")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seconds", type=float, default=8.0, help="measured part of each camera run")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of each camera run left out")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--edgeapp", default=f"{sys.executable} -m edgeapp")
    p.add_argument("--keep", type=Path, help="keep the video, records and summaries in this folder")
    return p.parse_args(argv)


def edgeapp(cmd: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"}
    return subprocess.run(shlex.split(cmd) + list(args), capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=tempfile.gettempdir())  # not this checkout's edgeapp


def takes_several_sources(cmd: str) -> bool:
    """Whether this edgeapp's camera takes --source more than once (its help says so)."""
    text = edgeapp(cmd, "camera", "--help").stdout
    return "Repeatable" in text and "[NAME=]SOURCE" in text


def render(path: Path, size: Tuple[int, int], fps: float, frames: int) -> None:
    """An MJPG video of camera-like frames (bench --plan's own texture, moving)."""
    import cv2

    from edgeapp.flows.bench.plan import synthetic_frame

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, size)
    assert writer.isOpened(), f"OpenCV cannot write {path}"
    base = synthetic_frame(*size)
    for i in range(frames):
        writer.write(np.roll(base, (i * 7) % size[0], axis=1))
    writer.release()


def predicted(cmd: str, model: str, device: str, plan: str) -> dict:
    r = edgeapp(cmd, "bench", model, "--device", device, "--plan", plan, "--format", "json")
    if r.returncode != 0:
        sys.exit(f"bench --plan failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def _cpu_seconds(pid: int) -> float:
    """The process's CPU time so far (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(cmd: str, model: str, device: str, videos: List[Path], seconds: float, warmup: float,
             folder: Path, several: bool) -> Tuple[Dict[str, float], float, float]:
    """Each source's frame rate in its records after `warmup` seconds; and over that window,
    the CPU the run got (cores' worth) and its CPU milliseconds per frame (/proc, Linux)."""
    records, summary = folder / "records.jsonl", folder / "summary.json"
    args = ["camera", model, "--device", device, "--drop-frames", "--no-display", "-o", str(records),
            "--duration", f"{warmup + seconds:g}", "--summary", "json", "--summary-file", str(summary)]
    for i, v in enumerate(videos):
        args += ["--source", f"s{i}={v}" if several else str(v)]
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"}
    proc = subprocess.Popen(shlex.split(cmd) + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tempfile.gettempdir())
    samples = []  # (time.time(), CPU seconds) every 0.2 s while it runs
    while proc.poll() is None:
        try:
            samples.append((time.time(), _cpu_seconds(proc.pid)))
        except (OSError, IndexError, ValueError):
            pass
        time.sleep(0.2)
    _out, err = proc.communicate(timeout=60)
    if proc.returncode != 0:
        sys.exit(f"camera failed ({proc.returncode}): {err.strip()}")
    stamps: Dict[str, List[float]] = {}
    for line in records.read_text().splitlines():
        rec = json.loads(line)
        stamps.setdefault(str(rec.get("source", "s0")), []).append(float(rec["timestamp"]))
    start = min(min(t) for t in stamps.values()) + warmup
    fps = {}
    for name, ts in sorted(stamps.items()):
        kept = sorted(t for t in ts if t >= start)
        fps[name] = (len(kept) - 1) / (kept[-1] - kept[0]) if len(kept) > 2 and kept[-1] > kept[0] else 0.0
    window = [s for s in samples if s[0] >= start]
    got = per_frame = float("nan")
    if len(window) >= 2:
        (t0, c0), (t1, c1) = window[0], window[-1]
        frames = sum(1 for ts in stamps.values() for t in ts if t0 < t <= t1)
        got = (c1 - c0) / (t1 - t0)
        per_frame = (c1 - c0) * 1000.0 / frames if frames else float("nan")
    return fps, got, per_frame


def at_share(doc: dict, plan: str, got: float) -> float:
    """The plan's prediction from bench's measured costs, had it measured the CPU the camera
    run got (`got` cores' worth; one thread at most all of it)."""
    from edgeapp.core.capacity import CpuShare, FrameCosts, parse_plan, predict_plan

    if not got > 0:
        return float("nan")
    costs = {tuple(int(v) for v in k.split("x")): FrameCosts(c["decode_ms"], c["host_ms"], c["infer_ms"],
                                                             c["infer_cpu_ms"], c.get("loop_ms", 0.0))
             for k, c in doc["costs"].items()}
    cpu = CpuShare(doc["cores"], min(1.0, got), min(float(doc["cores"]), got))
    return predict_plan(parse_plan(plan), costs, cpu, on_cpu=doc["device"].startswith("cpu")).fps[0]


def main(argv=None) -> int:
    a = parse_args(argv)
    a.model = str(Path(a.model).resolve())
    m = re.match(r"^(\d+)x(.+)@([0-9.]+)$", a.plan.strip())
    if not m or "," in a.plan:
        sys.exit("--plan: one group, NxRES@FPS (e.g. 1x1280x720@200)")
    from edgeapp.core.capacity import parse_plan

    group = parse_plan(a.plan)[0]
    several = takes_several_sources(a.edgeapp)
    if group.count > 1 and not several:
        sys.exit(f"--plan {a.plan}: this edgeapp's camera takes one --source; check N=1 only")
    with tempfile.TemporaryDirectory(prefix="check-plan-") as tmp:
        folder = a.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        video = folder / f"v_{group.width}x{group.height}.avi"
        frames = int((a.warmup + a.seconds + 3) * group.fps)
        render(video, group.size, group.fps, frames)
        videos = []
        for i in range(group.count):  # N names for one video: N sources
            v = folder / f"source{i}.avi"
            if not v.exists():
                os.symlink(video, v)
            videos.append(v)
        print(f"plan {a.plan} of {Path(a.model).name} on {a.device}; {group.count} source(s) "
              f"of a {frames}-frame MJPG video; camera run {a.warmup:g}+{a.seconds:g} s", flush=True)
        print(f"{'repeat':>6} {'predicted':>9} {'measured':>8} {'ratio':>6} {'bound':<6} {'cpu got':>7} "
              f"{'at run cpu':>10} {'ratio':>6} {'cpu ms/frame':>12} {'run':>6}  per source", flush=True)
        rows = []
        for rep in range(a.repeats):
            doc = predicted(a.edgeapp, a.model, a.device, a.plan)
            pred = doc["plan"][0]["predicted_fps"]
            got, cpu_got, per_frame = measured(a.edgeapp, a.model, a.device, videos, a.seconds, a.warmup,
                                               folder, several)
            mean = statistics.mean(got.values())
            again = at_share(doc, a.plan, cpu_got)
            c = doc["costs"][f"{group.width}x{group.height}"]
            bench_ms = c["decode_ms"] + c["host_ms"] + c["infer_cpu_ms"] + c.get("loop_ms", 0.0)
            row = (pred, mean, pred / mean if mean else float("inf"), cpu_got, again,
                   again / mean if mean else float("inf"), bench_ms, per_frame)
            rows.append(row)
            print(f"{rep + 1:>6} {pred:>9.1f} {mean:>8.1f} {row[2]:>6.2f} {doc['prediction']['bound']:<6} "
                  f"{doc['cpu_share']['total']:>4.2f}/{cpu_got:<4.2f} {again:>8.1f} {row[5]:>6.2f} "
                  f"{bench_ms:>5.2f}/{per_frame:<6.2f}  " + " ".join(f"{k} {v:.1f}" for k, v in got.items()),
                  flush=True)
            time.sleep(0.5)
        med = [statistics.median(r[i] for r in rows) for i in range(len(rows[0]))]
        print(f"{'median':>6} {med[0]:>9.1f} {med[1]:>8.1f} {med[2]:>6.2f} {'':<6} {'':>9} {med[4]:>8.1f} "
              f"{med[5]:>6.2f} {med[6]:>5.2f}/{med[7]:<6.2f}")
        print("ratio: predicted / measured (1.15: 15% over). cpu got: cores' worth of CPU bench measured "
              "/ the camera run got. at run cpu: bench's costs with the CPU the run got. cpu ms/frame: "
              "bench's costs / the run's (its CPU time over its frames).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
