#!/usr/bin/env python3
"""`edgeapp retrain` speed: extraction against `classify`, and the training itself.

    python scripts/bench_retrain.py [--model EXTRACTOR.tflite] [--count 200] [--repeat 3] [--json]

1. extraction: `edgeapp retrain --no-cache` on N photos against `edgeapp classify` on the same
   photos with the same CPU model (the extractor; classify reads its feature vector as scores),
   both subprocesses as a user runs them, alternated, after one warm-up run of each. classify's
   figure is its own summary (images/s over the batch, model loading excluded); retrain's is
   images ÷ its report's extraction seconds (content hashing included, loading excluded).
   The figure is the median ratio of each retrain run to the classify run before it. Goal:
   retrain ≥ 0.9 x classify.
2. softmax regression on 1,000 embeddings x 10 classes (1024-d, the MobileNet v1 extractor's
   size): the defaults, with and without the 20 % validation split retrain holds out. Goal < 2 s.
3. imprinting on the same embeddings. Goal < 50 ms.
4. writing the head after the extractor (core/tflite/append.py), for information.
Timings: perf_counter after a warm-up; medians (and the 90th percentile of repeated calls).
Default model: Coral's MobileNet v1 extractor in ../shared/coral, else a tiny int8 extractor
built by tests/retrain_models.py. Photos: 640x480 crops of Coral's cat photo, else generated.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "coral"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))


def photos(folder: Path, count: int) -> Path:
    """Two class folders of JPEGs (bench_classify's images)."""
    from bench_classify import make_jpegs

    for c in ("a", "b"):
        (folder / c).mkdir(parents=True)
        make_jpegs(folder / c, count // 2, (640, 480))
    return folder


def run(cmd: list, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "edgeapp", *cmd], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")
    return proc


def classify_rate(model: Path, data: Path, env: dict) -> float:
    proc = run(["classify", str(model), str(data), "--device", "cpu", "--format", "jsonl",
                "-o", os.devnull, "-k", "1"], env)
    m = re.search(r"\(([\d.]+)/s\)", proc.stderr)
    if not m:
        sys.exit(f"no rate in classify's summary: {proc.stderr[-500:]}")
    return float(m.group(1))


def retrain_rate(model: Path, data: Path, out: Path, env: dict) -> float:
    proc = run(["retrain", str(data), "--base", str(model), "-o", str(out), "--device", "cpu",
                "--no-cache", "--format", "json"], env)
    doc = json.loads(proc.stdout)
    return doc["images"]["extracted"] / doc["seconds"]["extract"]


def timed(fn, repeat: int) -> list:
    fn()  # warm-up
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def p90(values: list) -> float:
    return float(np.percentile(values, 90))


def training(repeat: int) -> dict:
    from edgeapp.core.learn.holdout import stratified_split
    from edgeapp.core.learn.train import imprint, train_softmax

    rng = np.random.default_rng(0)
    centres = rng.random((10, 1024)) * 2
    y = np.repeat(np.arange(10), 100)
    x = np.maximum(centres[y] + rng.normal(scale=1.0, size=(1000, 1024)), 0)  # ReLU-like
    keys = [f"{k:08x}" for k in rng.integers(0, 2**32, 1000)]
    train, val = stratified_split(keys, y, 0.2)
    fits = []

    def with_val():
        fits.append(train_softmax(x[train], y[train], 10, x[val], y[val]))

    full = timed(lambda: train_softmax(x, y, 10), repeat)
    split = timed(with_val, repeat)
    imp = timed(lambda: imprint(x, y, 10), max(repeat, 20))
    return {"softmax_1000x10_s": statistics.median(full), "softmax_1000x10_p90_s": p90(full),
            "softmax_800+200val_s": statistics.median(split),
            "softmax_800+200val_epochs": fits[-1].epochs,
            "imprint_1000x10_ms": 1000 * statistics.median(imp),
            "imprint_1000x10_p90_ms": 1000 * p90(imp)}


def writing(model: Path, repeat: int) -> dict:
    from edgeapp.core.learn.head import head_tensors, logit_range
    from edgeapp.core.learn.train import imprint
    from edgeapp.core.tflite.append import append_operators
    from edgeapp.core.tflite.model import parse_model

    data = model.read_bytes()
    parsed = parse_model(data)
    depth = int(np.prod(parsed.output_tensors[0].shape))
    x = np.random.default_rng(1).random((100, depth))
    w, b = imprint(x, np.arange(100) % 10, 10)

    def write():
        t, o, out = head_tensors(parsed, w, b, logit_range(x, w, b))
        append_operators(data, t, o, [out])

    times = timed(write, repeat)
    return {"write_head_ms": 1000 * statistics.median(times), "model_bytes": len(data)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        model = args.model or SHARED / "mobilenet_v1_1.0_224_quant_embedding_extractor.tflite"
        if not model.exists():
            from retrain_models import writer_extractor

            model = writer_extractor(tmp_path / "tiny_extractor.tflite")
        env = {**os.environ, "EDGEAPP_CACHE_DIR": str(tmp_path / "cache"), "EDGEAPP_NO_PROGRESS": "1"}
        data = photos(tmp_path / "photos", args.count)
        classify_rate(model, data, env)  # warm-up: page cache, probe verdicts
        retrain_rate(model, data, tmp_path / "out.tflite", env)
        cls, ret = [], []
        for _ in range(args.repeat):
            cls.append(classify_rate(model, data, env))
            ret.append(retrain_rate(model, data, tmp_path / "out.tflite", env))
        result = {"model": str(model), "images": args.count, "cores": os.cpu_count(),
                  "classify_per_s": statistics.median(cls), "retrain_extract_per_s": statistics.median(ret),
                  "classify_runs": cls, "retrain_runs": ret}
        # each retrain run against the classify run just before it: load from other processes
        # drifts between runs, the median of these ratios is steadier than a ratio of medians
        result["ratio"] = statistics.median(r / c for r, c in zip(ret, cls))
        result.update(training(max(args.repeat, 5)))
        result.update(writing(model, max(args.repeat, 5)))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"model {result['model']} ({result['images']} photos 640x480, {result['cores']} cores)")
    print(f"extraction   retrain {result['retrain_extract_per_s']:.1f}/s vs classify "
          f"{result['classify_per_s']:.1f}/s (medians); median ratio of paired runs "
          f"{result['ratio']:.2f}x (goal >= 0.9x)")
    print(f"softmax      1000x10, 1024-d: {result['softmax_1000x10_s']:.2f} s (p90 "
          f"{result['softmax_1000x10_p90_s']:.2f} s; goal < 2 s); with 200 held out: "
          f"{result['softmax_800+200val_s']:.2f} s, {result['softmax_800+200val_epochs']} epochs")
    print(f"imprint      1000x10, 1024-d: {result['imprint_1000x10_ms']:.1f} ms (p90 "
          f"{result['imprint_1000x10_p90_ms']:.1f} ms; goal < 50 ms)")
    print(f"write head   {result['write_head_ms']:.1f} ms for a {result['model_bytes']} byte base")
    return 0


if __name__ == "__main__":
    sys.exit(main())
