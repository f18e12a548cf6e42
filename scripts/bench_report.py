#!/usr/bin/env python3
"""Compare `edgeapp bench --output FILE` runs: one row per (run, device, threads).

    python scripts/bench_report.py runs.jsonl [more.jsonl ...] [--markdown] [--plot runs.png]

Reads the JSON lines `bench --output` appends and prints warm mean/p99 latency, throughput,
achieved TOPS and TOPS/W side by side, so runs on different machines or days can be compared.
Runs on several Edge TPUs add a row for the TPUs together (with the scaling efficiency) and
segment pipelines a row with the bottleneck segment. --plot draws the runs side by side
(matplotlib: pip install 'edgeapp[plot]').
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
        device = r.get("device_name") or r.get("device", "?")
        if not r.get("available"):
            out.append([name, cpu, device, "-", "unavailable", "", "", "", "", "", ""])
            continue
        lat = r["latency_ms"]
        watts = f"{r['power_w']:.2f} ({r['power_source']})" if r.get("power_w") else r["power_source"]
        out.append([name, cpu, device, str(r["threads"] or "def"), f"{r['first_ms']:.2f}",
                    f"{lat['mean']:.2f}", f"{lat['p99']:.2f}", f"{r['throughput_ips']:.1f}",
                    f"{r['tops']:.4f}" if r.get("tops") else "-",
                    watts, f"{r['tops_per_watt']:.4f}" if r.get("tops_per_watt") else "-"])
    par = doc.get("parallel") or {}
    if par.get("available"):
        lat = par["latency_ms"]
        out.append([name, cpu, f"{'+'.join(par['devices'])} (efficiency {par['scaling_efficiency']:.2f})",
                    "-", "-", f"{lat['mean']:.2f}", f"{lat['p99']:.2f}", f"{par['throughput_ips']:.1f}",
                    "", "", ""])
    pipe = doc.get("pipeline") or {}
    if pipe.get("available"):
        e2e = pipe["end_to_end_ms"]
        out.append([name, cpu, f"pipeline {'+'.join(pipe['devices'])} (bottleneck segment "
                               f"{pipe['bottleneck_segment']})", "-", "-", f"{e2e['mean']:.2f}",
                    f"{e2e['p99']:.2f}", f"{pipe['throughput_ips']:.1f}", "", "", ""])
    return out


def read_runs(files: list[Path]) -> list[dict]:
    docs = []
    for f in files:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
                rows(doc)  # a line we cannot show is skipped, not half-shown
            except (ValueError, KeyError, TypeError) as e:
                print(f"{f}:{n}: skipped ({e})", file=sys.stderr)
                continue
            docs.append(doc)
    return docs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--plot", type=Path, metavar="FILE.png", help="draw the runs side by side")
    args = ap.parse_args(argv)
    docs = read_runs(args.files)
    table = [list(COLUMNS)]
    for doc in docs:
        table += rows(doc)
    if args.plot is not None:
        from edgeapp.errors import EdgeappError
        from edgeapp.sinks.plots import check_plot_target, plot_runs

        try:
            check_plot_target(args.plot)
            plot_runs(docs, args.plot)
        except EdgeappError as e:
            print(f"bench_report: {e}", file=sys.stderr)
            return 2
        print(f"bench_report: plot written to {args.plot}", file=sys.stderr)
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
