#!/usr/bin/env python3
"""Batch classification throughput: invoke-only vs sequential vs edgeapp's pipeline.

    python scripts/bench_classify.py [--model M.tflite] [--images DIR] [--count N]

1. invoke-only: the interpreter on an already prepared tensor (the ceiling);
2. sequential: decode → resize → invoke per image, one after the other (Coral's example);
3. pipeline: what `edgeapp classify` runs (decode/resize in worker threads ahead of invoke).
Defaults: MobileNetV2 and JPEGs made from the cat photos in ../shared/coral when present,
else the bundled digits model and generated JPEGs. Warm-up first; perf_counter timings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "coral"


def make_jpegs(folder: Path, count: int, size: tuple[int, int]) -> list[str]:
    """`count` distinct JPEGs: crops of the shared cat photo, or smooth random images."""
    from PIL import Image

    rng = np.random.default_rng(0)
    src = SHARED / "cat_720p.jpg"
    base = Image.open(src).convert("RGB") if src.exists() else None
    paths = []
    for i in range(count):
        if base is not None:
            dx, dy = rng.integers(0, 80, 2)
            img = base.crop((dx, dy, dx + size[0], dy + size[1]))
        else:
            small = rng.integers(0, 256, (size[1] // 16, size[0] // 16, 3), dtype=np.uint8)
            img = Image.fromarray(small).resize(size, Image.BICUBIC)
        p = folder / f"img_{i:04d}.jpg"
        img.save(p, quality=90)
        paths.append(str(p))
    return paths


class _Null:
    def write(self, _record: dict) -> None:
        pass

    def is_done(self, _path: str) -> bool:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_model = SHARED / "mobilenet_v2_1.0_224_quant.tflite"
    if not default_model.exists():
        default_model = ROOT / "models" / "digits_int8.tflite"
    ap.add_argument("--model", type=Path, default=default_model)
    ap.add_argument("--images", type=Path, help="folder of JPEGs (default: generated)")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--size", default="640x480", help="generated JPEG size WxH")
    ap.add_argument("--threads", type=int, default=None, help="interpreter threads")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from edgeapp.execution.runner import SingleRunner
    from edgeapp.flows.batch import run_batch
    from edgeapp.flows.inputs import expand_inputs
    from edgeapp.hw.runtime import open_engine
    from edgeapp.tasks.base import bind
    from edgeapp.tasks.model import image_model

    engine = open_engine(args.model, "auto", threads=args.threads)
    task = bind("classify", image_model(engine, args.model))

    def prepare(path):
        return task.prepare(path)[0]
    with tempfile.TemporaryDirectory() as tmp:
        if args.images:
            paths = expand_inputs([str(args.images)])[: args.count]
        else:
            w, h = (int(v) for v in args.size.split("x"))
            paths = make_jpegs(Path(tmp), args.count, (w, h))
        for p in paths:  # warm the page cache so all three read from memory
            Path(p).read_bytes()
        tensor = prepare(paths[0])
        for _ in range(10):
            engine.run(tensor)

        t0 = time.perf_counter()
        for _ in paths:
            engine.run(tensor)
        invoke_only = len(paths) / (time.perf_counter() - t0)

        t0 = time.perf_counter()
        for p in paths:
            engine.run(prepare(p))
        sequential = len(paths) / (time.perf_counter() - t0)

        prep_ms = []
        for p in paths[:50]:
            t = time.perf_counter()
            prepare(p)
            prep_ms.append((time.perf_counter() - t) * 1000)

        stats = run_batch(paths, SingleRunner(engine), task, _Null(), workers=args.workers)
        pipeline = stats.per_second

    print(f"model {args.model.name} on {engine.device} ({engine.runtime.name} {engine.runtime.version}, "
          f"threads={args.threads or 'default'}), {len(paths)} JPEGs, workers={args.workers}")
    print(f"prepare (decode+resize+quantize): median {statistics.median(prep_ms):.2f} ms/image")
    print(f"invoke-only : {invoke_only:8.1f} img/s")
    print(f"sequential  : {sequential:8.1f} img/s")
    print(f"pipeline    : {pipeline:8.1f} img/s  = {pipeline / invoke_only:.2f}x invoke-only, "
          f"{pipeline / sequential:.2f}x sequential")
    return 0


if __name__ == "__main__":
    sys.exit(main())
