"""`edgeapp classify`: images, folders and globs through a classification model."""


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
    LabelsOpt,
    MeanOpt,
    ModelArg,
    NoProbeOpt,
    OutputOpt,
    PerformanceOpt,
    ResumeOpt,
    RuntimeOpt,
    ShipBytesOpt,
    StdOpt,
    ThreadsOpt,
    TpuReconnectOpt,
    WorkersOpt,
    cli_errors,
)

app = typer.Typer()


@app.command("classify")
@cli_errors
def classify_command(
    ctx: typer.Context,
    model: ModelArg,
    inputs: InputsArg,
    labels: LabelsOpt = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="Classes per image.")] = 5,
    threshold: Annotated[float, typer.Option("--threshold", "-t",
                                             help="Minimum score to report.")] = 0.0,
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
    """Classify images on the Edge TPU, or on the CPU when none is usable.

    MODEL: a classification .tflite model (uint8, int8 or float input). Results stream to
    stdout (or --output) as they are produced; a bad image gives an error record and the batch
    goes on (exit code 3 at the end).
    """
    run_images(ctx, "classify", {"top_k": top_k, "threshold": threshold})
