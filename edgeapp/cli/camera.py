"""`edgeapp camera`: classify, detect, pose or segment live from a camera, a stream or a video file."""

import json
import signal
import sys
import threading
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.core.boxes import ResizeMode
from edgeapp.cli.options import CpuKernels, CpuKernelsOpt
from edgeapp.cli.options import (CpuModelOpt, DeviceOpt, LabelsOpt, MeanOpt, NoProbeOpt, RuntimeOpt,
                          StdOpt, ThreadsOpt, cli_errors, finite, open_engine, say)
from edgeapp.errors import ExitCode, InvalidModel, UsageError
from edgeapp.flows.records import Format

app = typer.Typer()

CSV_COLUMNS = ["frame", "timestamp", "source_ms", "rank", "id", "label", "score", "xmin", "ymin",
               "xmax", "ymax", "device", "latency_ms", "frame_ms", "x", "y", "share"]


class Task(str, Enum):
    classify = "classify"
    detect = "detect"
    pose = "pose"
    segment = "segment"


class SummaryFormat(str, Enum):
    text = "text"
    json = "json"


@app.command("camera")
@cli_errors
def camera_command(
    ctx: typer.Context,
    model: Annotated[Path, typer.Argument(help="A classification, detection, pose or segmentation "
                                               ".tflite model, or its *_edgetpu.tflite build, or a "
                                               "Coral model's name.",
                                          show_default=False)],
    task: Annotated[Optional[Task], typer.Option(
        "--task", help="Default: the model's metadata, else what its outputs are for (four "
                       "detection outputs: detect; [1, 1, 17, 3]: pose; [1, H, W, C] or [1, H, W]: "
                       "segment; one score vector: classify).", show_default=False)] = None,
    source: Annotated[str, typer.Option(
        "--source", "-s", help="Camera index (0), /dev/videoN, a video file, rtsp://... or a "
                               "GStreamer pipeline ending in appsink.")] = "0",
    width: Annotated[Optional[int], typer.Option("--width", min=1, help="Capture width to ask a "
                                                 "camera for.", show_default=False)] = None,
    height: Annotated[Optional[int], typer.Option("--height", min=1, help="Capture height to ask a "
                                                  "camera for.", show_default=False)] = None,
    display: Annotated[Optional[bool], typer.Option(
        "--display/--no-display", help="Show the annotated frames in a window (q or Esc quits). "
                                       "Default: when there is a display.", show_default=False)] = None,
    record: Annotated[Optional[Path], typer.Option(
        "--record", help="Write the annotated frames to a video (.mp4 or .avi).",
        metavar="OUT.mp4", show_default=False)] = None,
    max_frames: Annotated[Optional[int], typer.Option(
        "--max-frames", min=1, help="Stop after this many processed frames.", show_default=False)] = None,
    duration: Annotated[Optional[float], typer.Option(
        "--duration", min=0.0, help="Stop after this many seconds.", show_default=False)] = None,
    fmt: Annotated[Optional[Format], typer.Option(
        "--format", "-f", help="Per-frame records: jsonl (default), csv or table. Written to "
                               "stdout when headless, or to --output.", show_default=False)] = None,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Write the per-frame records to FILE.", show_default=False)] = None,
    labels: LabelsOpt = None,
    top_k: Annotated[Optional[int], typer.Option(
        "--top-k", "-k", min=1, help="Classes per frame (default 3), or objects per frame "
                                     "(default all).", show_default=False)] = None,
    threshold: Annotated[Optional[float], typer.Option(
        "--threshold", "-t", help="Minimum score (default 0 to classify, 0.4 to detect, 0.2 "
                                  "for keypoints).",
        show_default=False)] = None,
    resize: Annotated[ResizeMode, typer.Option(
        "--resize", help="Detection, pose, segmentation: fit frames by stretch or letterbox.")
    ] = ResizeMode.stretch,
    drop_frames: Annotated[Optional[bool], typer.Option(
        "--drop-frames/--no-drop-frames",
        help="Newest-frame policy: skip stale frames when inference is slower than the source. "
             "Default: on for cameras and streams; off for files (every frame is processed). "
             "On with a file, the file plays at its own frame rate like a camera.",
        show_default=False)] = None,
    reconnect: Annotated[float, typer.Option(
        "--reconnect", min=0.0, metavar="SECONDS",
        help="When the source stops giving frames, reopen it with backoff for up to this long, "
             "then stop (0: stop at once).")] = 10.0,
    summary: Annotated[SummaryFormat, typer.Option(
        "--summary", help="End-of-run summary on stderr: one text line or one JSON object.")
    ] = SummaryFormat.text,
    mean: MeanOpt = None,
    std: StdOpt = None,
    device: DeviceOpt = None,
    cpu_model: CpuModelOpt = None,
    threads: ThreadsOpt = None,
    cpu_kernels: CpuKernelsOpt = CpuKernels.fast,
    runtime: RuntimeOpt = None,
    no_probe: NoProbeOpt = False,
) -> None:
    """Run a model on live frames: overlay, headless JSON lines, recording, summary.

    Capture runs in its own thread. For cameras and streams inference takes the newest frame and
    stale ones are dropped (and counted); a file has every frame processed. A camera lost
    mid-run is reopened with backoff for --reconnect seconds, then the run stops with its
    summary (exit 5; 3 for a file that breaks off). Ctrl-C stops cleanly (exit 0).
    """
    finite("--threshold", threshold)
    finite("--mean", mean)
    finite("--std", std)

    from edgeapp.flows.camera import ClassifyTask, DetectTask, Display, PoseTask, Recorder, \
        SegmentTask, has_display, run_camera
    from edgeapp.hw.capture import OpenCVSource, ReconnectPolicy
    from edgeapp.flows.batch import classifier_output, engine_task, image_model
    from edgeapp.flows.records import RecordWriter

    if output is not None and output.exists() and output.is_dir():
        raise UsageError(f"--output {output} is a folder")
    engine = open_engine(ctx, model, device, cpu_model, runtime, threads, no_probe,
                         cpu_kernels)
    loaded = image_model(engine, model, labels, mean, std)
    spec, label_map = loaded.spec, loaded.labels
    kind = task.value if task else _guess_task(loaded.meta.task, engine_task(engine), engine)
    if kind == "detect":
        frame_task = DetectTask(engine, spec, label_map, 0.4 if threshold is None else threshold,
                                top_k, resize)
    elif kind == "pose":
        frame_task = PoseTask(engine, spec, 0.2 if threshold is None else threshold, resize)
    elif kind == "segment":
        frame_task = SegmentTask(engine, spec, label_map, resize)
    else:
        classifier_output(engine, hint="use --task {task}")
        frame_task = ClassifyTask(engine, spec, label_map, top_k or 3,
                                  0.0 if threshold is None else threshold)

    show = has_display() if display is None else display
    if display and not has_display():
        raise UsageError("--display: there is no display here (DISPLAY is not set); use --no-display")
    cap = OpenCVSource(source, width, height)
    if (width or height) and not cap.live:
        say("--width/--height ask a camera for a capture size; a file's frames keep their size")
    window = Display(f"edgeapp {Path(engine.model_path).name}") if show else None
    writer = None
    if output is not None or not show:
        writer = RecordWriter(fmt or Format.jsonl, CSV_COLUMNS, _csv_rows, _table_line, output)
    stop = threading.Event()
    restore = _on_sigterm(stop)
    try:
        recorder = Recorder(str(record)) if record is not None else None
        stats = run_camera(cap, frame_task, drop=drop_frames, max_frames=max_frames,
                           duration=duration, reconnect=ReconnectPolicy(timeout=reconnect),
                           on_record=writer.write if writer else None, display=window,
                           recorder=recorder, stop_event=stop, on_notice=say)
    finally:
        restore()
        if writer is not None:
            writer.close()
    code = ExitCode.OK
    if stats.stop.startswith("capture error"):
        say(f"error: {stats.stop}")
        code = ExitCode.ERROR
    elif stats.lost:
        what = "camera/stream lost" if cap.live else "video broke off before its end (truncated?)"
        why = f" (last: {stats.reopen_error})" if stats.reopen_error else ""
        say(f"error: {cap.name}: {what}; no frames after {stats.reconnect_attempts} reconnect "
            f"attempt(s) in {reconnect:g} s{why}")
        code = ExitCode.DEVICE_UNAVAILABLE if cap.live else ExitCode.INPUTS_FAILED
    if summary == SummaryFormat.json:  # the last line on stderr, whatever came before
        typer.echo(json.dumps({**stats.summary(), "model": engine.model_path, "task": kind}), err=True)
    else:
        say(stats.summary_line())
    if code != ExitCode.OK:
        raise typer.Exit(int(code))


def _guess_task(meta_task: Optional[str], output_task: Optional[str], engine) -> str:
    if meta_task in [t.value for t in Task]:
        return meta_task
    if output_task in [t.value for t in Task]:
        return output_task
    raise InvalidModel(f"{engine.model_path} has {len(engine.outputs)} outputs: not a classifier "
                       "(1), a detection model (4), a pose or a segmentation model; use --task")


def _on_sigterm(stop: threading.Event):
    """SIGTERM (systemd stop, docker stop) stops cleanly like Ctrl-C; returns the undo."""
    if threading.current_thread() is not threading.main_thread() or sys.platform == "win32":
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return lambda: signal.signal(signal.SIGTERM, previous)


def _items(record: dict) -> List[dict]:
    if "poses" in record:
        from edgeapp.core.pose import KEYPOINTS

        return [{"rank": n, "id": KEYPOINTS.index(k["name"]), "label": k["name"], "score": k["score"],
                 "x": k["x"], "y": k["y"]}
                for n, p in enumerate(record["poses"], 1) for k in p["keypoints"]]
    if "objects" in record:
        out = []
        for o in record["objects"]:
            x0, y0, x1, y1 = o["bbox"]
            out.append({"id": o["id"], "label": o["label"], "score": o["score"],
                        "xmin": x0, "ymin": y0, "xmax": x1, "ymax": y1})
        return out
    return [dict(c) for c in record.get("classes", [])]


def _csv_rows(record: dict) -> List[dict]:
    base = {k: record.get(k) for k in ("frame", "timestamp", "source_ms", "device", "latency_ms",
                                       "frame_ms")}
    items = _items(record)
    # rank: the item's place; a keypoint's rank is its pose's (its id: its COCO keypoint index)
    return [{**base, "rank": r, **it} for r, it in enumerate(items, 1)] or [base]


def _table_line(record: dict) -> str:
    shown = []
    for it in _items(record):
        name = it["label"] if it["label"] is not None else it["id"]
        box = f" [{it['xmin']}, {it['ymin']}, {it['xmax']}, {it['ymax']}]" if "xmin" in it else ""
        box += f" ({it['x']:.0f}, {it['y']:.0f})" if "x" in it else ""
        value = f"{it['share'] * 100:.1f}%" if "share" in it else f"{it['score']:.2f}"
        shown.append(f"{name} {value}{box}")
    return (f"frame {record['frame']}  {', '.join(shown) or '(nothing above threshold)'}  "
            f"({record['latency_ms']:.1f} ms)")
