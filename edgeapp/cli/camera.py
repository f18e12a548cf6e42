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
                          StdOpt, ThreadsOpt, cli_errors, finite, open_runner, say)
from edgeapp.errors import EdgeappError, ExitCode, InvalidModel, UsageError
from edgeapp.flows.records import Format

app = typer.Typer()

CSV_COLUMNS = ["frame", "timestamp", "source_ms", "rank", "id", "label", "score", "xmin", "ymin",
               "xmax", "ymax", "device", "latency_ms", "frame_ms", "x", "y", "share"]


class Task(str, Enum):
    classify = "classify"
    detect = "detect"
    pose = "pose"
    segment = "segment"


class MqttMode(str, Enum):
    frames = "frames"
    events = "events"


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
    serve: Annotated[Optional[str], typer.Option(
        "--serve", metavar="[HOST:]PORT",
        help="Live view in a browser: the annotated video, results, FPS, latency and device at "
             "http://HOST:PORT/ (also /stream.mjpg, /stats, /snapshot.jpg). HOST defaults to "
             "127.0.0.1 (this machine only; 0.0.0.0 for every interface, with a warning), PORT "
             "to 8080 (0: any free port).", show_default=False)] = None,
    serve_fps: Annotated[float, typer.Option(
        "--serve-fps", min=0.1, max=120.0,
        help="At most this many frames per second to viewers; JPEG encoding happens only while "
             "someone watches.")] = 10.0,
    mqtt: Annotated[Optional[str], typer.Option(
        "--mqtt", metavar="URL",
        help="Publish results to an MQTT broker: mqtt://\\[user:pass@]host\\[:port]/topic-prefix "
             "(mqtts:// for TLS; the password may come from $EDGEAPP_MQTT_PASSWORD). Needs "
             "pip install 'edgeapp\\[mqtt]'.", show_default=False)] = None,
    mqtt_mode: Annotated[MqttMode, typer.Option(
        "--mqtt-mode", help="frames: every processed frame on PREFIX/frames; events: only "
                            "changes (top class, labels appearing or leaving) on PREFIX/events.")
    ] = MqttMode.frames,
    mqtt_debounce: Annotated[float, typer.Option(
        "--mqtt-debounce", min=0.0, metavar="SECONDS",
        help="Events: a change must last this long to be sent.")] = 1.0,
    mqtt_queue: Annotated[int, typer.Option(
        "--mqtt-queue", min=1, max=100000,
        help="Messages kept while the broker is slow or away; beyond, the oldest are dropped "
             "(counted in the summary).")] = 100,
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
    stale ones are dropped (and counted); a file has every frame processed up to its end (a
    truncated file ends early, with a warning). A camera lost mid-run is reopened with backoff
    for --reconnect seconds, then the run stops with its summary (exit 5). Ctrl-C stops with
    the summary (exit 130); SIGTERM likewise, with exit 0 (a service being stopped).

    Headless: --serve shows the annotated stream and numbers in a browser; --mqtt publishes
    results for home automation. With either, per-frame records go to stdout only if --format
    or --output asks for them.
    """
    finite("--threshold", threshold)
    finite("--mean", mean)
    finite("--std", std)
    finite("--serve-fps", serve_fps)
    finite("--mqtt-debounce", mqtt_debounce)
    address = target = None
    if serve is not None:
        from edgeapp.flows.live_view import parse_serve

        address = parse_serve(serve)
    if mqtt is not None:
        from edgeapp.flows.mqtt_out import paho_module, parse_mqtt_url

        target = parse_mqtt_url(mqtt)
        paho_module()  # missing: exit 7 with the install line, before opening anything

    from edgeapp.flows.camera import ClassifyTask, DetectTask, Display, PoseTask, Recorder, \
        SegmentTask, has_display, run_camera
    from edgeapp.hw.capture import OpenCVSource, ReconnectPolicy
    from edgeapp.flows.batch import classifier_output, engine_task, image_model, label_count_note
    from edgeapp.flows.records import RecordWriter

    if output is not None and output.exists() and output.is_dir():
        raise UsageError(f"--output {output} is a folder")
    tasks: dict = {}  # one FrameTask per device: each TPU's thread runs its own

    def on_device(engine, image):
        task = tasks.get(engine.name) or tasks.setdefault(engine.name, make_task(engine))
        fields, latency = task(image)
        return fields, latency, getattr(task, "mask", None)  # read in the thread that made it

    runner = open_runner(ctx, model, device, cpu_model, runtime, threads, no_probe, cpu_kernels,
                         work=on_device, depth=1)
    ctx.call_on_close(runner.close)  # its threads end however this ends
    engine = runner.engine
    loaded = image_model(engine, runner.meta_path, labels, mean, std)
    spec, label_map = loaded.spec, loaded.labels
    kind = task.value if task else _guess_task(loaded.meta.task, engine_task(engine), engine)

    def make_task(e):
        if kind == "detect":
            return DetectTask(e, spec, label_map, 0.4 if threshold is None else threshold, top_k,
                              resize)
        if kind == "pose":
            return PoseTask(e, spec, 0.2 if threshold is None else threshold, resize)
        if kind == "segment":
            return SegmentTask(e, spec, label_map, resize)
        classifier_output(e, hint="use --task {task}")
        if e is engine:
            note = label_count_note(loaded, labels)
            if note:
                say(f"warning: {note}")
        return ClassifyTask(e, spec, label_map, top_k or 3, 0.0 if threshold is None else threshold)

    frame_task = tasks.setdefault(engine.name, make_task(engine))

    show = has_display() if display is None else display
    if display and not has_display():
        raise UsageError("--display: there is no display here (DISPLAY is not set); use --no-display")
    cap = OpenCVSource(source, width, height)
    if (width or height) and not cap.live:
        say("--width/--height ask a camera for a capture size; a file's frames keep their size")
    window = Display(f"edgeapp {Path(engine.model_path).name}") if show else None
    writer = None
    networked = address is not None or target is not None
    if output is not None or (not show and not (networked and fmt is None)):
        writer = RecordWriter(fmt or Format.jsonl, CSV_COLUMNS, _csv_rows, _table_line, output)
    stop = threading.Event()
    restore = _on_sigterm(stop)
    output_error: List[EdgeappError] = []

    def on_record(record: dict) -> None:
        """A results file that cannot be written (a full disk) stops the run, with its summary."""
        if output_error:
            return
        try:
            writer.write(record)
        except EdgeappError as e:
            output_error.append(e)
            stop.set()

    live = publisher = None
    try:
        if address is not None:  # first: a port in use fails before anything connects
            from edgeapp.flows.live_view import LiveView, exposure_warning

            note = engine.notice or ("the Edge TPU" if engine.device == "edgetpu" else "--device cpu")
            live = LiveView(address, fps=serve_fps,
                            extra=lambda: {"mqtt": publisher.summary()} if publisher is not None else {},
                            info={"model": Path(engine.model_path).name, "task": kind,
                                  "device": engine.device, "device_note": note,
                                  "source": cap.name}).start()
            warning = exposure_warning(address)
            if warning:
                say(warning)
            say(f"live view on {live.url}")
        if target is not None:
            from edgeapp.flows.mqtt_out import MqttOut

            publisher = MqttOut(target, mode=mqtt_mode.value, debounce=mqtt_debounce,
                                queue_size=mqtt_queue, on_notice=say).start()
        recorder = Recorder(str(record)) if record is not None else None
        stats = run_camera(cap, frame_task, drop=drop_frames, max_frames=max_frames,
                           duration=duration, reconnect=ReconnectPolicy(timeout=reconnect),
                           on_record=on_record if writer else None, display=window,
                           recorder=recorder, stop_event=stop, on_notice=say, runner=runner,
                           outputs=[o for o in (live, publisher) if o is not None])
    finally:
        restore()
        runner.close()
        if live is not None:
            live.close()
        if publisher is not None:
            publisher.close()
        if writer is not None:
            writer.close()
    code, error = ExitCode.OK, None
    if output_error:
        stats.stop = "output error"
        error, code = str(output_error[0]), output_error[0].exit_code
    elif stats.stop == "interrupted":  # Ctrl-C: the summary, then 130 as every command
        code = ExitCode.INTERRUPTED
    elif stats.stop.startswith("capture error"):
        error, code = stats.stop, ExitCode.ERROR
    elif stats.lost:
        why = f" (last: {stats.reopen_error})" if stats.reopen_error else ""
        error = (f"{cap.name}: camera/stream lost; no frames after {stats.reconnect_attempts} "
                 f"reconnect attempt(s) in {reconnect:g} s{why}")
        code = ExitCode.DEVICE_UNAVAILABLE
    missing = getattr(cap, "missing_frames", 0)
    if missing and stats.stop == "end of stream":
        say(f"warning: {cap.name} ended after {cap.position} frame(s), {missing} short of the "
            f"{cap.declared_frames} its container declares (truncated?)")
    if error:
        say(f"error: {error}")
    extra: dict = {}
    if live is not None:
        extra["live_view"] = live.summary()
    if publisher is not None:
        extra["mqtt"] = publisher.summary()
    if summary == SummaryFormat.json:  # the last line on stderr, whatever came before
        typer.echo(json.dumps({**stats.summary(), "model": engine.model_path, "task": kind, **extra}),
                   err=True)
    else:
        say(stats.summary_line() + _outputs_line(extra))
    if code != ExitCode.OK:
        raise typer.Exit(int(code))


def _outputs_line(extra: dict) -> str:
    text = ""
    if "live_view" in extra:
        v = extra["live_view"]
        text += f"; live view: {v['viewers_total']} viewer(s), {v['frames_encoded']} frame(s) encoded"
    if "mqtt" in extra:
        m = extra["mqtt"]
        text += (f"; mqtt: {m['published']} published, {m['dropped']} dropped, "
                 f"{m['reconnects']} reconnect(s)")
    return text


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
