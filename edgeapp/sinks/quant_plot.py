"""The picture of `convert --report`: SQNR per layer in graph order, the worst ones named.

matplotlib (the optional `plot` extra) is imported only when a plot is drawn; without it the
report's table and JSON are still written and the plot is skipped with one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from edgeapp.errors import MissingDependency

WORST_NAMED = 5


def plot_layers(layers: list, path: Path, title: str = "") -> Optional[Path]:
    """Bars of SQNR (dB) per layer in graph order (`index`), low = lossy, the worst named and
    red; a line at 30 dB. Returns the file, or raises MissingDependency without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        raise MissingDependency("the report's plot needs matplotlib: pip install 'edgeapp[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((r for r in layers if r.get("sqnr_db") is not None), key=lambda r: r["index"])
    worst = {id(r) for r in sorted(rows, key=lambda r: r["sqnr_db"])[:WORST_NAMED]}
    fig, ax = plt.subplots(figsize=(max(6.0, 0.22 * len(rows) + 2), 4.2))
    xs = list(range(len(rows)))
    colors = ["#d62728" if id(r) in worst else "#1f77b4" for r in rows]
    ax.bar(xs, [r["sqnr_db"] for r in rows], color=colors)
    ax.axhline(30.0, color="grey", linestyle="--", linewidth=0.8)
    for x, r in zip(xs, rows):
        if id(r) in worst:
            ax.annotate(_short(r), (x, r["sqnr_db"]), textcoords="offset points", xytext=(0, 4),
                        ha="center", fontsize=7, rotation=60)
    ax.set_xticks(xs)
    ax.set_xticklabels([r["op"] for r in rows], rotation=90, fontsize=6)
    ax.set_ylabel("SQNR float vs int8 (dB)")
    ax.set_title(title or "Quantization error per layer (higher is better)", fontsize=10)
    ax.set_ylim(bottom=min(0.0, min((r["sqnr_db"] for r in rows), default=0.0)))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _short(row: dict) -> str:
    name = row.get("source") or row["name"].split(";")[0]
    return name if len(name) <= 28 else "…" + name[-27:]
