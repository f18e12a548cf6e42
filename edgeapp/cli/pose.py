"""`edgeapp pose`: human pose keypoints in images, in the original image's pixels."""

import typer
from typing_extensions import Annotated

from edgeapp.cli.images import run_images
from edgeapp.cli.options import (
    AnnotateOpt,
    ChunkSizeOpt,
    ClusterOpt,
    CpuKernels,
    CpuKernelsOpt,
    CpuModelOpt,
    DeviceOpt,
    FastDecodeOpt,
    FormatOpt,
    InputsArg,
    MeanOpt,
    ModelArg,
    NoProbeOpt,
    OutputOpt,
    PerformanceOpt,
    ResizeOpt,
    ResumeOpt,
    RuntimeOpt,
    ShipBytesOpt,
    StdOpt,
    ThreadsOpt,
    TpuReconnectOpt,
    WorkersOpt,
    cli_errors,
)
from edgeapp.core.boxes import ResizeMode

app = typer.Typer()


@app.command("pose")
@cli_errors
def pose_command(
    ctx: typer.Context,
    model: ModelArg,
    inputs: InputsArg,
    threshold: Annotated[float, typer.Option(
        "--threshold", "-t", help="Minimum keypoint score to report (and draw).")] = 0.2,
    resize: ResizeOpt = ResizeMode.stretch,
    annotate: AnnotateOpt = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    resume: ResumeOpt = False,
    mean: MeanOpt = None,
    std: StdOpt = None,
    workers: WorkersOpt = None,
    fast_decode: FastDecodeOpt = False,
    device: DeviceOpt = None,
    cpu_model: CpuModelOpt = None,
    threads: ThreadsOpt = None,
    cpu_kernels: CpuKernelsOpt = CpuKernels.fast,
    runtime: RuntimeOpt = None,
    no_probe: NoProbeOpt = False,
    performance: PerformanceOpt = None,
    tpu_reconnect: TpuReconnectOpt = 0.0,
    cluster: ClusterOpt = None,
    ship_bytes: ShipBytesOpt = False,
    chunk_size: ChunkSizeOpt = 16,
) -> None:
    """Estimate human poses: 17 COCO keypoints per image, on the Edge TPU or the CPU.

    MODEL: a MoveNet single-pose model (output [1, 1, 17, 3]: y, x, score per keypoint), or a
    PoseNet model where the runtime has Coral's PosenetDecoderOp. Keypoints are (x, y) in the
    original image's pixels with their scores; images are resized as libcoral does it
    (bilinear), so results match Coral's reference keypoints. Results stream as they are
    produced; a bad image gives an error record and the batch goes on (exit code 3 at the end).
    """
    run_images(ctx, "pose", {"threshold": threshold, "resize": resize.value})
