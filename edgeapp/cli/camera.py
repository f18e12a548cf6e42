"""`edgeapp camera`: any task live from a camera, a stream or a video file."""

import json
import signal
import sys
import threading
from enum import Enum
from pathlib import Path
from typing import Any, List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.options import (
    CpuKernels,
    CpuKernelsOpt,
    CpuModelOpt,
    DeviceOpt,
    LabelsOpt,
    MeanOpt,
    NoProbeOpt,
    PerformanceOpt,
    ResizeOpt,
    RuntimeOpt,
    StdOpt,
    ThreadsOneOpt,
    check_common,
    choices,
    cli_errors,
    finite,
    placement,
    plain,
    say,
)
from edgeapp.core.boxes import ResizeMode
from edgeapp.errors import EdgeappError, ExitCode, UsageError
from edgeapp.sinks.records import Format
from edgeapp.tasks import names as task_names

app = typer.Typer()
MQTT_SETTLE = 10.0  # seconds a file's run waits for the broker's first answer before its frames

TaskName = choices("TaskName", task_names())


class MqttMode(str, Enum):
    frames = "frames"
    events = "events"


class SummaryFormat(str, Enum):
    text = "text"
    json = "json"


TaskOpt = Annotated[Optional[TaskName], typer.Option(
    "--task", help="Default: the model's metadata, else what its outputs are for (four "
                   "detection outputs: detect; [1, 1, 17, 3]: pose; [1, H, W, C] or [1, H, W]: "
                   "segment; one score vector: classify).", show_default=False)]
SourceOpt = Annotated[str, typer.Option(
    "--source", "-s", help="Camera index (0), /dev/videoN, a video file, rtsp://... or a GStreamer "
                           "pipeline ending in appsink.")]
WidthOpt = Annotated[Optional[int], typer.Option(
    "--width", min=1, help="Capture width to ask a camera for.", show_default=False)]
HeightOpt = Annotated[Optional[int], typer.Option(
    "--height", min=1, help="Capture height to ask a camera for.", show_default=False)]
DisplayOpt = Annotated[Optional[bool], typer.Option(
    "--display/--no-display", help="Show the annotated frames in a window (q or Esc quits). "
                                   "Default: when there is a display.", show_default=False)]
RecordOpt = Annotated[Optional[Path], typer.Option(
    "--record", help="Write the annotated frames to a video (.mp4 or .avi).", metavar="OUT.mp4",
    show_default=False)]
MaxFramesOpt = Annotated[Optional[int], typer.Option(
    "--max-frames", min=1, help="Stop after this many processed frames.", show_default=False)]
DurationOpt = Annotated[Optional[float], typer.Option(
    "--duration", help="Stop after this many seconds (more than 0).", show_default=False)]
FormatOpt = Annotated[Optional[Format], typer.Option(
    "--format", "-f", help="Per-frame records: jsonl (default), csv or table. Written to stdout "
                           "when headless, or to --output.", show_default=False)]
OutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Write the per-frame records to FILE.", show_default=False)]
TopKOpt = Annotated[Optional[int], typer.Option(
    "--top-k", "-k", min=1, help="Classes per frame (default 5), or objects per frame (default "
                                 "all).", show_default=False)]
ThresholdOpt = Annotated[Optional[float], typer.Option(
    "--threshold", "-t", help="Minimum score (default: the task's, as in its own command: 0 to "
                              "classify, 0.4 to detect, 0.2 for keypoints).", show_default=False)]
DropOpt = Annotated[Optional[bool], typer.Option(
    "--drop-frames/--no-drop-frames",
    help="Newest-frame policy: skip stale frames when inference is slower than the source. "
         "Default: on for cameras and streams; off for files (every frame is processed). On "
         "with a file, the file plays at its own frame rate like a camera.", show_default=False)]
ReconnectOpt = Annotated[float, typer.Option(
    "--reconnect", min=0.0, metavar="SECONDS",
    help="When the source stops giving frames, reopen it with backoff for up to this long, then "
         "stop (0: stop at once).")]
ServeOpt = Annotated[Optional[str], typer.Option(
    "--serve", metavar="ADDRESS",
    help="Live view in a browser: the annotated video, results, FPS, latency and device at "
         "http://HOST:PORT/ (also /stream.mjpg, /stats, /snapshot.jpg). ADDRESS is required: "
         "PORT (e.g. 8080), HOST (port 8080) or HOST:PORT. HOST defaults to 127.0.0.1 (this "
         "machine only; 0.0.0.0 for every interface, then with a token); PORT 0: any free port "
         "(the URLs to open are printed).", show_default=False)]
ServeTokenOpt = Annotated[Optional[str], typer.Option(
    "--serve-token", metavar="TOKEN",
    help="Required of every viewer (open the page once as /?token=TOKEN; it keeps a cookie). "
         "Needed when --serve listens beyond this machine; `none` serves without one (with a "
         "warning). Out of `ps`: --serve-token-file or $EDGEAPP_SERVE_TOKEN.", show_default=False)]
ServeTokenFileOpt = Annotated[Optional[Path], typer.Option(
    "--serve-token-file", metavar="FILE", help="Read the --serve-token from the first line of FILE.",
    show_default=False)]
ServeFpsOpt = Annotated[float, typer.Option(
    "--serve-fps", min=0.1, max=120.0,
    help="At most this many frames per second to viewers; JPEG encoding happens only while "
         "someone watches.")]
MqttOpt = Annotated[Optional[str], typer.Option(
    "--mqtt", metavar="URL",
    help="Publish results to an MQTT broker: mqtt://[user:pass@]host[:port]/topic-prefix "
         "(mqtts:// for TLS; the password may come from $EDGEAPP_MQTT_PASSWORD). Needs "
         "`pip install 'edgeapp[mqtt]'`.", show_default=False)]
MqttModeOpt = Annotated[MqttMode, typer.Option(
    "--mqtt-mode", help="frames: every processed frame on PREFIX/frames; events: only changes on "
                        "PREFIX/events (the top class; labels, a person or segmented classes "
                        "appearing or leaving).")]
DebounceOpt = Annotated[float, typer.Option(
    "--mqtt-debounce", min=0.0, metavar="SECONDS",
    help="Events: a change must last this long to be sent.")]
MqttQueueOpt = Annotated[int, typer.Option(
    "--mqtt-queue", min=1, max=100000,
    help="Messages kept while the broker is slow or away; beyond, the oldest are dropped "
         "(counted in the summary).")]
MqttDiscoveryOpt = Annotated[bool, typer.Option(
    "--mqtt-discovery/--no-mqtt-discovery",
    help="Home Assistant MQTT discovery: retained configs under homeassistant/ for what the task "
         "reports (entities appear by themselves); --no-mqtt-discovery removes them.")]
SummaryOpt = Annotated[SummaryFormat, typer.Option(
    "--summary", help="End-of-run summary on stderr: one text line or one JSON object.")]


@app.command("camera")
@cli_errors
def camera_command(
    ctx: typer.Context,
    model: Annotated[Path, typer.Argument(metavar="MODEL", show_default=False, help=(
        "A model of any task, or its *_edgetpu.tflite build, or a Coral model's name."))],
    task: TaskOpt = None, source: SourceOpt = "0", width: WidthOpt = None, height: HeightOpt = None,
    display: DisplayOpt = None, record: RecordOpt = None, max_frames: MaxFramesOpt = None,
    duration: DurationOpt = None, fmt: FormatOpt = None, output: OutputOpt = None,
    labels: LabelsOpt = None, top_k: TopKOpt = None, threshold: ThresholdOpt = None,
    resize: ResizeOpt = ResizeMode.stretch, drop_frames: DropOpt = None,
    reconnect: ReconnectOpt = 10.0, serve: ServeOpt = None, serve_fps: ServeFpsOpt = 10.0,
    serve_token: ServeTokenOpt = None, serve_token_file: ServeTokenFileOpt = None,
    mqtt: MqttOpt = None, mqtt_mode: MqttModeOpt = MqttMode.frames,
    mqtt_debounce: DebounceOpt = 1.0, mqtt_queue: MqttQueueOpt = 100,
    mqtt_discovery: MqttDiscoveryOpt = True,
    summary: SummaryOpt = SummaryFormat.text, mean: MeanOpt = None, std: StdOpt = None,
    device: DeviceOpt = None, cpu_model: CpuModelOpt = None, threads: ThreadsOneOpt = None,
    cpu_kernels: CpuKernelsOpt = CpuKernels.fast, runtime: RuntimeOpt = None,
    no_probe: NoProbeOpt = False, performance: PerformanceOpt = None,
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
    options = {"top_k": top_k, "threshold": threshold, "resize": resize.value}
    check_common(ctx.params, options)
    _check_flags(ctx)
    run = _CameraRun(ctx, options)
    ctx.call_on_close(run.close)
    stats = run.go()
    _finish(run, stats, summary)


def _given(ctx: typer.Context, name: str) -> bool:
    """The user typed this option (not its default)."""
    source = ctx.get_parameter_source(name)  # click's enum, or the one Typer bundles
    return source is not None and getattr(source, "name", "") != "DEFAULT"


def _check_flags(ctx: typer.Context) -> None:
    """Contradictions: a usage error when nothing could run, a warning for an option with no
    effect."""
    from edgeapp.flows.camera import has_display

    p = ctx.params
    finite("--serve-fps", p["serve_fps"])
    finite("--mqtt-debounce", p["mqtt_debounce"])
    finite("--duration", p.get("duration"))
    if p.get("duration") is not None and p["duration"] <= 0:
        raise UsageError(f"--duration {p['duration']:g} stops before the first frame: give seconds "
                         "above 0, or leave it out" +
                         (" (--max-frames stops on its own)" if p.get("max_frames") else ""))
    if p.get("display") and not has_display():
        raise UsageError("--display: there is no display here (DISPLAY is not set); use --no-display")
    output = p.get("output")
    if output is not None and output.exists() and output.is_dir():
        raise UsageError(f"--output {output} is a folder")
    unused = {"serve": ("serve_fps", "serve_token", "serve_token_file"),
              "mqtt": ("mqtt_mode", "mqtt_debounce", "mqtt_queue", "mqtt_discovery")}
    for parent, names in unused.items():
        if p.get(parent) is None:
            for name in names:
                if _given(ctx, name):
                    say(f"warning: --{name.replace('_', '-')} has no effect without --{parent}")
    if p.get("mqtt") is not None and p["mqtt_mode"] == MqttMode.frames and _given(ctx, "mqtt_debounce"):
        say("warning: --mqtt-debounce applies to --mqtt-mode events only")


class _CameraRun:
    """One `camera` run: the task opened on its devices, the frames' sinks, the loop."""

    def __init__(self, ctx: typer.Context, options: dict) -> None:
        self.p, self.ctx, self.options = ctx.params, ctx, options
        self.address = self.target = self.token = None
        self.live = self.publisher = self.writer = self.opened = self.health = None
        self.output_error: List[EdgeappError] = []
        self.stop = threading.Event()
        self._network()  # the addresses and paho checked before a model is opened

    def _network(self) -> None:
        if self.p.get("serve") is not None:
            from edgeapp.sinks.live_http import resolve_token
            from edgeapp.sinks.live_view import check_exposure, parse_serve

            self.address = parse_serve(self.p["serve"])
            self.token, declined = resolve_token(self.p.get("serve_token"), self.p.get("serve_token_file"))
            check_exposure(self.address, self.token, declined)
        if self.p.get("mqtt") is not None:
            from edgeapp.sinks.mqtt import paho_module, parse_mqtt_url

            self.target = parse_mqtt_url(self.p["mqtt"])
            paho_module()  # missing: exit 7 with the install line, before opening anything

    def go(self):
        from edgeapp.flows.camera import Display, Recorder, has_display, run_camera
        from edgeapp.hw.capture import OpenCVSource, ReconnectPolicy

        p = self.p
        cap = self.cap = OpenCVSource(p["source"], p.get("width"), p.get("height"))
        cap.check()  # a missing file fails before the model is loaded
        self.opened = opened = self._open()
        kind = opened.task.kind
        show = has_display() if p.get("display") is None else p["display"]
        if (p.get("width") or p.get("height")) and not cap.live:
            say("--width/--height ask a camera for a capture size; a file's frames keep their size")
        window = Display(f"edgeapp {Path(opened.engine.model_path).name}") if show else None
        self._records(show, kind)
        restore = _on_sigterm(self.stop)
        try:
            outputs = self._outputs(kind, cap.name)
            if self.publisher is not None and not cap.live:  # a file: every record to the broker
                self.publisher.wait_settled(MQTT_SETTLE)
            recorder = Recorder(str(p["record"])) if p.get("record") is not None else None
            return run_camera(cap, opened.task, drop=p.get("drop_frames"),
                              max_frames=p.get("max_frames"), duration=p.get("duration"),
                              reconnect=ReconnectPolicy(timeout=p["reconnect"]),
                              on_record=self._on_record if self.writer else None, display=window,
                              recorder=recorder, stop_event=self.stop, on_notice=say,
                              runner=opened.runner, outputs=outputs)
        finally:
            restore()
            self.close()

    def _open(self):
        from edgeapp.cli.options import resolve_model
        from edgeapp.flows.open_task import open_task

        p = self.p
        task = plain(p.get("task"))
        opened = open_task(p["model"], task, placement(self.ctx), options=self.options,
                           labels_file=p.get("labels"), mean=p.get("mean"), std=p.get("std"),
                           on_notice=say, resolve=resolve_model, frames=True, strict_options=False)
        for note in opened.task.kind.warnings(opened.model, p.get("labels")):
            say(f"warning: {note}")
        return opened

    def _records(self, show: bool, kind: Any) -> None:
        from edgeapp.sinks.records import Layout

        p, fmt = self.p, self.p.get("fmt")
        networked = self.address is not None or self.target is not None
        if p.get("output") is not None or (not show and not (networked and fmt is None)):
            self.writer = Layout(kind, frames=True).writer(fmt or Format.jsonl, p.get("output"))

    def _on_record(self, record: dict) -> None:
        """A results file that cannot be written (a full disk) stops the run, with its summary."""
        if self.output_error:
            return
        try:
            self.writer.write(record)
        except EdgeappError as e:
            self.output_error.append(e)
            self.stop.set()

    def _outputs(self, kind: Any, source: str) -> list:
        engine = self.opened.engine
        if self.address is not None or self.target is not None:  # the Edge TPU's heat (issue 23)
            from edgeapp.flows.tpu_health import TpuHealth

            perf = self.p.get("performance")
            self.health = TpuHealth(plain(perf)).start()
        if self.address is not None:  # first: a port in use fails before anything connects
            from edgeapp.sinks.live_view import LiveView

            note = engine.notice or ("the Edge TPU" if engine.device == "edgetpu" else "--device cpu")
            self.live = LiveView(self.address, fps=self.p["serve_fps"], kind=kind, token=self.token,
                                 extra=lambda: {**({"mqtt": self.publisher.summary()}
                                                   if self.publisher is not None else {}),
                                                **self.health.stats()},
                                 info={"model": Path(engine.model_path).name, "task": kind.name,
                                       "device": engine.device, "device_note": note,
                                       "source": source}).start()
            _announce(self.live, self.address, self.token)
        if self.target is not None:
            from edgeapp import __version__
            from edgeapp.sinks.ha_discovery import discovery_messages
            from edgeapp.sinks.mqtt import MqttOut

            mode = plain(self.p["mqtt_mode"])
            announce = discovery_messages(kind, self.opened.model.labels, self.target.prefix, mode,
                                          remove=not self.p["mqtt_discovery"],
                                          model=Path(engine.model_path).name, version=__version__)
            self.publisher = MqttOut(self.target, kind=kind, mode=mode,
                                     debounce=self.p["mqtt_debounce"], announce=announce,
                                     queue_size=self.p["mqtt_queue"], on_notice=say).start()
            self.health.publish_to(self.publisher)
        return [o for o in (self.live, self.publisher, self.health) if o is not None]

    def close(self) -> None:
        for part in (self.opened, self.live, self.publisher, self.writer, self.health):
            if part is not None:
                part.close()

    def extra(self) -> dict:
        out: dict = {}
        if self.live is not None:
            out["live_view"] = self.live.summary()
        if self.publisher is not None:
            out["mqtt"] = self.publisher.summary()
        return out


def _announce(live: Any, address: Any, token: Optional[str]) -> None:
    """The URLs to open. The token is shown only to a terminal (never to a log or a pipe: under
    systemd stderr is the journal)."""
    from edgeapp.sinks.live_view import exposure_warning

    warning = exposure_warning(address, live.port, token)
    if warning:
        say(warning)
    shown = token is not None and sys.stderr.isatty()
    for n, url in enumerate(live.urls):
        line = f"live view {'also on' if n else 'on'} {url}"
        if shown:
            line += f"?token={token}"
        elif token is not None and n == 0:
            line += f" (with its token: open {url}?token=YOUR-TOKEN once; the page keeps it)"
        say(line)


def _finish(run: _CameraRun, stats: Any, summary: SummaryFormat) -> None:
    """Warnings, the summary (text or JSON, the last line on stderr) and the exit code."""
    code, error = _outcome(run, stats)
    cap = run.cap
    missing = getattr(cap, "missing_frames", 0)
    if missing and stats.stop == "end of stream" and stats.captured:
        say(f"warning: {cap.name} ended after {cap.position} frame(s), {missing} short of the "
            f"{cap.declared_frames} its container declares (truncated?)")
    if error:
        say(f"error: {error}")
    extra = run.extra()
    if summary == SummaryFormat.json:
        typer.echo(json.dumps({**stats.summary(), "model": run.opened.engine.model_path,
                               "task": run.opened.task.name, **extra}), err=True)
    else:
        say(stats.summary_line() + _outputs_line(extra))
    if code != ExitCode.OK:
        raise typer.Exit(int(code))


def _outcome(run: _CameraRun, stats: Any) -> tuple:
    """(exit code, error line or None) of a finished run."""
    if run.output_error:
        stats.stop = "output error"
        return run.output_error[0].exit_code, str(run.output_error[0])
    if stats.stop == "interrupted":  # Ctrl-C: the summary, then 130 as every command
        return ExitCode.INTERRUPTED, None
    if stats.stop.startswith("capture error"):
        return ExitCode.ERROR, stats.stop
    if stats.captured == 0 and stats.stop == "end of stream":  # opened, but not one frame
        return ExitCode.DEVICE_UNAVAILABLE, (f"--source {run.cap.name}: no frame could be read "
                                             "(an empty or truncated video?)")
    if stats.lost:
        why = f" (last: {stats.reopen_error})" if stats.reopen_error else ""
        return ExitCode.DEVICE_UNAVAILABLE, (
            f"{run.cap.name}: camera/stream lost; no frames after {stats.reconnect_attempts} "
            f"reconnect attempt(s) in {run.p['reconnect']:g} s{why}")
    return ExitCode.OK, None


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


def _on_sigterm(stop: threading.Event):
    """SIGTERM (systemd stop, docker stop) stops cleanly like Ctrl-C; returns the undo."""
    if threading.current_thread() is not threading.main_thread() or sys.platform == "win32":
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return lambda: signal.signal(signal.SIGTERM, previous)
