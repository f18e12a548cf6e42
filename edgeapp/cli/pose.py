"""`edgeapp pose`: human pose keypoints in images, in the original image's pixels."""

from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.options import (CpuKernels, CpuKernelsOpt, CpuModelOpt, DeviceOpt, MeanOpt,
                                 NoProbeOpt, OutputOpt, ResumeOpt, RuntimeOpt, StdOpt, ThreadsOpt,
                                 WorkersOpt, cli_errors, decode_workers, finite, open_engine,
                                 progress_bar, results_writer, say)
from edgeapp.core.boxes import ResizeMode
from edgeapp.errors import ExitCode
from edgeapp.flows.records import Format

app = typer.Typer()

CSV_COLUMNS = ["path", "pose", "pose_score", "keypoint", "x", "y", "score", "device", "model",
               "latency_ms", "error"]


@app.command("pose")
@cli_errors
def pose_command(
    ctx: typer.Context,
    model: Annotated[Path, typer.Argument(
        help="A MoveNet single-pose .tflite model (output [1, 1, 17, 3]: y, x, score per COCO "
             "keypoint), or its *_edgetpu.tflite build, or a Coral model's name.", show_default=False)],
    inputs: Annotated[List[str], typer.Argument(
        help="Image files, folders (recursive), globs, or - to read paths from stdin.",
        show_default=False)],
    threshold: Annotated[float, typer.Option(
        "--threshold", "-t", help="Minimum keypoint score to report (and draw).")] = 0.2,
    resize: Annotated[ResizeMode, typer.Option(
        "--resize", help="How images are fitted to the model input: stretch (Coral's examples) "
                         "or letterbox (keep the aspect ratio, pad). Keypoints are mapped back "
                         "to the original image either way.")] = ResizeMode.stretch,
    annotate: Annotated[Optional[Path], typer.Option(
        "--annotate", help="Write each image with its skeleton drawn into DIR.", metavar="DIR",
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
    """Estimate human poses: 17 COCO keypoints per image, on the Edge TPU or the CPU.

    Keypoints are (x, y) in the original image's pixels with their scores. Images are resized
    as libcoral does it (bilinear), so results match Coral's reference keypoints. PoseNet models
    (Coral's PosenetDecoderOp custom op) are refused: no TFLite runtime here has that op.
    Results stream as they are produced; a bad image gives an error record and the batch goes
    on (exit code 3 at the end).
    """
    finite("--threshold", threshold)
    finite("--mean", mean)
    finite("--std", std)

    from edgeapp.cli.annotate import ImageFolder
    from edgeapp.core.overlay import draw_poses
    from edgeapp.flows.batch import image_model, run_batch
    from edgeapp.flows.inputs import expand_inputs
    from edgeapp.flows.tasks import pose_task

    folder = ImageFolder(annotate) if annotate is not None else None  # checked before any work
    paths = expand_inputs(inputs)
    if folder is not None:
        paths = folder.exclude_own(paths)
    engine = open_engine(ctx, model, device, cpu_model, runtime, threads, no_probe, cpu_kernels)

    def annotate_one(source, image, poses) -> None:
        folder.annotate(source, image, lambda bgr: draw_poses(bgr, poses))

    task = pose_task(image_model(engine, model, None, mean, std), threshold, resize.value,
                     annotate=annotate_one if folder is not None else None)
    with results_writer(fmt, CSV_COLUMNS, _csv_rows, _table_line, output, resume,
                        (engine.model_path, engine.requested_model)) as writer, \
            progress_bar(len(paths), "pose") as advance:
        stats = run_batch(paths, engine, task, writer, workers=decode_workers(workers),
                          progress=advance)
    parts = stats.summary(engine.device, output)
    if annotate is not None and stats.ok:
        parts.append(f"annotated images in {annotate}")
    say("; ".join(parts))
    if stats.failed:
        raise typer.Exit(int(ExitCode.INPUTS_FAILED))


def _csv_rows(record: dict) -> list:
    base = {k: record.get(k) for k in ("path", "device", "model", "latency_ms", "error")}
    rows = [{**base, "pose": n, "pose_score": p["score"], "keypoint": k["name"], "x": k["x"],
             "y": k["y"], "score": k["score"]}
            for n, p in enumerate(record["poses"], 1) for k in p["keypoints"]]
    return rows or [base]


def _table_line(record: dict) -> str:
    if record["error"]:
        return f"{record['path']}  ERROR: {record['error']}"
    if not record["poses"]:
        return f"{record['path']}  (no keypoint above threshold)"
    shown = "; ".join(
        f"pose {p['score']:.2f}: " + ", ".join(f"{k['name']} ({k['x']:.0f}, {k['y']:.0f}) "
                                                f"{k['score']:.2f}" for k in p["keypoints"])
        for p in record["poses"])
    return f"{record['path']}  {shown}"
