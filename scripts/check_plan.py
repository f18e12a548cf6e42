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
                          timeout=timeout)


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


def measured(cmd: str, model: str, device: str, videos: List[Path], seconds: float, warmup: float,
             folder: Path, several: bool) -> Dict[str, float]:
    """Each source's frame rate in its records after `warmup` seconds."""
    records, summary = folder / "records.jsonl", folder / "summary.json"
    args = ["camera", model, "--device", device, "--drop-frames", "--no-display", "-o", str(records),
            "--duration", f"{warmup + seconds:g}", "--summary", "json", "--summary-file", str(summary)]
    for i, v in enumerate(videos):
        args += ["--source", f"s{i}={v}" if several else str(v)]
    r = edgeapp(cmd, *args, timeout=warmup + seconds + 300)
    if r.returncode != 0:
        sys.exit(f"camera failed ({r.returncode}): {r.stderr.strip()}")
    stamps: Dict[str, List[float]] = {}
    for line in records.read_text().splitlines():
        rec = json.loads(line)
        stamps.setdefault(str(rec.get("source", "s0")), []).append(float(rec["timestamp"]))
    start = min(min(t) for t in stamps.values()) + warmup
    fps = {}
    for name, ts in sorted(stamps.items()):
        kept = sorted(t for t in ts if t >= start)
        fps[name] = (len(kept) - 1) / (kept[-1] - kept[0]) if len(kept) > 2 and kept[-1] > kept[0] else 0.0
    return fps


def main(argv=None) -> int:
    a = parse_args(argv)
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
              f"of a {frames}-frame MJPG video; camera run {a.warmup:g}+{a.seconds:g} s")
        print(f"{'repeat':>6} {'predicted':>10} {'measured':>9} {'ratio':>6}  bound  cpu share  per source")
        ratios, preds, meas = [], [], []
        for rep in range(a.repeats):
            doc = predicted(a.edgeapp, a.model, a.device, a.plan)
            pred = doc["plan"][0]["predicted_fps"]
            got = measured(a.edgeapp, a.model, a.device, videos, a.seconds, a.warmup, folder, several)
            mean = statistics.mean(got.values())
            ratio = pred / mean if mean > 0 else float("inf")
            ratios.append(ratio)
            preds.append(pred)
            meas.append(mean)
            share = doc.get("cpu_share", {})
            print(f"{rep + 1:>6} {pred:>10.1f} {mean:>9.1f} {ratio:>6.2f}  {doc['prediction']['bound']:<6} "
                  f"{share.get('total', float('nan')):>5.2f}/{doc['cores']}  "
                  + " ".join(f"{k} {v:.1f}" for k, v in got.items()))
            time.sleep(0.5)
        print(f"{'median':>6} {statistics.median(preds):>10.1f} {statistics.median(meas):>9.1f} "
              f"{statistics.median(ratios):>6.2f}  (ratio = predicted / measured; 1.15 is 15% over)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
