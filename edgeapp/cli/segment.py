"""`edgeapp segment`: semantic segmentation of images, the class map at the original size."""

from pathlib import Path
from typing import Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli import options as o
from edgeapp.cli.images import Folders, run_images
from edgeapp.core.boxes import ResizeMode

app = typer.Typer()


@app.command("segment")
@o.cli_errors
def segment_command(
    ctx: typer.Context,
    model: o.ModelArg,
    inputs: o.InputsArg,
    labels: o.LabelsOpt = None,
    resize: o.ResizeOpt = ResizeMode.stretch,
    annotate: o.AnnotateOpt = None,
    mask: Annotated[Optional[Path], typer.Option(
        "--mask", help="Write each image's class map, at the image's size, as a PNG of class ids "
                       "(8-bit, 16-bit beyond 255 classes) into DIR.", metavar="DIR",
        show_default=False)] = None,
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
