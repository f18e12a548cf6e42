"""`edgeapp detect`: objects in images, as boxes in the original image's pixels."""

from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.core.boxes import ResizeMode
from edgeapp.cli.options import CpuKernels, CpuKernelsOpt
from edgeapp.cli.options import (ChunkSizeOpt, ClusterOpt, CpuModelOpt, DeviceOpt, LabelsOpt, MeanOpt,
                                 NoProbeOpt, OutputOpt, ResumeOpt, RuntimeOpt, ShipBytesOpt, StdOpt,
                                 ThreadsOpt, WorkersOpt, cluster_job, cli_errors, finite,
                                 decode_workers, open_runner, progress_bar, results_writer, say)
from edgeapp.errors import ExitCode, UsageError
from edgeapp.flows.records import Format

app = typer.Typer()

CSV_COLUMNS = ["path", "rank", "id", "label", "score", "xmin", "ymin", "xmax", "ymax", "device",
               "model", "latency_ms", "error"]
ResizeOpt = Annotated[ResizeMode, typer.Option(
    "--resize", help="How images are fitted to the model input: stretch (what SSD models are "
                     "trained with) or letterbox (keep the aspect ratio, pad). Boxes are mapped "
                     "back to the original image either way.")]


@app.command("detect")
@cli_errors
def detect_command(
    ctx: typer.Context,
    model: Annotated[Path, typer.Argument(
        help="A detection .tflite model ending in the TFLite detection post-process op (SSD "
             "MobileNet, EfficientDet-Lite...), or its *_edgetpu.tflite build, or a Coral model's "
             "name (`edgeapp models list --task detect`).", show_default=False)],
    inputs: Annotated[List[str], typer.Argument(
        help="Image files, folders (recursive), globs, or - to read paths from stdin.",
        show_default=False)],
    labels: LabelsOpt = None,
    threshold: Annotated[float, typer.Option("--threshold", "-t",
                                             help="Minimum score of an object.")] = 0.4,
    top_k: Annotated[Optional[int], typer.Option(
        "--top-k", "-k", min=1, help="At most this many objects per image, best first "
                                     "(default: all above the threshold).", show_default=False)] = None,
    resize: ResizeOpt = ResizeMode.stretch,
    annotate: Annotated[Optional[Path], typer.Option(
        "--annotate", help="Write each image with its boxes, labels and scores drawn into DIR.",
        metavar="DIR", show_default=False)] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: OutputOpt = None,
    resume: ResumeOpt = False,
    mean: MeanOpt = None,
    std: StdOpt = None,
    workers: WorkersOpt = None,
    device: DeviceOpt = None,
    cpu_model: CpuModelOpt = None,
    threads: ThreadsOpt = None,
    cpu_kernels: CpuKernelsOpt = CpuKernels.fast,
    runtime: RuntimeOpt = None,
    no_probe: NoProbeOpt = False,
    cluster: ClusterOpt = None,
    ship_bytes: ShipBytesOpt = False,
    chunk_size: ChunkSizeOpt = 16,
) -> None:
    """Detect objects in images on the Edge TPU, or on the CPU when none is usable.

    Boxes are [xmin, ymin, xmax, ymax] in the original image's pixels. Results stream to stdout
    (or --output) as they are produced; a bad image gives an error record and the batch goes on
    (exit code 3 at the end).
    """
    finite("--threshold", threshold)
    finite("--mean", mean)
    finite("--std", std)

    from edgeapp.cli.annotate import ImageFolder
    from edgeapp.core.overlay import draw_objects
    from edgeapp.flows.batch import image_model, run_batch
    from edgeapp.hw.hostinfo import usable_cores
    from edgeapp.flows.inputs import expand_inputs
    from edgeapp.flows.tasks import detect_task

    folder = None
    if annotate is not None:
        if cluster:
            raise UsageError("--annotate writes files where the images are processed: not with --cluster")
        folder = ImageFolder(annotate)  # OpenCV and the folder checked before any work
    paths = expand_inputs(inputs)
    if folder is not None:
        paths = folder.exclude_own(paths)
    if cluster:
        from edgeapp.flows.cluster import run_cluster

        job = cluster_job(ctx, "detect", model, device, cpu_model, runtime, threads, no_probe, labels,
                          mean, std, decode_workers(workers), threshold=threshold, top_k=top_k,
                          resize=resize.value)
        with results_writer(fmt, CSV_COLUMNS, _csv_rows, _table_line, output, resume,
                            (job.model, job.cpu_model)) as writer, \
                progress_bar(len(paths), "detect") as advance:
            stats = run_cluster(paths, job, writer, cluster, ship_bytes, chunk_size, advance)
        where = f"the cluster {cluster}"
    else:
        runner = open_runner(ctx, model, device, cpu_model, runtime, threads, no_probe,
                             cpu_kernels, cpu_replicas=usable_cores())
        with runner:  # its threads end however this ends
            engine = runner.engine

            def annotate_one(source, image, objects) -> None:
                folder.annotate(source, image, lambda bgr: draw_objects(bgr, objects))

            task = detect_task(image_model(engine, runner.meta_path, labels, mean, std), threshold,
                               top_k, resize, annotate=annotate_one if folder is not None else None)
            with results_writer(fmt, CSV_COLUMNS, _csv_rows, _table_line, output, resume,
                                (engine.model_path, engine.requested_model)) as writer, \
                    progress_bar(len(paths), "detect") as advance:
                stats = run_batch(paths, runner, task, writer, workers=decode_workers(workers),
                                  progress=advance)
            where = runner.label
    parts = stats.summary(where, output)
    if annotate is not None and stats.ok:
        parts.append(f"annotated images in {annotate}")
    say("; ".join(parts))
    if stats.failed:
        raise typer.Exit(int(ExitCode.INPUTS_FAILED))


def _csv_rows(record: dict) -> List[dict]:
    base = {k: record.get(k) for k in ("path", "device", "model", "latency_ms", "error")}
    if not record["objects"]:
        return [base]
    rows = []
    for r, o in enumerate(record["objects"], 1):
        x0, y0, x1, y1 = o["bbox"]
        rows.append({**base, "rank": r, "id": o["id"], "label": o["label"], "score": o["score"],
                     "xmin": x0, "ymin": y0, "xmax": x1, "ymax": y1})
    return rows


def _table_line(record: dict) -> str:
    if record["error"]:
        return f"{record['path']}  ERROR: {record['error']}"
    objs = record["objects"]
    if not objs:
        return f"{record['path']}  (no object above threshold)"
    shown = ", ".join(f"{o['label'] if o['label'] is not None else o['id']} {o['score']:.2f} "
                      f"[{', '.join(str(v) for v in o['bbox'])}]" for o in objs)
    return f"{record['path']}  {len(objs)} object(s): {shown}"
