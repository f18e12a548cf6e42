"""Throughput of `classify --cluster local:N` against the single-process pipeline, same images.

    python scripts/bench_cluster.py [MODEL] [--images 400] [--workers 2]

Both runs go through the CLI in a fresh process (so both pay their start-up); the cluster run
also pays for starting its local workers and for shipping records back. On a 2-core machine,
expect overhead, not gain: the pipeline already keeps both cores busy.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent


def make_images(folder: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)).save(folder / f"{i:05d}.jpg")


def timed(argv: list) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=str(ROOT / "models" / "digits_int8.tflite"))
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--workers", type=int, default=2, help="local cluster worker processes")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_images(folder, args.images)
        base = [sys.executable, "-m", "edgeapp", "classify", args.model, str(folder), "-f", "jsonl"]
        timed(base)  # warm the page cache and the runtime's import
        local = min(timed(base) for _ in range(args.repeat))
        cluster = min(timed(base + ["--cluster", f"local:{args.workers}"]) for _ in range(args.repeat))
    n = args.images
    print(f"{n} images 640x480 JPEG, model {Path(args.model).name}, {os.cpu_count()} cores")
    print("| run | wall s | images/s |\n| --- | --- | --- |")
    print(f"| single process (pipeline) | {local:.2f} | {n / local:.1f} |")
    print(f"| --cluster local:{args.workers} | {cluster:.2f} | {n / cluster:.1f} |")
    print(f"cluster / single-process throughput: {local / cluster:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
