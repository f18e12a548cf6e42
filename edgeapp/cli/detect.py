"""`edgeapp detect`: objects in images, as boxes in the original image's pixels."""

from typing import Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli import options as o
from edgeapp.cli.images import run_images
from edgeapp.core.boxes import ResizeMode

app = typer.Typer()


@app.command("detect")
@o.cli_errors
def detect_command(
    ctx: typer.Context,
    model: o.ModelArg,
    inputs: o.InputsArg,
    labels: o.LabelsOpt = None,
    threshold: Annotated[Optional[float], typer.Option(
        "--threshold", "-t", help="Minimum score of an object (default: 0.4 for SSD models, 0.25 "
                                  "for YOLO, as Ultralytics).", show_default=False)] = None,
    top_k: Annotated[Optional[int], typer.Option(
        "--top-k", "-k", min=1, help="At most this many objects per image, best first "
                                     "(default: all above the threshold).", show_default=False)] = None,
    resize: o.ResizeOpt = ResizeMode.stretch,
    decoder: o.DecoderOpt = "auto",
    iou: Annotated[float, typer.Option(
        "--iou", min=0.0, max=1.0, help="YOLO: boxes of a class overlapping a better one by more "
                                        "than this (IoU) are dropped (NMS).")] = 0.7,
    max_det: Annotated[int, typer.Option(
        "--max-det", min=1, help="YOLO: at most this many objects per image after NMS.")] = 300,
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
    """Detect objects in images on the Edge TPU, or on the CPU when none is usable.

    MODEL: a detection model ending in the TFLite detection post-process op (SSD MobileNet,
    EfficientDet-Lite...), or a YOLO export (Ultralytics YOLOv8/11/v5u `*_full_integer_quant`
    and its `_edgetpu` build, classic YOLOv5, split DFL), decoded and NMS'd as Ultralytics does.
    Boxes are [xmin, ymin, xmax, ymax] in the original image's pixels.
    Results stream to stdout (or --output) as they are produced; a bad image gives an error
    record and the batch goes on (exit code 3 at the end).
    """
    run_images(ctx, "detect", {"threshold": threshold, "top_k": top_k, "resize": resize.value,
                               "decoder": decoder, "iou": iou, "max_det": max_det})
