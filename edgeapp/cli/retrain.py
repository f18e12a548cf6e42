"""`edgeapp retrain`: teach an embedding extractor new classes from a folder of photos."""

import json
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.options import (
    CpuModelOpt,
    DeviceOpt,
    NoProbeOpt,
    PerformanceOpt,
    ReportFormat,
    ReportFormatOpt,
    RuntimeOpt,
    ThreadsOpt,
    WorkersOpt,
    finite,
    placement,
    progress_bar,
    resolved,
    say,
)
from edgeapp.errors import UsageError

app = typer.Typer()


class Method(str, Enum):
    imprint = "imprint"
    softmax = "softmax"


DataDirArg = Annotated[Path, typer.Argument(
    help="A folder with one sub-folder of photos per class (the sub-folder names are the labels).",
    show_default=False)]
BaseOpt = Annotated[Path, typer.Option(
    "--base", "-b", help="An embedding extractor: a .tflite file (its *_edgetpu.tflite build runs "
                         "on the Edge TPU) or a name from `edgeapp models list --task embed`, "
                         "e.g. mobilenet_v1_embedding.", show_default=False)]
OutputOpt = Annotated[Path, typer.Option(
    "--output", "-o", help="The classifier to write, X.tflite (a compiled base also gives "
                           "X_edgetpu.tflite), with its sidecar X.json.", show_default=False)]
MethodOpt = Annotated[Method, typer.Option(
    "--method", "-m", help="imprint: weight imprinting, for a few photos per class, in "
                           "milliseconds; softmax: softmax regression by SGD, more accurate with "
                           "more photos.")]
ValOpt = Annotated[float, typer.Option(
    "--val", min=0.0, help="Share of each class held out to score the result (0 to 0.9).")]
EpochsOpt = Annotated[int, typer.Option(
    "--epochs", min=1, help="softmax: at most this many epochs (early stopping).")]
LrOpt = Annotated[float, typer.Option(
    "--lr", help="softmax: the initial learning rate (it decays as lr / (1 + epoch / 20)).")]
L2Opt = Annotated[float, typer.Option("--l2", min=0.0, help="softmax: L2 regularization of the weights.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="softmax: the seed of the batch order.")]
NoCacheOpt = Annotated[bool, typer.Option(
    "--no-cache", help="Extract every embedding again (and cache nothing).")]


@app.command("retrain")
def retrain_command(
    ctx: typer.Context, data_dir: DataDirArg, base: BaseOpt, output: OutputOpt,
    method: MethodOpt = Method.imprint, val: ValOpt = 0.2, epochs: EpochsOpt = 300,
    lr: LrOpt = 2.0, l2: L2Opt = 1e-4, seed: SeedOpt = 0, no_cache: NoCacheOpt = False,
    fmt: ReportFormatOpt = ReportFormat.table, workers: WorkersOpt = None,
    device: DeviceOpt = None, cpu_model: CpuModelOpt = None, threads: ThreadsOpt = None,
    runtime: RuntimeOpt = None, no_probe: NoProbeOpt = False, performance: PerformanceOpt = None,
) -> None:
    """Retrain a classifier's last layer on your own classes, without TensorFlow.

    The extractor computes each photo's embedding (on the Edge TPU when usable; embeddings are
    cached, so adding photos only extracts those), a new last layer is trained on the CPU and
    written after the extractor as one .tflite that `classify`, `camera` and `bench` take.
    Unreadable photos are reported and skipped.
    """
    from edgeapp.flows.embedding_cache import EmbeddingCache
    from edgeapp.flows.open_task import open_task
    from edgeapp.flows.retrain import class_folders, retrain
    from edgeapp.hw.hostinfo import decode_workers, usable_cores
    from edgeapp.tasks.internal.embed import EMBED_TASK

    options = _options(method, val, epochs, lr, l2, seed)
    total = len(class_folders(data_dir).paths)  # refusals of the folder come before any model
    place = placement(ctx, device=device, cpu_model=cpu_model, runtime=runtime, threads=threads,
                      no_probe=no_probe, performance=performance)
    model, place = resolved(base, place)
    opened = open_task(model, EMBED_TASK, place, on_notice=say, cpu_replicas=usable_cores())
    for note in opened.notices:
        say(note)
    with opened, progress_bar(total, EMBED_TASK) as advance:
        doc = retrain(opened.runner, data_dir, output, options, workers=decode_workers(workers),
                      cache=None if no_cache else EmbeddingCache(), progress=advance,
                      on_notice=say, cpu_model=cpu_model, base_name=str(base))
    typer.echo(json.dumps(doc, indent=2) if fmt == ReportFormat.json else render_retrain(doc))
    im = doc["images"]
    say(f"{im['extracted']} embedding(s) extracted on {doc['device']}, {im['cached']} from the "
        f"cache" + (f", {im['skipped']} image(s) skipped" if im["skipped"] else "")
        + f"; wrote {', '.join(doc['models'])} and {doc['sidecar']}")


def _options(method: Method, val: float, epochs: int, lr: float, l2: float, seed: int):
    """The retrain options, checked before anything is opened."""
    from edgeapp.core.learn.train import SgdOptions
    from edgeapp.flows.retrain import RetrainOptions

    finite("--lr", lr)
    finite("--l2", l2)
    if val > 0.9:
        raise UsageError(f"--val {val}: hold out at most 0.9 of each class, so some are left to "
                         "train on")
    if lr <= 0:
        raise UsageError(f"--lr must be above 0, not {lr}")
    return RetrainOptions(method.value, val, SgdOptions(epochs=epochs, lr=lr, l2=l2, seed=seed))


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1%}"


def render_retrain(doc: dict) -> str:
    """The per-class table, the overall accuracy and the confusion matrix, for a terminal."""
    im = doc["images"]
    lines = [f"{doc['model']}: {doc['method']}, {len(doc['classes'])} classes, {im['used']} images "
             f"({im['train']} to train, {im['val']} held out)"]
    width = max([len(c) for c in doc["classes"]] + [7])
    lines.append(f"{'class'.ljust(width)}  {'train':>5}  {'val':>5}  val accuracy")
    for row in doc["per_class"]:
        lines.append(f"{row['class'].ljust(width)}  {row['train']:>5}  {row['val']:>5}  "
                     f"{_pct(row['val_accuracy'])}")
    lines.append(f"{'overall'.ljust(width)}  {im['train']:>5}  {im['val']:>5}  "
                 f"{_pct(doc['val_accuracy'])}")
    if doc["confusion"] is not None:
        lines += ["", "confusion (rows: true class, columns: predicted)"]
        lines += _matrix(doc["classes"], doc["confusion"])
    else:
        lines.append("(no images held out: --val 0)")
    return "\n".join(lines)


def _matrix(classes: List[str], cm: List[List[int]]) -> List[str]:
    short = [c[:8] for c in classes]
    cell = max([len(s) for s in short] + [len(str(v)) for row in cm for v in row] + [3])
    head = max(len(c) for c in classes)
    out = [" " * head + "  " + " ".join(s.rjust(cell) for s in short)]
    for name, row in zip(classes, cm):
        out.append(name.ljust(head) + "  " + " ".join(str(v).rjust(cell) for v in row))
    return out
