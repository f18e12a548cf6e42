#!/usr/bin/env python3
"""Several camera sources on one engine: do they get its whole throughput, shared fairly?

N copies of a rendered video (tests/media.py) run as N sources of one `camera` run through the
Python API (`Model.camera([...])`), each played like a live camera (`drop_frames=True`: paced
at the video's frame rate, newest-frame policy), together offering more frames than the engine
runs. The baseline is one source offering the same load alone (the same video at N times the
frame rate), which saturates the same engine. Printed, per repeat and as the median:

- throughput ratio: the N sources' processed FPS summed, over the one source's (target >= 0.9);
- spread: the largest distance of a source's processed FPS from the sources' mean, as a
  fraction of the mean (target <= 0.10);
- each engine's busy fraction (inference time over wall time) in both runs, and their ratio:
  on a machine shared with other work the engine's own speed moves between runs (the FPS
  ratio with it), while the busy ratio says whether sharing lost any of the engine's time.

    python scripts/bench_multisource.py [--model MODEL] [--device cpu]
        [--sources 4] [--fps 30] [--seconds 10] [--repeats 3] [--json out.json]

A warm-up run (2 s) comes first; the two runs of a repeat go in turn first. On a machine
shared with other work the engine's own speed moves between runs: read the median of several
repeats. On an Edge TPU, pass its --device (usb, pci:0...).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from media import CLASSES, make_video  # noqa: E402

# Coral's MobileNet v2 (../shared/coral): ~15-30 ms a frame on a CPU, far more than decoding a
# frame, so the engine is the bottleneck; the shapes detector (~5-9 ms) is near the cost of
# capture and decode on a small machine, which then bounds the single source instead.
MODEL = ROOT.parent / "shared" / "coral" / "mobilenet_v2_1.0_224_quant.tflite"
FALLBACK = ROOT / "models" / "shapes_yolov8_int8.tflite"


def video(folder: Path, fps: float, seconds: float) -> Path:
    """A video long enough to play `seconds` at `fps` (MJPG AVI, 320x240, the classifier's
    colours in turn, every frame marked)."""
    frames = int(fps * (seconds + 2)) + 1
    return make_video(folder / f"scene_{fps:g}.avi", (CLASSES[i // 10 % 3] for i in range(frames)),
                      fps=fps, seed=1, marked=True)


def run(model, sources: list, seconds: float) -> dict:
    """One camera run over `sources` (drop policy, paced): per source FPS, total FPS, engines."""
    outcome = model.camera(sources if len(sources) > 1 else sources[0], drop_frames=True,
                           duration=seconds)
    assert outcome.error is None, outcome.error
    per = outcome.sources or {outcome.stats.source: outcome.stats}
    fps = [s.processed / outcome.stats.seconds for s in per.values()]
    return {"fps": fps, "total_fps": sum(fps), "engines": outcome.engines,
            "dropped": [s.dropped for s in per.values()], "captured": [s.captured for s in per.values()]}


def busy(result: dict) -> float:
    """The busiest device's busy fraction in a run."""
    return max(load["busy"] for load in result["engines"].values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=MODEL if MODEL.exists() else FALLBACK)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sources", type=int, default=4)
    ap.add_argument("--fps", type=float, default=30.0, help="each source's frame rate")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import edgeapp

    rows = []
    with tempfile.TemporaryDirectory() as tmp, edgeapp.open_model(args.model, args.device) as model:
        each = video(Path(tmp), args.fps, args.seconds)
        alone = video(Path(tmp), args.fps * args.sources, args.seconds)
        run(model, [each] * args.sources, 2.0)  # warm-up
        for i in range(args.repeats):
            if i % 2:  # in turn first: a machine that slows down or speeds up favours neither
                several = run(model, [each] * args.sources, args.seconds)
                single = run(model, [alone], args.seconds)
            else:
                single = run(model, [alone], args.seconds)
                several = run(model, [each] * args.sources, args.seconds)
            mean = statistics.mean(several["fps"])
            row = {"single_fps": round(single["total_fps"], 1),
                   "several_fps": [round(f, 1) for f in several["fps"]],
                   "ratio": round(several["total_fps"] / single["total_fps"], 3),
                   "spread": round(max(abs(f - mean) for f in several["fps"]) / mean, 3),
                   "busy_ratio": round(busy(several) / busy(single), 3),
                   "single_engines": single["engines"], "several_engines": several["engines"],
                   "dropped": several["dropped"]}
            rows.append(row)
            print(f"repeat {i + 1}: one source {row['single_fps']} FPS; {args.sources} sources "
                  f"{row['several_fps']} FPS (sum {several['total_fps']:.1f}); ratio {row['ratio']:.3f}; "
                  f"spread {row['spread'] * 100:.1f}%; busy ratio {row['busy_ratio']:.3f}: one {single['engines']}, "
                  f"several {several['engines']}")
    ratio = statistics.median(r["ratio"] for r in rows)
    spread = statistics.median(r["spread"] for r in rows)
    busy_ratio = statistics.median(r["busy_ratio"] for r in rows)
    print(f"median: throughput ratio {ratio:.3f} (target >= 0.9; engine busy ratio {busy_ratio:.3f}), "
          f"per-source spread "
          f"{spread * 100:.1f}% of the mean (target <= 10%) -- {args.sources} sources at "
          f"{args.fps:g} FPS on {args.device}, {args.model.name}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "repeats": rows, "ratio": ratio, "spread": spread,
                                         "busy_ratio": busy_ratio}, indent=1))


if __name__ == "__main__":
    main()
