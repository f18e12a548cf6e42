"""`edgeapp segment`: semantic segmentation of images, the class map at the original size."""

from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.options import (CpuKernels, CpuKernelsOpt, CpuModelOpt, DeviceOpt, LabelsOpt,
                                 MeanOpt, NoProbeOpt, OutputOpt, ResumeOpt, RuntimeOpt, StdOpt,
                                 ThreadsOpt, WorkersOpt, cli_errors, finite, open_engine,
                                 decode_workers, progress_bar, results_writer, say)
from edgeapp.core.boxes import ResizeMode
from edgeapp.errors import ExitCode
from edgeapp.flows.records import Format

app = typer.Typer()

CSV_COLUMNS = ["path", "rank", "id", "label", "share", "mask", "device", "model", "latency_ms",
               "error"]


@app.command("segment")
@cli_errors
def segment_command(
    ctx: typer.Context,
    model: Annotated[Path, typer.Argument(
        help="A segmentation .tflite model (DeepLab-style: class scores [1, H, W, C] or a class "
             "map [1, H, W]), or its *_edgetpu.tflite build, or a Coral model's name.",
        show_default=False)],
    inputs: Annotated[List[str], typer.Argument(
        help="Image files, folders (recursive), globs, or - to read paths from stdin.",
        show_default=False)],
    labels: LabelsOpt = None,
    resize: Annotated[ResizeMode, typer.Option(
        "--resize", help="How images are fitted to the model input: stretch (Coral's examples) "
                         "or letterbox (keep the aspect ratio, pad). The class map is brought "
                         "back to the original image either way.")] = ResizeMode.stretch,
    annotate: Annotated[Optional[Path], typer.Option(
        "--annotate", help="Write each image with its class map blended over it (PASCAL VOC "
                           "colours) into DIR.", metavar="DIR", show_default=False)] = None,
    mask: Annotated[Optional[Path], typer.Option(
        "--mask", help="Write each image's class map, at the image's size, as a PNG of class ids "
                       "(8-bit, 16-bit beyond 255 classes) into DIR.", metavar="DIR",
        show_default=False)] = None,
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
) -> None:
    """Segment images: the class of every pixel, on the Edge TPU or the CPU.

    Reports the classes present with their share of the image's pixels. Class scores are
    reduced to classes on the CPU (the argmax that compiled models leave out), and the map is
    brought back to the original size (nearest). Results stream as they are produced; a bad
    image gives an error record and the batch goes on (exit code 3 at the end).
    """
    finite("--mean", mean)
    finite("--std", std)

    from edgeapp.cli.annotate import ImageFolder
    from edgeapp.core.overlay import draw_mask
    from edgeapp.core.segment import mask_image_array
    from edgeapp.flows.batch import image_model, run_batch
    from edgeapp.flows.inputs import expand_inputs
    from edgeapp.flows.tasks import segment_task

    annotator = ImageFolder(annotate) if annotate is not None else None  # checked before any work
    masks = ImageFolder(mask, "--mask") if mask is not None else None
    paths = expand_inputs(inputs)
    for own in (annotator, masks):
        if own is not None:
            paths = own.exclude_own(paths)
    engine = open_engine(ctx, model, device, cpu_model, runtime, threads, no_probe, cpu_kernels)

    def on_mask(source, image, class_map, classes) -> Optional[str]:
        if annotator is not None:
            annotator.annotate(source, image, lambda bgr: draw_mask(bgr, class_map, classes))
        if masks is not None:
            return str(masks.write(source, mask_image_array(class_map), ".png"))
        return None

    task = segment_task(image_model(engine, model, labels, mean, std), resize.value,
                        on_mask=on_mask if annotator or masks else None)
    with results_writer(fmt, CSV_COLUMNS, _csv_rows, _table_line, output, resume,
                        (engine.model_path, engine.requested_model)) as writer, \
            progress_bar(len(paths), "segment") as advance:
        stats = run_batch(paths, engine, task, writer, workers=decode_workers(workers),
                          progress=advance)
    parts = stats.summary(engine.device, output)
    for option, folder in (("annotated images", annotate), ("class maps", mask)):
        if folder is not None and stats.ok:
            parts.append(f"{option} in {folder}")
    say("; ".join(parts))
    if stats.failed:
        raise typer.Exit(int(ExitCode.INPUTS_FAILED))


def _csv_rows(record: dict) -> list:
    base = {k: record.get(k) for k in ("path", "mask", "device", "model", "latency_ms", "error")}
    return [{**base, "rank": r, **c} for r, c in enumerate(record["classes"], 1)] or [base]


def _table_line(record: dict) -> str:
    if record["error"]:
        return f"{record['path']}  ERROR: {record['error']}"
    shown = ", ".join(f"{c['label'] if c['label'] is not None else c['id']} {c['share'] * 100:.1f}%"
                      for c in record["classes"])
    where = f"  [mask {record['mask']}]" if record.get("mask") else ""
    return f"{record['path']}  {shown}{where}"
