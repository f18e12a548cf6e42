#!/usr/bin/env python3
"""Cost of containment (hw/probe.py): the first-time model check in a child, and a cache hit.

    python scripts/bench_containment.py [MODEL] [--repeat N]

Each first-time check gets a fresh cache directory; reports median and spread for the fork
child (the default on Linux) and the spawned `python -I` child (EDGEAPP_PROBE_SPAWN=1).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT.parent / "shared" / "coral" / "mobilenet_v2_1.0_224_quant.tflite"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", type=Path, default=DEFAULT)
    p.add_argument("--repeat", type=int, default=10)
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from edgeapp.hw import child, probe
    from edgeapp.hw.runtime import find_runtime

    rt = find_runtime()
    print(f"{a.model.name} ({a.model.stat().st_size / 1e6:.1f} MB), {rt.name} {rt.version}, "
          f"{os.cpu_count()} cores")
    rows = []
    for mode in ("fork", "spawn"):
        os.environ[child.SPAWN_ENV] = "1" if mode == "spawn" else "0"
        first, hits = [], []
        for _ in range(a.repeat + 1):  # the first round warms the page cache
            with tempfile.TemporaryDirectory() as cache:
                os.environ["EDGEAPP_CACHE_DIR"] = cache
                t0 = time.perf_counter()
                probe.ensure_model_runs(rt, str(a.model))
                t1 = time.perf_counter()
                probe.ensure_model_runs(rt, str(a.model))
                t2 = time.perf_counter()
            first.append(t1 - t0)
            hits.append(t2 - t1)
        first, hits = first[1:], hits[1:]
        rows.append((mode, first, hits))
    print(f"{'child':>6} | first check: median (min-max)  | cache hit: median (min-max)")
    for mode, first, hits in rows:
        print(f"{mode:>6} | {statistics.median(first) * 1e3:7.0f} ms ({min(first) * 1e3:.0f}-"
              f"{max(first) * 1e3:.0f}) | {statistics.median(hits) * 1e3:7.2f} ms "
              f"({min(hits) * 1e3:.2f}-{max(hits) * 1e3:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
