"""What `eval` writes besides its table: each model's predictions (`--save-predictions DIR`) and
the plot of every model's results (`--plot FILE`, matplotlib: the `plot` extra).

Predictions: `DIR/<model file stem>.json`, a COCO results list for detection and pose (anyone
can recompute the metrics with pycocotools, or `eval --predictions` on any machine), else
`.jsonl`, one line per image. Each file is written whole or not at all (a temporary file
renamed), as the umask allows any file, as soon as its model is measured.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import List, Sequence, Tuple

from edgeapp.core.naming import distinct_names
from edgeapp.errors import UsageError
from edgeapp.sinks.plots import _pyplot

COCO_KINDS = ("detection", "keypoints")  # data whose predictions are a COCO results list


def check_folder(folder: Path) -> None:
    """--save-predictions: a folder that exists or can be made, checked before any run but
    made only when the first file is written (a run that stops before leaves nothing)."""
    if folder.exists():
        if not folder.is_dir():
            raise UsageError(f"--save-predictions {folder}: not a folder")
        if not os.access(folder, os.W_OK):
            raise UsageError(f"--save-predictions {folder}: not writable")
        return
    parent = folder.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--save-predictions {folder}: cannot make the folder ({parent} is not "
                         "a writable folder)")


def prediction_paths(folder: Path, models: Sequence[str], kind: str) -> List[Path]:
    """One file per model, by its file's stem; models whose stems clash are told apart by
    their suffix, else their folders (`a/m.tflite`, `b/m.tflite`: a_m.json, b_m.json)."""
    ext = ".json" if kind in COCO_KINDS else ".jsonl"
    names = distinct_names(models)
    stems = [str(Path(n.partition(" #")[0]).with_suffix("")) + n.partition(" #")[1] +
             n.partition(" #")[2] for n in names]  # the same file twice: m, m #2
    stems = [n.replace(".", "_") if stems.count(s) > 1 else s for n, s in zip(names, stems)]
    return [folder / (re.sub(r"[/ #]+", "_", s) + ext) for s in stems]


def write_predictions(path: Path, rows: List[dict], kind: str) -> Path:
    if kind in COCO_KINDS:
        text = json.dumps(rows)
    else:
        text = "".join(json.dumps(r) + "\n" for r in rows)
    _write_whole(path, text)
    return path


def _write_whole(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{path.parent}: cannot make the folder ({e.strerror})") from None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 is for secrets; these are results
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp) if os.path.exists(tmp) else None
        raise UsageError(f"{path}: cannot write it ({e.strerror})") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def plot_eval(path: Path, plots: List[Tuple[str, dict]]) -> Path:
    """Precision-recall curves per model at IoU 0.5 (detection), a confusion matrix per model
    (classification), per-class IoU bars (segmentation); one panel per model."""
    plt = _pyplot()
    drawn = [(name, p) for name, p in plots if p.get("kind")]
    if not drawn:
        raise UsageError("--plot: these results have nothing to plot (pose: OKS AP only)")
    fig, axes = plt.subplots(1, len(drawn), figsize=(5.5 * len(drawn), 4.8), squeeze=False)
    for ax, (name, p) in zip(axes[0], drawn):
        _PANELS[p["kind"]](ax, p)
        ax.set_title(name, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pr(ax, p: dict) -> None:
    import numpy as np

    recall = np.linspace(0, 1, 101)
    for name, precision in p["curves"].items():
        ax.plot(recall, precision, label=name)
    ax.set(xlabel="recall", ylabel="precision (IoU 0.5)", xlim=(0, 1), ylim=(0, 1.02))
    if p["curves"]:
        ax.legend(fontsize=7, loc="lower left")


def _confusion(ax, p: dict) -> None:
    matrix = p["matrix"]
    ax.imshow(matrix, cmap="Blues")
    if len(p["names"]) <= 20:
        ax.set_xticks(range(len(p["names"])), p["names"], rotation=90, fontsize=7)
        ax.set_yticks(range(len(p["names"])), p["names"], fontsize=7)
    ax.set(xlabel="predicted", ylabel="true")


def _iou(ax, p: dict) -> None:
    names = list(p["per_class"])
    ax.barh(range(len(names)), [p["per_class"][n] for n in names])
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set(xlabel="IoU", xlim=(0, 1))


_PANELS = {"pr": _pr, "confusion": _confusion, "iou": _iou}
