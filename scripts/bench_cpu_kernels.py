"""The speed cost of `--cpu-kernels reference` against `fast`, per model, on this machine.

    python scripts/bench_cpu_kernels.py [MODEL.tflite ...] [--runs 30] [--threads N]

Default models: Coral's published ones in ../shared/coral, when there. Both engines are opened
once and warmed up; the timed invocations alternate between them (fast, reference, fast, ...)
so a load change on a shared machine hits both alike. Prints p50 and p90 per kernel set and
the p50 ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from edgeapp.flows.bench.run import random_input  # noqa: E402
from edgeapp.hw.runtime import open_engine  # noqa: E402

SHARED = ROOT.parent / "shared" / "coral"
DEFAULT = ["mobilenet_v1_0.25_128_quant", "mobilenet_v2_1.0_224_quant",
           "movenet_single_pose_lightning_ptq", "deeplabv3_mnv2_dm05_pascal_quant"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    models = args.models or [SHARED / f"{m}.tflite" for m in DEFAULT if (SHARED / f"{m}.tflite").exists()]
    if not models:
        sys.exit("no models given and none in ../shared/coral")
    print(f"{'model':<40} {'fast p50':>9} {'p90':>8} {'ref p50':>9} {'p90':>8} {'ref/fast':>8}")
    for path in models:
        engines = {k: open_engine(path, "cpu", threads=args.threads, cpu_kernels=k)
                   for k in ("fast", "reference")}
        x = random_input(engines["fast"].input_shape, engines["fast"].input_dtype)
        times: dict[str, list[float]] = {k: [] for k in engines}
        for i in range(args.warmup + args.runs):
            for k, e in engines.items():
                t = time.perf_counter()
                e.run(x)
                if i >= args.warmup:
                    times[k].append((time.perf_counter() - t) * 1000.0)
        (f50, f90), (r50, r90) = (np.percentile(times[k], [50, 90]) for k in ("fast", "reference"))
        print(f"{path.name:<40} {f50:>9.2f} {f90:>8.2f} {r50:>9.2f} {r90:>8.2f} {r50 / f50:>7.1f}x")


if __name__ == "__main__":
    main()
