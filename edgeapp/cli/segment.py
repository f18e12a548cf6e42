"""`edgeapp segment`: semantic segmentation of images, the class map at the original size."""

from pathlib import Path
from typing import Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.images import Folders, run_images
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


@app.command("segment")
@cli_errors
def segment_command(
    ctx: typer.Context,
    model: ModelArg,
    inputs: InputsArg,
    labels: LabelsOpt = None,
    resize: ResizeOpt = ResizeMode.stretch,
    annotate: AnnotateOpt = None,
    mask: Annotated[Optional[Path], typer.Option(
        "--mask", help="Write each image's class map, at the image's size, as a PNG of class ids "
                       "(8-bit, 16-bit beyond 255 classes) into DIR.", metavar="DIR",
        show_default=False)] = None,
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
    """Segment images: the class of every pixel, on the Edge TPU or the CPU.

    MODEL: a DeepLab-style model (class scores [1, H, W, C] or a class map [1, H, W]). Reports
    the classes present with their share of the image's pixels. Class scores are reduced to
    classes on the CPU (the argmax that compiled models leave out), and the map is brought back
    to the original size (nearest). Results stream as they are produced; a bad image gives an
    error record and the batch goes on (exit code 3 at the end).
    """
    run_images(ctx, "segment", {"resize": resize.value}, extra_folders={"--mask": mask},
               on_result=_write_masks)


def _write_masks(folders: Folders):
    """--mask: each image's class map as a PNG of class ids; the record says where."""
    masks = folders.extra.get("--mask")
    if masks is None:
        return None
    from edgeapp.core.segment import mask_image_array

    def write(path, prepared, result) -> dict:
        return {"mask": str(masks.write(path, mask_image_array(result.extras["mask"]), ".png"))}

    return write
