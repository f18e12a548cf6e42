"""The picture of `convert --report`: SQNR per layer in graph order, the worst ones named.

matplotlib (the optional `plot` extra) is imported only when a plot is drawn; without it the
report's table and JSON are still written and the plot is skipped with one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from edgeapp.errors import MissingDependency

WORST_NAMED = 5
CAP_DB = 80.0  # above this the error is negligible: bars are cut so the low ones stay readable


def plot_layers(layers: list, path: Path, title: str = "") -> Optional[Path]:
    """Bars of SQNR (dB) per layer in graph order (`index`), low = lossy, with the output's SQNR
    the layer causes (diamonds, where measured); the layers with a cause (else the worst) named
    and red; a line at 30 dB. Returns the file; MissingDependency
    without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        raise MissingDependency("the report's plot needs matplotlib: pip install 'edgeapp[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((r for r in layers if r.get("sqnr_db") is not None), key=lambda r: r["index"])
    flagged = [r for r in rows if r.get("cause")] or sorted(rows, key=_harm)[:1]
    worst = {id(r) for r in sorted(flagged, key=_harm)[:WORST_NAMED]}
    top = min(max((r["sqnr_db"] for r in rows), default=60.0) + 5, CAP_DB)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.22 * len(rows) + 2), 4.2))
    xs = list(range(len(rows)))
    colors = ["#d62728" if id(r) in worst else "#1f77b4" for r in rows]
    ax.bar(xs, [min(r["sqnr_db"], top) for r in rows], color=colors)
    harmed = [(x, r["output_sqnr_db"]) for x, r in zip(xs, rows) if r.get("output_sqnr_db") is not None]
    if harmed:
        ax.scatter([x for x, _ in harmed], [min(v, top) for _, v in harmed], marker="D", s=14, color="black",
                   zorder=3, label="the output's SQNR, what this layer adds")
        ax.legend(fontsize=7, loc="upper right")
    ax.axhline(30.0, color="grey", linestyle="--", linewidth=0.8)
    for x, r in zip(xs, rows):
        if id(r) in worst:
            ax.annotate(f"{_short(r)} ({r['sqnr_db']:.0f} dB)", (x, min(r["sqnr_db"], top)),
                        textcoords="offset points", xytext=(0, 4), ha="left", fontsize=7, rotation=45)
    ax.set_xticks(xs)
    ax.set_xticklabels([r["op"] for r in rows], rotation=90, fontsize=6)
    ax.set_ylabel(f"SQNR float vs int8 (dB, cut at {top:.0f})")
    ax.set_title(title or "Quantization error per layer (higher is better)", fontsize=10)
    ax.set_ylim(min(0.0, min((r["sqnr_db"] for r in rows), default=0.0)), top * 1.25)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _harm(row: dict) -> float:
    """The rank of `--report`: harm at the output when measured, else the layer's own SQNR."""
    out = row.get("output_sqnr_db")
    return out if out is not None else row["sqnr_db"]


def _short(row: dict) -> str:
    name = row.get("source") or row["name"].split(";")[0]
    return name if len(name) <= 28 else "…" + name[-27:]
