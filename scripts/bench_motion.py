#!/usr/bin/env python3
"""What `camera --motion` gains on small moving objects: COCO mAP50 (faster-coco-eval or
pycocotools) of the shipped shapes detector on a rendered video, with and without --motion:

    python scripts/bench_motion.py [--frames 90] [--seed 3] [--objects 6]

The video: 1280x720, shapes of 40-56 px crossing a still background (tests/shapes_video.py), so
the 256-pixel detector sees them at a fifth of their size on the whole frame; with --motion it
sees the regions that moved at their own size. Frames where a shape is partly off screen or
hidden are left out of the truth. Prints, per setting, mAP50-95, mAP50, frames/s (from the
records' frame_ms) and inferences per frame, then the gain in mAP50 points.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from shapes_video import NAMES, Scene, small_movers  # noqa: E402

from edgeapp.core.eval.coco import box_metrics  # noqa: E402

DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"


def run(video: Path, motion: bool) -> list:
    argv = [sys.executable, "-m", "edgeapp", "camera", str(DETECTOR), "--source", str(video),
            "--no-display", "--format", "jsonl", "--device", "cpu"]
    if motion:
        argv.append("--motion")
    out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def regions_per_frame(scene: Scene, side: int = 256) -> float:
    """How many windows --motion runs the detector on per frame (the whole frame counts one)."""
    from edgeapp.core.vision.motion import MotionRegions

    motion = MotionRegions(side)
    return sum(len(motion(scene.render(f))) for f in range(scene.frames)) / scene.frames


def score(scene: Scene, records: list, first: int) -> dict:
    """COCO metrics over the frames from `first` on (the first frames build the background)."""
    images, annotations, results = [], [], []
    for f in range(first, scene.frames):
        images.append({"id": f, "width": scene.width, "height": scene.height})
        for _i, (x0, y0, x1, y1) in scene.truth(f):
            cls = scene.movers[_i].cls
            annotations.append({"id": len(annotations) + 1, "image_id": f, "category_id": cls,
                                "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                                "iscrowd": 0})
    for r in records:
        if r.get("frame", -1) < first:
            continue
        for o in r.get("objects", []):
            x0, y0, x1, y1 = o["bbox"]
            results.append({"image_id": r["frame"], "category_id": int(o["id"]),
                            "bbox": [x0, y0, x1 - x0, y1 - y0], "score": float(o["score"])})
    gt = {"images": images, "annotations": annotations,
          "categories": [{"id": i, "name": n} for i, n in enumerate(NAMES)]}
    return box_metrics(gt, results)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=90)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--objects", type=int, default=6)
    args = ap.parse_args()
    scene = small_movers(args.seed, args.frames, args.objects)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        video = scene.write(Path(tmp) / "small_movers.avi")
        for motion in (False, True):
            records = run(video, motion)
            m = score(scene, records, first=1)
            fps = len(records) / max(1e-9, sum(r["frame_ms"] for r in records) / 1000)
            per_frame = regions_per_frame(scene) if motion else 1.0
            rows.append(("--motion" if motion else "whole frame", m["map"], m["map50"], fps, per_frame))
    print(f"{args.frames} frames 1280x720, {args.objects} shapes 40-56 px moving, {DETECTOR.name} "
          "(256x256 input), on the CPU")
    print(f"{'setting':<12} {'mAP50-95':>9} {'mAP50':>7} {'frames/s':>9} {'inferences/frame':>17}")
    for name, m, m50, fps, n in rows:
        print(f"{name:<12} {m:>9.4f} {m50:>7.4f} {fps:>9.1f} {n:>17.2f}")
    print(f"--motion: {100 * (rows[1][2] - rows[0][2]):+.1f} mAP50 points over the whole frame")
    return 0


if __name__ == "__main__":
    sys.exit(main())
