"""`edgeapp eval`: models measured on the same labelled data, in the task's own metric."""

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Sequence

import typer
from typing_extensions import Annotated

from edgeapp.cli import options as shared
from edgeapp.cli.options import Interrupted, ReportFormat, ReportFormatOpt, say
from edgeapp.core.naming import distinct_names
from edgeapp.errors import ExitCode, MissingDependency, UsageError, is_interrupt

app = typer.Typer()

ModelsArg = Annotated[Optional[List[str]], typer.Argument(
    metavar="[MODEL]...", show_default=False,
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
    help="Where a COCO JSON's images are: each image is DIR/<its file_name>. Default: beside "
         "the JSON, or its images/ folder.")]
SaveOpt = Annotated[Optional[Path], typer.Option(
    "--save-predictions", metavar="DIR", show_default=False,
    help="Write each model's predictions to DIR/<model stem>.json (a COCO results list for "
         "detection and pose) or .jsonl (one line per image), as each model finishes.")]
PredictionsOpt = Annotated[Optional[List[Path]], typer.Option(
    "--predictions", metavar="FILE", show_default=False,
    help="Measure saved predictions instead of models: a COCO results list --save-predictions "
         "wrote (detection, pose), e.g. on a Coral Dev Board, whose Python has no COCO "
         "evaluator. Repeat for several.")]
PlotOpt = Annotated[Optional[Path], typer.Option(
    "--plot", metavar="FILE", show_default=False,
    help="Draw precision-recall curves (detect), confusion matrices (classify) or per-class IoU "
         "(segment) into a .png/.svg/.pdf (pip install 'edgeapp[plot]').")]

if TYPE_CHECKING:
    from edgeapp.flows.evaluate import ModelEval, Progress


@app.command("eval")
def eval_command(
    ctx: typer.Context,
    data: DataOpt,
    models: ModelsArg = None,
    images: ImagesOpt = None,
    labels: shared.LabelsOpt = None,
    mean: shared.MeanOpt = None,
    std: shared.StdOpt = None,
    fmt: ReportFormatOpt = ReportFormat.table,
    save_predictions: SaveOpt = None,
    plot: PlotOpt = None,
    predictions: PredictionsOpt = None,
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
    out of the metrics (said, counted) and the exit code is 3. `--predictions FILE` measures
    predictions a run saved instead (made where no COCO evaluator installs, as a Coral Dev
    Board).
    """
    shared.check_common({}, model=None, mean=mean, std=std, device=device, cpu_model=None,
                        labels=labels)
    if tiles:  # a bad value is one line before the data is read and the models open
        from edgeapp.core.vision.tiles import parse_tiles

        try:
            parse_tiles(tiles)
        except ValueError as e:
            raise UsageError(str(e)) from None
    place = shared.placement(ctx, device=device, runtime=runtime, threads=threads,
                             no_probe=no_probe, cpu_kernels=cpu_kernels)
    run_eval(models or [], place, data, images, labels, mean, std, fmt, save_predictions, plot,
             workers, predictions=predictions or [],
             task_options={"tiles": tiles} if tiles else None)


def run_eval(models: List[str], place, data: Path, images: Optional[Path],
             labels: Optional[Path], mean: Optional[float], std: Optional[float], fmt: ReportFormat,
             save: Optional[Path], plot: Optional[Path], workers: Optional[int],
             published: Optional[dict] = None, predictions: Sequence[Path] = (),
             progress: "Progress" = shared.progress_bar, task_options: Optional[dict] = None) -> None:
    """The body of `eval` (and `models eval`, which adds what Coral `published`): `place`
    (flows.open_task.Placement) is where every model runs; `predictions`: saved predictions
    measured instead of models. Each model's predictions are written as it finishes; Ctrl-C
    prints the table of the models finished (exit 130)."""
    from edgeapp.core.eval.coco import INSTALL, OLDEST, available, missing
    from edgeapp.flows.evaluate import needs_coco, read_data, refuse_unknown, score_saved

    if bool(models) == bool(predictions):
        raise UsageError("give the MODELs to measure, or --predictions FILE (saved predictions), "
                         "not both" if models else "give at least one MODEL (or --predictions FILE)")
    if predictions and save is not None:
        raise UsageError("--save-predictions is for MODELs: --predictions files are already saved")
    found = read_data(data, images)
    say(f"found {found.describe()}")
    for note in found.notes:
        say(f"note: {note}")
    measure = not needs_coco(found) or available()
    if predictions:
        results = score_saved(predictions, found, labels)
    else:
        refuse_unknown(models, found)
        if not measure and (save is None or plot is not None):
            raise MissingDependency(missing())  # before any folder is made or model run
        _check_outputs(save, plot)
        results = _run_models(models, place, found, labels, mean, std, fmt, save, workers,
                              measure, progress, published, task_options)
    if plot is not None:
        from edgeapp.sinks.eval_files import plot_eval

        names = distinct_names([r.entry["model"] for r in results])
        plot_eval(plot, [(n, getattr(r.scorer, "plot", {})) for n, r in zip(names, results)])
        say(f"plot in {plot}")
    _print(found, results, fmt, published)
    if not measure:
        say("predictions only, no metrics: no COCO evaluator here (faster-coco-eval or "
            f"pycocotools); measure them where one installs (Python {OLDEST[0]}.{OLDEST[1]}+, "
            f"{INSTALL}) with `edgeapp eval --predictions {save}/<model>.json --data DATA`")
    if any(r.entry["failed"] for r in results):
        raise typer.Exit(int(ExitCode.INPUTS_FAILED))


def _run_models(models: List[str], place, found, labels: Optional[Path], mean: Optional[float],
                std: Optional[float], fmt: ReportFormat, save: Optional[Path],
                workers: Optional[int], measure: bool, progress: "Progress",
                published: Optional[dict], task_options: Optional[dict]) -> list:
    """Every model measured in turn; each one's predictions written when it is done. Ctrl-C:
    the finished models' table, and what was kept."""
    from edgeapp.flows.evaluate import evaluate_models
    from edgeapp.hw.hostinfo import decode_workers
    from edgeapp.sinks.eval_files import prediction_paths, write_predictions

    pairs = [shared.resolved(Path(m), place) for m in models]  # a Coral name pulled, with a bar
    paths = prediction_paths(save, [str(p) for p, _ in pairs], found.kind) if save else []
    done: list = []

    def finished(n: int, result: "ModelEval") -> None:
        if save is not None:
            write_predictions(paths[n], result.scorer.predictions(), found.kind)
        done.append(result)

    try:
        evaluate_models([str(p) for p, _ in pairs], found, place, places=[pl for _, pl in pairs],
                        labels_file=labels, mean=mean, std=std, workers=decode_workers(workers),
                        say=say, progress=progress, on_done=finished, measure=measure,
                        task_options=task_options)
    except KeyboardInterrupt:
        raise Interrupted(_kept(found, done, models, paths, fmt, published)) from None
    except Exception as e:  # noqa: BLE001 - only what Ctrl-C caused is turned into Interrupted
        if not is_interrupt(e):
            raise
        raise Interrupted(_kept(found, done, models, paths, fmt, published)) from None
    if save is not None:
        say(f"predictions in {', '.join(str(p) for p in paths)}")
    return done


def _kept(found, done: list, models: List[str], paths: List[Path], fmt: ReportFormat,
          published: Optional[dict]) -> str:
    """Ctrl-C in a run of several models: the finished ones' table printed; what was kept."""
    if not done:
        return f"no model finished (of {len(models)})"
    _print(found, done, fmt, published)
    names = distinct_names([r.entry["model"] for r in done])
    kept = f"; their predictions in {', '.join(str(p) for p in paths[:len(done)])}" if paths else ""
    return f"{len(done)} of {len(models)} models finished ({', '.join(names)}){kept}"


def _print(found, results: list, fmt: ReportFormat, published: Optional[dict]) -> None:
    from edgeapp.flows.evaluate import report

    doc = report(found, results)
    if published:
        doc["published"] = published
    if fmt == ReportFormat.json:
        import json

        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(render_eval(doc))


def _check_outputs(save: Optional[Path], plot: Optional[Path]) -> None:
    if save is not None:
        from edgeapp.sinks.eval_files import check_folder

        check_folder(save)
    if plot is not None:
        from edgeapp.sinks.plots import check_plot_target

        check_plot_target(plot)


# The metrics a table shows first, per data kind (the JSON has every one).
MAIN = ("map", "map50", "top1", "top5", "miou", "pixel_accuracy", "oks_ap", "oks_ap50",
        "map_model_classes", "top1_model_classes")  # the last: without data classes the model lacks


def render_eval(doc: dict) -> str:
    """One row per model: its main metrics (and their difference from the first), speed, where."""
    entries = doc["models"]
    names = distinct_names([e["model"] for e in entries])
    keys = [k for k in MAIN if any(k in e["metrics"] for e in entries)]
    head = ["model"] + keys + ["images", "images/s", "median ms", "runs on"]
    rows = [head]
    for n, e in enumerate(entries):
        cells = [names[n]]
        for k in keys:
            v = e["metrics"].get(k)
            d = e.get("delta", {}).get(k)
            cells.append("-" if v is None else f"{v:.4f}" + (f" ({d:+.4f})" if n and d is not None else ""))
        failed = f" ({e['failed']} left out)" if e["failed"] else ""
        median = "-" if e["median_ms"] is None else f"{e['median_ms']:.2f}"
        rate = "-" if e["images_per_s"] is None else f"{e['images_per_s']:.1f}"
        cells += [f"{e['images']}{failed}", rate, median, e["runs_on"]]
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    if doc.get("published"):
        pub = doc["published"]
        lines.append("published by Coral: " + ", ".join(
            f"{k} {v:.3f}" for k, v in pub.items() if k != "source") + f" ({pub.get('source')})")
    for name, e in zip(names, entries):
        per = e["metrics"].get("per_class")
        if per and len(per) <= 20:
            lines.append(f"{name} per class: " +
                         ", ".join(f"{k} {v:.3f}" for k, v in per.items()))
    return "\n".join(lines)
