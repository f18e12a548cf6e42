#!/usr/bin/env python3
"""What `--tiles` gains on small objects, measured by `edgeapp eval` (COCO mAP, faster-coco-eval
or pycocotools) on a labelled set of small drawn shapes, with the shipped shapes detector:

    python scripts/bench_tiles.py [--count 24] [--seed 9] [--tiles 2x2 3x3]

The set: 1024x768 images with six shapes of 44-56 px each (tests/eval_sets.small_shapes_set), so
the 256-pixel detector sees them at a quarter of their size on the whole image. Prints, per
setting, mAP50-95, mAP50, images/s and inferences per image, then the gain in mAP50 points.
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

from eval_sets import small_shapes_set  # noqa: E402

from edgeapp.core.vision.tiles import parse_tiles  # noqa: E402

DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"


def measure(data: Path, tiles: str) -> dict:
    argv = [sys.executable, "-m", "edgeapp", "eval", str(DETECTOR), "--data", str(data), "--format", "json"]
    if tiles:
        argv += ["--tiles", tiles]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout)["models"][0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--seed", type=int, default=9)
    ap.add_argument("--tiles", nargs="*", default=["2x2", "3x3"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = small_shapes_set(Path(tmp) / "small", count=args.count, seed=args.seed)["yaml"]
        rows = []
        for tiles in [""] + args.tiles:
            m = measure(data, tiles)
            invokes = parse_tiles(tiles).count + 1 if tiles else 1
            rows.append((tiles or "whole image", m["metrics"]["map"], m["metrics"]["map50"],
                         m["images_per_s"], invokes))
    print(f"{args.count} images 1024x768, shapes 44-56 px, {DETECTOR.name} (256x256 input)")
    print(f"{'setting':<12} {'mAP50-95':>9} {'mAP50':>7} {'images/s':>9} {'inferences':>11}")
    for name, m, m50, ips, n in rows:
        print(f"{name:<12} {m:>9.4f} {m50:>7.4f} {ips:>9.1f} {n:>11}")
    for name, _m, m50, _ips, _n in rows[1:]:
        print(f"{name}: {100 * (m50 - rows[0][2]):+.1f} mAP50 points over the whole image")
    return 0


if __name__ == "__main__":
    sys.exit(main())
