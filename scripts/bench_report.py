#!/usr/bin/env python3
"""Compare `edgeapp bench --output FILE` runs: one row per (run, device, threads).

    python scripts/bench_report.py runs.jsonl [more.jsonl ...] [--markdown]

Reads the JSON lines `bench --output` appends and prints warm mean/p99 latency, throughput,
achieved TOPS and TOPS/W side by side, so runs on different machines or days can be compared.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

COLUMNS = ("model", "cpu", "device", "threads", "first ms", "mean ms", "p99 ms", "inf/s", "TOPS",
           "W (source)", "TOPS/W")


def rows(doc: dict) -> list[list[str]]:
    model = doc.get("model", {})
    name = "synthetic" if model.get("synthetic") else Path(model.get("path", "?")).name
    cpu = (doc.get("host") or {}).get("cpu") or "?"
    out = []
    for r in doc.get("results", []):
        if not r.get("available"):
            out.append([name, cpu, r.get("device", "?"), "-", "unavailable", "", "", "", "", "", ""])
            continue
        lat = r["latency_ms"]
        watts = f"{r['power_w']:.2f} ({r['power_source']})" if r.get("power_w") else r["power_source"]
        out.append([name, cpu, r["device"], str(r["threads"] or "def"), f"{r['first_ms']:.2f}",
                    f"{lat['mean']:.2f}", f"{lat['p99']:.2f}", f"{r['throughput_ips']:.1f}",
                    f"{r['tops']:.4f}" if r.get("tops") else "-",
                    watts, f"{r['tops_per_watt']:.4f}" if r.get("tops_per_watt") else "-"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)
    table = [list(COLUMNS)]
    for f in args.files:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                table += rows(json.loads(line))
            except (ValueError, KeyError, TypeError) as e:
                print(f"{f}:{n}: skipped ({e})", file=sys.stderr)
    if args.markdown:
        print("| " + " | ".join(table[0]) + " |")
        print("|" + "---|" * len(table[0]))
        for row in table[1:]:
            print("| " + " | ".join(row) + " |")
        return 0
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
