"""`edgeapp classify`: images, folders and globs through a classification model."""


import typer
from typing_extensions import Annotated

from edgeapp.cli import options as o
from edgeapp.cli.images import run_images

app = typer.Typer()


@app.command("classify")
@o.cli_errors
def classify_command(
    ctx: typer.Context,
    model: o.ModelArg,
    inputs: o.InputsArg,
    labels: o.LabelsOpt = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="Classes per image.")] = 5,
    threshold: Annotated[float, typer.Option("--threshold", "-t",
                                             help="Minimum score to report.")] = 0.0,
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
    """Classify images on the Edge TPU, or on the CPU when none is usable.

    MODEL: a classification .tflite model (uint8, int8 or float input). Results stream to
    stdout (or --output) as they are produced; a bad image gives an error record and the batch
    goes on (exit code 3 at the end).
    """
    run_images(ctx, "classify", {"top_k": top_k, "threshold": threshold})
