"""`edgeapp pose`: human pose keypoints in images, in the original image's pixels."""

import typer
from typing_extensions import Annotated

from edgeapp.cli import options as o
from edgeapp.cli.images import run_images
from edgeapp.core.boxes import ResizeMode

app = typer.Typer()


@app.command("pose")
@o.cli_errors
def pose_command(
    ctx: typer.Context,
    model: o.ModelArg,
    inputs: o.InputsArg,
    threshold: Annotated[float, typer.Option(
        "--threshold", "-t", help="Minimum keypoint score to report (and draw).")] = 0.2,
    resize: o.ResizeOpt = ResizeMode.stretch,
    annotate: o.AnnotateOpt = None,
    fmt: o.FormatOpt = None,
    output: o.OutputOpt = None,
    resume: o.ResumeOpt = False,
    mean: o.MeanOpt = None,
    std: o.StdOpt = None,
    workers: o.WorkersOpt = None,
    fast_decode: o.FastDecodeOpt = False,
    device: o.DeviceOpt = None,
    cpu_model: o.CpuModelOpt = None,
    threads: o.ThreadsOpt = None,
    cpu_kernels: o.CpuKernelsOpt = o.CpuKernels.fast,
    runtime: o.RuntimeOpt = None,
    no_probe: o.NoProbeOpt = False,
    performance: o.PerformanceOpt = None,
    tpu_reconnect: o.TpuReconnectOpt = 0.0,
    cluster: o.ClusterOpt = None,
    ship_bytes: o.ShipBytesOpt = False,
    chunk_size: o.ChunkSizeOpt = 16,
) -> None:
    """Estimate human poses: 17 COCO keypoints per image, on the Edge TPU or the CPU.

    MODEL: a MoveNet single-pose model (output [1, 1, 17, 3]: y, x, score per keypoint), or a
    PoseNet model where the runtime has Coral's PosenetDecoderOp. Keypoints are (x, y) in the
    original image's pixels with their scores; images are resized as libcoral does it
    (bilinear), so results match Coral's reference keypoints. Results stream as they are
    produced; a bad image gives an error record and the batch goes on (exit code 3 at the end).
    """
    run_images(ctx, "pose", {"threshold": threshold, "resize": resize.value})
