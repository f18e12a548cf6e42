#!/usr/bin/env python3
"""Keep the TPUs fed: how close `edgeapp classify` gets to what this host can decode and compute.

    python scripts/bench_feed.py [--count 200] [--json]

With an Edge TPU the invoke leaves the CPU, so the host's decode -> resize -> quantize is what
limits throughput. This script measures, in one run, on camera-size JPEGs (720p/1080p crops of
Coral's cat and Grace Hopper photos in ../shared/coral):

1. decode capacity: usable cores ÷ the single-thread cost of preparing one image (full decode,
   and reduced-scale, `--decode scaled`);
2. `classify` with stand-in Edge TPUs at zero invoke cost (tests/standin.py; one TPU and two):
   its throughput ÷ the decode capacity (goal ≥ 0.9);
3. the CPU path on MobileNetV2: the default against every fixed `--threads`, ÷ the CPU-work
   bound (cores ÷ (one-thread invoke + decode), goal ≥ 0.9, and the default never slower than
   the best fixed --threads);
4. reduced-scale JPEG decoding: top-1 agreement with full decoding on the same images (MobileNetV2
   on the CPU), and the decode speed-up, to decide whether it should be the default.

Every `classify` run is a subprocess as a user runs it; its own summary line (images/s over the
batch, model loading excluded) is the figure. Timings use perf_counter after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "coral"
sys.path.insert(0, str(ROOT / "tests"))


def make_jpegs(folder: Path, count: int) -> list:
    """`count` camera-size JPEGs: random crops (40-100% of the side) of the shared photos,
    scaled to 1280×720 or 1920×1080, quality 90."""
    from PIL import Image

    rng = np.random.default_rng(0)
    sources = [Image.open(SHARED / n).convert("RGB")
               for n in ("cat_1080p.jpg", "cat_720p.jpg", "grace_hopper.bmp")]
    paths = []
    for i in range(count):
        src = sources[i % len(sources)]
        size = (1280, 720) if i % 2 else (1920, 1080)
        frac = rng.uniform(0.4, 1.0)
        w = int(src.width * frac)
        h = min(src.height, int(w * size[1] / size[0]))
        x, y = rng.integers(0, src.width - w + 1), rng.integers(0, src.height - h + 1)
        p = folder / f"cam_{i:04d}.jpg"
        src.crop((x, y, x + w, y + h)).resize(size, Image.BICUBIC).save(p, quality=90)
        paths.append(str(p))
    return paths


def decode_ms(paths: list, fast: bool, size=(224, 224)) -> float:
    """Mean single-thread cost of preparing one image (decode, resize, quantize), in ms."""
    from edgeapp.core.vision.preprocess import load_input_tensor

    for p in paths[:5]:
        load_input_tensor(p, size, 3, np.uint8, 0.0078125, 128, decode="scaled" if fast else "full")
    t0 = time.perf_counter()
    for p in paths:
        load_input_tensor(p, size, 3, np.uint8, 0.0078125, 128, decode="scaled" if fast else "full")
    return (time.perf_counter() - t0) * 1000.0 / len(paths)


def parallel_decode_ips(paths: list, fast: bool, threads: int, size=(224, 224)) -> float:
    """Images/s that `threads` threads decode together, nothing else running: the host's
    decode capacity as measured now (robust to other load on the machine, which the
    cores ÷ one-thread-cost formula assumes away)."""
    from concurrent.futures import ThreadPoolExecutor

    from edgeapp.core.vision.preprocess import load_input_tensor

    def one(p):
        return load_input_tensor(p, size, 3, np.uint8, 0.0078125, 128, decode="scaled" if fast else "full")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, paths[:threads * 2]))
        t0 = time.perf_counter()
        list(pool.map(one, paths))
        return len(paths) / (time.perf_counter() - t0)


def invoke_ms(model: Path, threads: int = 1, runs: int = 30) -> float:
    from edgeapp.hw.runtime import open_engine

    engine = open_engine(model, "cpu", threads=threads, probe=False)
    x = np.zeros(engine.input_shape, engine.input_dtype)
    for _ in range(3):
        engine.run(x)
    t0 = time.perf_counter()
    for _ in range(runs):
        engine.run(x)
    return (time.perf_counter() - t0) * 1000.0 / runs


_RATE = re.compile(r"image\(s\) in [\d.]+ s \(([\d.]+)/s\)")


def classify_rate(model: Path, folder: Path, env: dict, *args: str) -> float:
    """images/s from `edgeapp classify`'s summary (the batch only: loading excluded)."""
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "classify", str(model), str(folder),
                           "-f", "jsonl", "-o", os.devnull, *args],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    m = _RATE.search(proc.stderr)
    if proc.returncode != 0 or not m:
        raise SystemExit(f"classify {' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
    return float(m.group(1))


def top1_agreement(model: Path, paths: list) -> tuple[float, float, float]:
    """(share of images whose top-1 class is the same with full and reduced-scale decoding,
    mean |Δ top-1 score| where the class agrees, full-decode top-1 score median)."""
    from edgeapp.core.vision.preprocess import load_input_tensor
    from edgeapp.hw.runtime import open_engine

    engine = open_engine(model, "cpu", probe=False)
    scale, zero = engine.input_quantization
    same, deltas, scores = 0, [], []
    for p in paths:
        outs = []
        for fast in (False, True):
            x = load_input_tensor(p, (224, 224), 3, engine.input_dtype, scale, zero,
                                  decode="scaled" if fast else "full")
            outs.append(engine.run(x)[0].reshape(-1).astype(np.int32))
        a, b = int(np.argmax(outs[0])), int(np.argmax(outs[1]))
        scores.append(outs[0][a])
        if a == b:
            same += 1
            deltas.append(abs(int(outs[0][a]) - int(outs[1][b])) / 256.0)
    return same / len(paths), float(np.mean(deltas)) if deltas else 0.0, float(np.median(scores)) / 256.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    cpu_model = SHARED / "mobilenet_v2_1.0_224_quant.tflite"
    if not cpu_model.exists():
        raise SystemExit(f"needs Coral's models in {SHARED}")

    from conftest import make_edgetpu_stand_in
    from standin import build_standin, standin_env

    from edgeapp.hw.hostinfo import usable_cores

    cores = usable_cores()
    r: dict = {"images": a.count, "cores": cores}
    with tempfile.TemporaryDirectory(prefix="edgeapp-feed-") as tmp:
        tmp = Path(tmp)
        images = tmp / "images"
        images.mkdir()
        paths = make_jpegs(images, a.count)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "EDGEAPP_CACHE_DIR": str(tmp / "cache"),
               "EDGEAPP_NO_PROGRESS": "1"}

        full, fast = decode_ms(paths, False), decode_ms(paths, True)
        r["decode_ms"] = {"full": round(full, 2), "fast": round(fast, 2)}
        r["decode_capacity_ips"] = {"full": round(cores * 1000 / full, 1), "fast": round(cores * 1000 / fast, 1)}
        r["decode_measured_ips"] = {"full": round(parallel_decode_ips(paths, False, cores), 1),
                                    "fast": round(parallel_decode_ips(paths, True, cores), 1)}
        r["loadavg_1m_start"] = round(os.getloadavg()[0], 2)

        lib = build_standin(tmp / "lib")
        compiled = make_edgetpu_stand_in(cpu_model, tmp / "mobilenet_v2_edgetpu.tflite")
        r["standin"] = {}
        for label, devices, dev_arg, extra in (
                ("1 TPU", "usb", "usb:0", ()), ("2 TPUs", "usb,usb", "all", ()),
                ("1 TPU, --decode scaled", "usb", "usb:0", ("--decode", "scaled"))):
            tenv = {**env, **standin_env(lib, devices, 0.0)}
            rate = classify_rate(compiled, images, tenv, "--device", dev_arg, *extra)
            key = "fast" if extra else "full"
            cap, measured = r["decode_capacity_ips"][key], r["decode_measured_ips"][key]
            r["standin"][label] = {"ips": rate, "share_of_decode_capacity": round(rate / cap, 3),
                                   "share_of_measured_decode": round(rate / measured, 3)}

        inv1 = invoke_ms(cpu_model, 1)
        bound = cores * 1000 / (inv1 + full)
        r["cpu"] = {"invoke_ms_1_thread": round(inv1, 2), "work_bound_ips": round(bound, 1), "runs": {}}
        for label, extra in [("default", ())] + [(f"--threads {n}", ("--threads", str(n)))
                                                 for n in range(1, cores + 1)]:
            rate = classify_rate(cpu_model, images, env, "--device", "cpu", *extra)
            r["cpu"]["runs"][label] = {"ips": rate, "share_of_bound": round(rate / bound, 3)}
        best_fixed = max(v["ips"] for k, v in r["cpu"]["runs"].items() if k != "default")
        r["cpu"]["default_vs_best_fixed"] = round(r["cpu"]["runs"]["default"]["ips"] / best_fixed, 3)

        agree, delta, median = top1_agreement(cpu_model, paths)
        r["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
        r["fast_decode"] = {"top1_agreement": round(agree, 4), "mean_abs_score_delta": round(delta, 4),
                            "median_top1_score": round(median, 3), "decode_speedup": round(full / fast, 2)}

    if a.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"{a.count} camera-size JPEGs, {cores} usable cores, load average "
          f"{r['loadavg_1m_start']} -> {r['loadavg_1m_end']}")
    print(f"decode+resize+quantize, one thread: full {full:.2f} ms, reduced-scale {fast:.2f} ms "
          f"-> capacity {r['decode_capacity_ips']['full']}/s, {r['decode_capacity_ips']['fast']}/s; "
          f"{cores} threads decoding only: {r['decode_measured_ips']['full']}/s, "
          f"{r['decode_measured_ips']['fast']}/s")
    for label, v in r["standin"].items():
        print(f"stand-in Edge TPU, zero invoke cost, {label}: {v['ips']:.1f}/s = "
              f"{v['share_of_decode_capacity']:.3f} of the capacity, "
              f"{v['share_of_measured_decode']:.3f} of the measured decode-only rate")
    print(f"CPU MobileNetV2: invoke {inv1:.2f} ms on one thread; work bound {bound:.1f}/s")
    for label, v in r["cpu"]["runs"].items():
        print(f"  {label:<12} {v['ips']:.1f}/s = {v['share_of_bound']:.3f} of the bound")
    print(f"  default ÷ best fixed --threads: {r['cpu']['default_vs_best_fixed']:.3f}")
    f = r["fast_decode"]
    print(f"reduced-scale decode: top-1 agreement {f['top1_agreement']:.4f} with full decoding, mean "
          f"|Δscore| {f['mean_abs_score_delta']:.4f}, decode {f['decode_speedup']:.2f}× faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
