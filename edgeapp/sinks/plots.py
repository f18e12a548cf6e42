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
    """Fail before benchmarking, not after: matplotlib there, a known format, a folder to write to."""
    _pyplot()
    if Path(path).suffix.lower() not in FORMATS:
        raise UsageError(f"--plot {path}: use a .png, .svg or .pdf file name")
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise UsageError(f"--plot {path}: folder {folder} does not exist")


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
            xs = [r["threads"] for r in sweep]
            ax.plot(xs, [r["throughput_ips"] for r in sweep], "o-", label="inferences/s")
            ax.set_xlabel("CPU interpreter threads")
            ax.set_ylabel("inferences/s")
            ax.set_xticks(xs)
            ax.set_title("CPU thread sweep")
            best = [r for r in sweep if r.get("best")]
            if best:
                ax.annotate("best", (best[0]["threads"], best[0]["throughput_ips"]),
                            textcoords="offset points", xytext=(0, 8), ha="center")
        elif panel == "latency":
            labels = list(samples)
            ax.boxplot([samples[k] for k in labels], showfliers=False)
            ax.set_xticks(range(1, len(labels) + 1))
            ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
            ax.set_ylabel("latency (ms)")
            ax.set_title("latency distribution")
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
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


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
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
