"""Charts of `bench` results (matplotlib, the optional `plot` extra), drawn into a PNG/SVG/PDF.

`plot_bench`: one run: the CPU thread sweep, the latency distribution of every device (and of
the TPUs together, or of each pipeline segment), the multi-TPU scaling curve against ideal, and
the per-segment times with the bottleneck marked. `plot_runs`: saved runs (`bench --output`)
side by side, for scripts/bench_report.py. Panels without data are left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from edgeapp.errors import MissingDependency, UsageError
from edgeapp.sinks.records import check_parent_folder, make_parent_folder

FORMATS = (".png", ".svg", ".pdf")


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise MissingDependency("--plot needs matplotlib: pip install 'edgeapp[plot]'") from None
    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    return plt


def check_plot_target(path: Path) -> None:
    """Fail before benchmarking, not after: matplotlib there, a known format, a folder that
    exists or can be made (it is made when the plot is written, as `--output` makes its own)."""
    _pyplot()
    if Path(path).suffix.lower() not in FORMATS:
        raise UsageError(f"--plot {path}: use a .png, .svg or .pdf file name")
    check_parent_folder(Path(path))


def _label(r: dict) -> str:
    name = r.get("device_name") or r.get("device", "?")
    return f"{name} ({r['threads']} thr)" if r.get("threads") else name


def plot_bench(doc: dict, samples: dict, path: Path) -> Path:
    plt = _pyplot()
    cpu = [r for r in doc.get("results", []) if r.get("available") and r.get("device") == "cpu"]
    sweep = [r for r in cpu if r.get("threads")]
    par = doc.get("parallel") if (doc.get("parallel") or {}).get("available") else None
    pipe = doc.get("pipeline") if (doc.get("pipeline") or {}).get("available") else None
    panels = []
    if len(sweep) > 1:
        panels.append("sweep")
    if samples:
        panels.append("latency")
    if par:
        panels.append("scaling")
    if pipe:
        panels.append("segments")
    drifting = [r for r in doc.get("results", []) if r.get("windows")]
    if drifting:
        panels.append("windows")
    if not panels:
        raise UsageError("--plot: nothing was measured that can be drawn")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        if panel == "sweep":
            _sweep_panel(ax, sweep, doc.get("thread_sweep") or {})
        elif panel == "latency":
            latency_panel(ax, samples)
        elif panel == "scaling":
            ks = [p["tpus"] for p in par["scaling"]]
            ips = [p["throughput_ips"] for p in par["scaling"]]
            ax.plot(ks, ips, "o-", label="measured")
            ax.plot(ks, [k * ips[0] for k in ks], "--", color="gray", label="ideal (N × one TPU)")
            for k, v, p in zip(ks, ips, par["scaling"]):
                ax.annotate(f"{p['efficiency']:.2f}", (k, v), textcoords="offset points",
                            xytext=(0, 8), ha="center", fontsize=8)
            ax.set_xticks(ks)
            ax.set_xlabel("Edge TPUs")
            ax.set_ylabel("inferences/s")
            ax.set_title("data-parallel scaling (efficiency)")
            ax.legend()
        elif panel == "windows":
            _windows_panel(ax, drifting)
        else:
            segs = pipe["per_segment"]
            colors = ["tab:red" if s["bottleneck"] else "tab:blue" for s in segs]
            ax.bar([f"{s['segment']}\n{s['device']}" for s in segs],
                   [s["mean_ms"] or 0 for s in segs], color=colors)
            ax.set_ylabel("mean invoke (ms)")
            ax.set_title(f"segments: {pipe['throughput_ips']:.1f} inf/s (red: bottleneck)")
    model = doc.get("model", {})
    fig.suptitle(model.get("description") if model.get("synthetic") else Path(model.get("path", "")).name,
                 fontsize=10)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return Path(path)


def _save(fig, path: Path) -> None:
    """Into its folder, made first as `--output` makes its own."""
    make_parent_folder(Path(path))
    fig.savefig(path, dpi=100)


def _sweep_panel(ax, sweep: list, verdict: dict) -> None:
    """Each thread count's round medians (dots) and their median (the line): what chose the
    best, so a count that only looked fast in one round shows as such."""
    xs = [r["threads"] for r in sweep]
    for r in sweep:
        rounds = r.get("round_p50_ms") or [r["latency_ms"]["p50"]]
        ax.plot([r["threads"]] * len(rounds), rounds, ".", color="tab:gray", alpha=0.6)
    medians = [_median(r.get("round_p50_ms") or [r["latency_ms"]["p50"]]) for r in sweep]
    ax.plot(xs, medians, "o-", label="median of round medians")
    ax.set_xlabel("CPU interpreter threads")
    ax.set_ylabel("median latency per round (ms)")
    ax.set_xticks(xs)
    rounds = verdict.get("rounds")
    title = f"CPU thread sweep ({rounds} interleaved rounds)" if rounds else "CPU thread sweep"
    ax.set_title(title + ("\nbest within noise of the runner-up" if verdict.get("within_noise") else ""))
    for r, m in zip(sweep, medians):
        if r.get("best"):
            ax.annotate("best", (r["threads"], m), textcoords="offset points", xytext=(0, 8), ha="center")
    ax.legend(fontsize=8)


def _median(values: list) -> float:
    import numpy as np

    return float(np.median(values))


def outliers(values: list) -> int:
    """How many runs lie beyond the whiskers (1.5 × the interquartile range), as the box plot
    draws them."""
    import numpy as np

    q1, q3 = np.percentile(values, [25, 75])
    spread = 1.5 * (q3 - q1)
    return int(sum(1 for v in values if v < q1 - spread or v > q3 + spread))


def latency_panel(ax, samples: dict) -> None:
    """Every run's latency as a box per device, outliers as dots; when stalls reach far above the
    boxes (a 100 ms stall among 0.4 ms runs) the axis turns logarithmic, so boxes and every
    outlier stay visible instead of the stalls being cut off or the boxes squashed flat."""
    import numpy as np

    labels = list(samples)
    series = [list(samples[k]) for k in labels]
    ax.boxplot(series, showfliers=True, flierprops={"marker": ".", "markersize": 3, "alpha": 0.5})
    ax.set_xticks(range(1, len(labels) + 1))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("latency (ms)")
    boxes_top = max(float(np.percentile(v, 75)) for v in series)
    log = boxes_top > 0 and max(max(v) for v in series) > 10 * boxes_top and min(min(v) for v in series) > 0
    if log:
        ax.set_yscale("log")
    n = sum(outliers(v) for v in series)
    ax.set_title(f"latency of every run: {n} outlier(s) as dots" + (" (log scale)" if log else ""))


def _windows_panel(ax, results: list) -> None:
    """Warm latency per time window of --duration runs; a throttling run says so (bench's throttling check)."""
    for r in results:
        label = _label(r) + (" (throttling)" if r.get("throttling") else "")
        ax.plot([w["start_s"] for w in r["windows"]], [w["p50_ms"] for w in r["windows"]], "o-", label=label)
    ax.set_xlabel("seconds into the timed run")
    ax.set_ylabel("p50 latency per window (ms)")
    ax.set_title("latency drift (throttling: > 15% or past trip point 0)")
    ax.legend(fontsize=8)


def run_label(doc: dict, index: int) -> str:
    host = (doc.get("host") or {}).get("cpu") or "?"
    model = doc.get("model", {})
    name = "synthetic" if model.get("synthetic") else Path(model.get("path", "?")).name
    name = name if len(name) <= 22 else name[:20] + "…"
    return f"#{index} {name}\n{host[:22]}"


def plot_runs(docs: list, path: Path, title: Optional[str] = None) -> Path:
    """Saved runs side by side: inferences/s of every device (and of the TPUs together, or
    the pipeline) per run; with multi-TPU runs, their scaling curves on one chart."""
    plt = _pyplot()
    curves = [(i, d["parallel"]) for i, d in enumerate(docs, 1)
              if (d.get("parallel") or {}).get("available")]
    fig, axes = plt.subplots(1, 2 if curves else 1, figsize=(12 if curves else 8, 4.5), squeeze=False)
    ax = axes[0][0]
    x, ticks, ticklabels = 0.0, [], []
    for i, doc in enumerate(docs, 1):
        bars = [(_label(r), r["throughput_ips"]) for r in doc.get("results", []) if r.get("available")]
        for key, what in (("parallel", "together"), ("pipeline", "pipeline")):
            section = doc.get(key) or {}
            if section.get("available"):
                bars.append((f"{len(section['devices'])} TPUs {what}", section["throughput_ips"]))
        start = x
        for label, value in bars:
            ax.bar(x, value, width=0.8)
            ax.annotate(label, (x, value), rotation=90, fontsize=7, ha="center", va="bottom",
                        textcoords="offset points", xytext=(0, 2))
            x += 1
        if bars:
            ticks.append((start + x - 1) / 2)
            ticklabels.append(run_label(doc, i))
        x += 1
    ax.set_xticks(ticks)
    ax.set_xticklabels(ticklabels, fontsize=8)
    ax.set_ylabel("inferences/s")
    ax.set_title(title or "bench runs side by side")
    ax.margins(y=0.25)
    if curves:
        ax2 = axes[0][1]
        for i, par in curves:
            ks = [p["tpus"] for p in par["scaling"]]
            ax2.plot(ks, [p["efficiency"] for p in par["scaling"]], "o-", label=f"run #{i}")
        ax2.axhline(1.0, color="gray", linestyle="--")
        ax2.set_xticks(sorted({p["tpus"] for _, par in curves for p in par["scaling"]}))
        ax2.set_xlabel("Edge TPUs")
        ax2.set_ylabel("scaling efficiency")
        ax2.set_title("data-parallel scaling")
        ax2.legend()
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return Path(path)
