#!/usr/bin/env python3
"""Multi-TPU scaling with the stand-in Edge TPU: data-parallel and pipeline, no hardware needed.

    python scripts/bench_multitpu.py [--tpus 4] [--delay-ms 5] [--runs 200] [--json]

Builds the stand-in library of the tests (tests/fake_edgetpu/fake_edgetpu.c: each invoke of the
`edgetpu-custom-op` sleeps --delay-ms, like an accelerator working while the CPU is free), makes
a compiled-looking model from models/digits_int8.tflite and a 4-segment set, and runs
`edgeapp bench` on them as a user would. With the delay dominating, the data-parallel scaling
efficiency should be close to 1 (N TPUs ≈ N× one) and the pipeline close to 1000 / delay
inferences/s whatever the number of segments; what is lost is edgeapp's own overhead (threads,
queues, the GIL between invokes) on this host.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def bench(args: list, env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "bench", *map(str, args), "-f", "json"],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"bench failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tpus", type=int, default=4)
    ap.add_argument("--delay-ms", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=200, help="timed runs per TPU")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)

    from conftest import make_edgetpu_stand_in
    from standin import IMAGE, build_standin, standin_env, write_model

    with tempfile.TemporaryDirectory(prefix="edgeapp-multitpu-") as tmp:
        tmp = Path(tmp)
        lib = build_standin(tmp)
        env = {**os.environ, **standin_env(lib, ",".join(["usb"] * a.tpus), a.delay_ms),
               "EDGEAPP_CACHE_DIR": str(tmp / "cache"), "PYTHONPATH": str(ROOT)}
        model = make_edgetpu_stand_in(ROOT / "models" / "digits_int8.tflite", tmp / "digits_edgetpu.tflite")
        tpus = ",".join(f"usb:{i}" for i in range(a.tpus))
        par = bench([model, "--device", tpus, "--runs", a.runs, "--warmup", 10], env)["parallel"]
        # a chain of a.tpus segments: image -> t1 -> ... -> scores
        chain = [IMAGE] + [(f"t{i}", (1, 32, 32, 8), "uint8", 0.05, 0) for i in range(1, a.tpus)] + \
                [("scores", (1, 10), "uint8", 1 / 256, 0)]
        for i in range(a.tpus):
            write_model(tmp / f"chain_segment_{i}_of_{a.tpus}_edgetpu.tflite", [chain[i]], [chain[i + 1]])
        pipe = bench([tmp / "chain", "--device", "all", "--runs", a.runs, "--warmup", 10], env)["pipeline"]

    report = {"delay_ms": a.delay_ms, "tpus": a.tpus, "host_cores": os.cpu_count(),
              "data_parallel": {"scaling": par["scaling"], "ideal_one_tpu_ips": round(1000 / a.delay_ms, 1)},
              "pipeline": {"throughput_ips": pipe["throughput_ips"], "bound_ips": pipe["bound_ips"],
                           "share_of_bound": pipe["share_of_bound"],
                           "ideal_ips": round(1000 / a.delay_ms, 1),
                           "per_segment_ms": [s["mean_ms"] for s in pipe["per_segment"]],
                           "bottleneck_segment": pipe["bottleneck_segment"]}}
    if a.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"stand-in Edge TPUs, {a.delay_ms:g} ms per invoke (ideal: {1000 / a.delay_ms:.1f}/s per TPU), "
          f"{os.cpu_count()} host cores")
    print(f"{'TPUs':>5} {'inf/s':>9} {'efficiency':>10} {'of ideal':>9}")
    for p in par["scaling"]:
        print(f"{p['tpus']:>5} {p['throughput_ips']:>9.1f} {p['efficiency']:>10.3f} "
              f"{p['throughput_ips'] / (p['tpus'] * 1000 / a.delay_ms):>9.3f}")
    print(f"pipeline of {a.tpus} segments: {pipe['throughput_ips']:.1f} inf/s = {pipe['share_of_bound']:.3f} "
          f"of its bottleneck's bound ({pipe['bound_ips']:.1f}/s); per segment "
          f"{', '.join(f'{m:.2f}' for m in report['pipeline']['per_segment_ms'])} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
