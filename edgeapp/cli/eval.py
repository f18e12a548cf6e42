"""`edgeapp eval`: models measured on the same labelled data, in the task's own metric."""

from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli import options as shared
from edgeapp.cli.options import ReportFormat, ReportFormatOpt, say
from edgeapp.errors import ExitCode

app = typer.Typer()

ModelsArg = Annotated[List[str], typer.Argument(
    metavar="MODEL...", show_default=False,
    help="Models to compare, the first the reference: an int8 .tflite, its *_edgetpu.tflite, "
         "a Coral model's name, or a float .onnx/.keras source (run on ONNX Runtime/TensorFlow "
         "with the preprocessing of its conversion).")]
DataOpt = Annotated[Path, typer.Option(
    "--data", metavar="DATA", show_default=False,
    help="Labelled data: class folders or a path,label CSV (classify); a COCO JSON or a YOLO "
         "data.yaml / images+labels folder (detect); images+masks folders (segment); a COCO "
         "person-keypoints JSON (pose). See docs/eval.md.")]
ImagesOpt = Annotated[Optional[Path], typer.Option(
    "--images", metavar="DIR", show_default=False,
    help="Where a COCO JSON's images are. Default: beside it, or its images/ folder.")]
SaveOpt = Annotated[Optional[Path], typer.Option(
    "--save-predictions", metavar="DIR", show_default=False,
    help="Write each model's predictions to DIR/<model stem>.json (a COCO results list for "
         "detection and pose) or .jsonl (one line per image).")]
PlotOpt = Annotated[Optional[Path], typer.Option(
    "--plot", metavar="FILE", show_default=False,
    help="Draw precision-recall curves (detect), confusion matrices (classify) or per-class IoU "
         "(segment) into a .png/.svg/.pdf (pip install 'edgeapp[plot]').")]


@app.command("eval")
def eval_command(
    ctx: typer.Context,
    models: ModelsArg,
    data: DataOpt,
    images: ImagesOpt = None,
    labels: shared.LabelsOpt = None,
    mean: shared.MeanOpt = None,
    std: shared.StdOpt = None,
    fmt: ReportFormatOpt = ReportFormat.table,
    save_predictions: SaveOpt = None,
    plot: PlotOpt = None,
    workers: shared.WorkersOpt = None,
    device: shared.DeviceOpt = None,
    threads: shared.ThreadsOpt = None,
    cpu_kernels: shared.CpuKernelsOpt = shared.CpuKernels.fast,
    runtime: shared.RuntimeOpt = None,
    no_probe: shared.NoProbeOpt = False,
    tiles: Annotated[Optional[str], typer.Option(
        "--tiles", metavar="COLSxROWS[:OVERLAP]",
        help="Detection: measure with the model run on overlapping windows of each image and "
             "once on the whole, boxes merged (as `detect --tiles`), to see what it gains on "
             "small objects.", show_default=False)] = None,
) -> None:
    """Measure models on labelled data: top-1/top-5, COCO mAP, mIoU or OKS AP, side by side.

    Every MODEL runs on the same images through the pipeline `classify`/`detect` run (decoding
    ahead), with the task's evaluation settings (detection: every box above 0.001, up to 300
    per image). One table (or --format json): each model's metrics, the difference from the
    first, images/s, median latency and where it ran. An image that cannot be decoded is left
    out of the metrics (said, counted) and the exit code is 3.
    """
    shared.check_common({}, model=None, mean=mean, std=std, device=device, cpu_model=None,
                        labels=labels)
    place = shared.placement(ctx, device=device, runtime=runtime, threads=threads,
                             no_probe=no_probe, cpu_kernels=cpu_kernels)
    run_eval(models, place, data, images, labels, mean, std, fmt, save_predictions, plot, workers,
             task_options={"tiles": tiles} if tiles else None)


def run_eval(models: List[str], place, data: Path, images: Optional[Path],
             labels: Optional[Path], mean: Optional[float], std: Optional[float], fmt: ReportFormat,
             save: Optional[Path], plot: Optional[Path], workers: Optional[int],
             published: Optional[dict] = None, task_options: Optional[dict] = None) -> None:
    """The body of `eval` (and `models eval`, which adds what Coral `published`): `place`
    (flows.open_task.Placement) is where every model runs."""
    from edgeapp.flows.evaluate import evaluate_models, read_data, refuse_unknown, report
    from edgeapp.hw.hostinfo import decode_workers

    found = read_data(data, images)
    say(f"found {found.describe()}")
    for note in found.notes:
        say(f"note: {note}")
    refuse_unknown(models, found)
    _check_outputs(save, plot)
    pairs = [shared.resolved(Path(m), place) for m in models]  # a Coral name pulled, with a bar
    results = evaluate_models(
        [str(p) for p, _ in pairs], found, place, places=[pl for _, pl in pairs],
        labels_file=labels, mean=mean, std=std, workers=decode_workers(workers), say=say,
        progress=shared.progress_bar, task_options=task_options)
    _write_outputs(found, models, results, save, plot)
    doc = report(found, results)
    if published:
        doc["published"] = published
    if fmt == ReportFormat.json:
        import json

        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(render(doc))
    if any(r.entry["failed"] for r in results):
        raise typer.Exit(int(ExitCode.INPUTS_FAILED))


def _check_outputs(save: Optional[Path], plot: Optional[Path]) -> None:
    if save is not None:
        from edgeapp.sinks.eval_files import check_folder

        check_folder(save)
    if plot is not None:
        from edgeapp.sinks.plots import check_plot_target

        check_plot_target(plot)


def _write_outputs(found, models: List[str], results: list, save: Optional[Path],
                   plot: Optional[Path]) -> None:
    from edgeapp.sinks.eval_files import plot_eval, prediction_paths, write_predictions

    if save is not None:
        paths = prediction_paths(save, [r.entry["model"] for r in results], found.kind)
        for path, r in zip(paths, results):
            write_predictions(path, r.scorer.predictions(), found.kind)
        say(f"predictions in {', '.join(str(p) for p in paths)}")
    if plot is not None:
        plot_eval(plot, [(Path(r.entry["model"]).name, getattr(r.scorer, "plot", {}))
                         for r in results])
        say(f"plot in {plot}")


# The metrics a table shows first, per data kind (the JSON has every one).
MAIN = ("map", "map50", "top1", "top5", "miou", "pixel_accuracy", "oks_ap", "oks_ap50")


def render(doc: dict) -> str:
    """One row per model: its main metrics (and their difference from the first), speed, where."""
    entries = doc["models"]
    keys = [k for k in MAIN if any(k in e["metrics"] for e in entries)]
    head = ["model"] + keys + ["images", "images/s", "median ms", "runs on"]
    rows = [head]
    for n, e in enumerate(entries):
        cells = [Path(e["model"]).name]
        for k in keys:
            v = e["metrics"].get(k)
            d = e.get("delta", {}).get(k)
            cells.append("-" if v is None else f"{v:.4f}" + (f" ({d:+.4f})" if n and d is not None else ""))
        failed = f" ({e['failed']} left out)" if e["failed"] else ""
        median = "-" if e["median_ms"] is None else f"{e['median_ms']:.2f}"
        cells += [f"{e['images']}{failed}", f"{e['images_per_s']:.1f}", median, e["runs_on"]]
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    if doc.get("published"):
        pub = doc["published"]
        lines.append("published by Coral: " + ", ".join(
            f"{k} {v:.3f}" for k, v in pub.items() if k != "source") + f" ({pub.get('source')})")
    for e in entries:
        per = e["metrics"].get("per_class")
        if per and len(per) <= 20:
            lines.append(f"{Path(e['model']).name} per class: " +
                         ", ".join(f"{k} {v:.3f}" for k, v in per.items()))
    return "\n".join(lines)
