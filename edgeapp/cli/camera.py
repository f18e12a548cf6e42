"""`edgeapp camera`: any task live from a camera, a stream or a video file.

This module parses and renders; the run itself (sources, sinks, health, outcome) is
flows/camera/run.py, which the Python API runs too. The command takes every task's camera options
(tasks/<name>.py, `TaskOption.paths`), so it is built when first asked for (cli/app.py).
"""

import inspect
import json
import signal
import sys
import threading
from dataclasses import MISSING, Field, dataclass, fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import typer
from typing_extensions import Annotated

from edgeapp import tasks
from edgeapp.cli import options as shared
from edgeapp.cli.options import check_common, choice_value, finite, given, resolved, say
from edgeapp.errors import ExitCode, UsageError
from edgeapp.hw.worker.events import outage_words
from edgeapp.sinks.records import Format

if TYPE_CHECKING:
    from edgeapp.flows.camera.request import CameraSettings
    from edgeapp.flows.camera.run import CameraOutcome
    from edgeapp.flows.open_task import Placement

SUMMARY = "Run a model on live frames: overlay, headless JSON lines, recording, summary."
HELP = SUMMARY + """

Capture runs in its own thread. For cameras and streams inference takes the newest frame and
stale ones are dropped (and counted); a file has every frame processed up to its end (a
truncated file ends early, with a warning). A camera lost mid-run is reopened with backoff for
--reconnect seconds, then the run stops with its summary (exit 5). Ctrl-C stops with the
summary (exit 130); SIGTERM likewise, with exit 0 (a service being stopped).

Headless: --serve shows the annotated stream and numbers in a browser; --mqtt publishes results
for home automation. With either, per-frame records go to stdout only if --format or --output
asks for them; a video file whose results could not all be delivered to the broker exits 3.
"""


class MqttMode(str, Enum):
    frames = "frames"
    events = "events"


class SummaryFormat(str, Enum):
    text = "text"
    json = "json"


SourceOpt = Annotated[Optional[List[str]], typer.Option(
    "--source", "-s", metavar="[NAME=]SOURCE",
    help="Camera index (0, the default), /dev/videoN, a video file, rtsp://... or a GStreamer "
         "pipeline ending in appsink. Repeatable: several sources share the model, each with its "
         "own capture, tracking and recording; NAME= names one (records' `source`, "
         "--count-line NAME/LINE:...). See docs/camera.md, Several sources.", show_default=False)]
WidthOpt = Annotated[Optional[int], typer.Option(
    "--width", min=1, help="Capture width to ask a camera for.", show_default=False)]
HeightOpt = Annotated[Optional[int], typer.Option(
    "--height", min=1, help="Capture height to ask a camera for.", show_default=False)]
DisplayOpt = Annotated[Optional[bool], typer.Option(
    "--display/--no-display", help="Show the annotated frames in a window (q or Esc quits). "
                                   "Default: when there is a display.", show_default=False)]
RecordOpt = Annotated[Optional[Path], typer.Option(
    "--record", help="Write the annotated frames to a video (.mp4, .mov or .avi; its folder is made).",
    metavar="OUT.mp4", show_default=False)]
MaxFramesOpt = Annotated[Optional[int], typer.Option(
    "--max-frames", min=1, help="Stop after this many processed frames.", show_default=False)]
DurationOpt = Annotated[Optional[float], typer.Option(
    "--duration", help="Stop after this many seconds (more than 0).", show_default=False)]
FormatOpt = Annotated[Optional[Format], typer.Option(
    "--format", "-f", help="Per-frame records: jsonl (default), csv or table. Written to stdout "
                           "when headless, or to --output.", show_default=False)]
OutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Write the per-frame records to FILE.", show_default=False)]
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
TrackOpt = Annotated[bool, typer.Option(
    "--track", help="Follow each detected object: a track_id per object that stays while it is "
                    "visible and through short gaps (ByteTrack), its trail on the overlay, "
                    "track_started / track_ended events. Detection models only; needs "
                    "`pip install 'edgeapp[track]'`.")]
CountLineOpt = Annotated[Optional[List[str]], typer.Option(
    "--count-line", metavar="NAME:x1,y1,x2,y2",
    help="With --track: count the tracks crossing this line, by direction (in: from the line's "
         "left to its right, facing from its first point to its second) and label, once per "
         "track. Pixels of the source, or 0..1 fractions of it. Repeatable.", show_default=False)]
ZoneOpt = Annotated[Optional[List[str]], typer.Option(
    "--zone", metavar="NAME:x1,y1,x2,y2,x3,y3,...",
    help="With --track: a polygon (3 points or more); each track's entering and leaving (with "
         "its time inside) and how many are in it now. Pixels or 0..1 fractions. Repeatable.",
    show_default=False)]
EventsOpt = Annotated[Optional[Path], typer.Option(
    "--events", metavar="FILE",
    help="Write one JSON line per event to FILE: the engine's (engine_lost, engine_recovered) and, "
         "with --track, the tracks' (track_started, track_ended, line_crossed, zone_entered, "
         "zone_left).", show_default=False)]
AlertOpt = Annotated[Optional[List[str]], typer.Option(
    "--alert", metavar="NAME:KIND[,key=value...]",
    help="With --track: fire an alert (an event; a clip with --clips, a notification with "
         "--notify) when NAME:line=LINE[,direction=in|out] is crossed, NAME:zone=ZONE[,dwell=S] "
         "is entered (and stayed in S seconds), NAME:count=ZONE,over=N[,for=S] holds more than N "
         "(for S seconds), or NAME:appear (a new track). Each kind takes label=L, source=S; zones "
         "and appear take inertia=N (frames in a row, default 3). Repeatable. See docs/alerts.md.",
    show_default=False)]
RulesOpt = Annotated[Optional[Path], typer.Option(
    "--rules", metavar="FILE", help="With --track: alert rules from a YAML or TOML file (as --alert "
                                    "writes them; see docs/alerts.md).", show_default=False)]
ClipsOpt = Annotated[Optional[Path], typer.Option(
    "--clips", metavar="DIR", help="On each alert, write DIR/<time>_<rule>_<track>.mp4 (from --pre "
                                   "seconds before the trigger to --post after), a .jpg snapshot of "
                                   "the track's best frame and a .json sidecar.", show_default=False)]
PreOpt = Annotated[float, typer.Option(
    "--pre", min=0.0, max=3600.0, metavar="SECONDS", help="Seconds of video a clip keeps before "
                                                          "its trigger (kept in memory as JPEG).")]
PostOpt = Annotated[float, typer.Option(
    "--post", min=0.0, max=3600.0, metavar="SECONDS",
    help="Seconds a clip goes on after its last alert (alerts in that time extend it).")]
ClipsMaxOpt = Annotated[float, typer.Option(
    "--clips-max-gb", min=0.001, metavar="GB", help="Keep at most this much in --clips (the oldest "
                                                     "files go first).")]
NotifyOpt = Annotated[Optional[List[str]], typer.Option(
    "--notify", metavar="URL",
    help="Send each alert through Apprise (ntfy://topic, tgram://..., mailto://..., json://host, "
         "~100 services), the snapshot attached where the service takes files; retried until "
         "delivered. Repeatable. Needs `pip install 'edgeapp[notify]'`.", show_default=False)]
NotifyHoldoffOpt = Annotated[float, typer.Option(
    "--notify-holdoff", min=0.0, metavar="SECONDS",
    help="The same rule on the same track notifies again only after this long.")]
NotifyTemplateOpt = Annotated[Optional[str], typer.Option(
    "--notify-template", metavar="TEXT",
    help="The message: an alert field's name in braces is replaced by its value (rule, label, "
         "source, track_id, frame, time, count). Default: the rule, label, source and time.",
    show_default=False)]
MetricsOpt = Annotated[Optional[str], typer.Option(
    "--metrics-port", metavar="ADDRESS",
    help="Prometheus metrics at http://ADDRESS/metrics (also at the live view's /metrics): PORT, "
         "HOST or HOST:PORT, 127.0.0.1 unless a HOST is given, then with --serve-token as the live "
         "view. Needs `pip install 'edgeapp[metrics]'`.", show_default=False)]
TrackScoreOpt = Annotated[Optional[str], typer.Option(
    "--track-score", metavar="median:SCORE",
    help="With --track: show, count and alert on a track only while the median of its recent "
         "scores is at least SCORE (e.g. median:0.6).", show_default=False)]
SummaryOpt = Annotated[SummaryFormat, typer.Option(
    "--summary", help="End-of-run summary on stderr: one text line or one JSON object.")]
SummaryFileOpt = Annotated[Optional[Path], typer.Option(
    "--summary-file", metavar="FILE", show_default=False,
    help="Write the summary (in --summary's form) to FILE instead of stderr, apart from the "
         "notices (its folder is made).")]


ModelArg = Annotated[Path, typer.Argument(metavar="MODEL", show_default=False, help=(
    "A model of any task, or its *_edgetpu.tflite build, or a Coral model's name."))]


# Each camera setting's flag (flows/camera/request.CameraSettings has the setting, its default
# and what it means to the run; a new setting's flag goes here).
FLAGS = {"source": SourceOpt, "width": WidthOpt, "height": HeightOpt, "display": DisplayOpt,
         "record": RecordOpt, "max_frames": MaxFramesOpt, "duration": DurationOpt, "format": FormatOpt,
         "output": OutputOpt, "drop_frames": DropOpt, "reconnect": ReconnectOpt, "serve": ServeOpt,
         "serve_fps": ServeFpsOpt, "serve_token": ServeTokenOpt, "serve_token_file": ServeTokenFileOpt,
         "mqtt": MqttOpt, "mqtt_mode": MqttModeOpt, "mqtt_debounce": DebounceOpt,
         "mqtt_queue": MqttQueueOpt, "mqtt_discovery": MqttDiscoveryOpt, "track": TrackOpt,
         "count_lines": CountLineOpt, "zones": ZoneOpt, "events": EventsOpt,
         "track_score": TrackScoreOpt, "alerts": AlertOpt, "rules": RulesOpt, "clips": ClipsOpt,
         "pre": PreOpt, "post": PostOpt, "clips_max_gb": ClipsMaxOpt, "notify": NotifyOpt,
         "notify_holdoff": NotifyHoldoffOpt, "notify_template": NotifyTemplateOpt,
         "metrics_port": MetricsOpt}


@dataclass
class CameraOptions:
    """What `edgeapp camera` was given besides the camera's settings: the model, how it opens,
    and how the outcome is rendered. Each field is one parameter (its annotation declares the
    flag). Help order: MODEL, --task, the settings up to --output, --labels, the tasks' camera
    options (cli/task_commands.camera_parameters), the other settings, then these fields."""

    model: ModelArg
    task: Any = None  # --task: its choices are the tasks' names, made when the command is built
    labels: shared.LabelsOpt = None
    summary: SummaryOpt = SummaryFormat.text
    summary_file: SummaryFileOpt = None
    mean: shared.MeanOpt = None
    std: shared.StdOpt = None
    device: shared.DeviceOpt = None
    cpu_model: shared.CpuModelOpt = None
    threads: shared.ThreadsOneOpt = None
    cpu_kernels: shared.CpuKernelsOpt = shared.CpuKernels.fast
    runtime: shared.RuntimeOpt = None
    no_probe: shared.NoProbeOpt = False
    performance: shared.PerformanceOpt = None
    isolate: shared.IsolateOpt = None
    invoke_timeout: shared.InvokeTimeoutOpt = None
    recover: shared.RecoverOpt = shared.Recover.reset
    retry_tpu: shared.RetryTpuOpt = 60.0
    cocompiled_check: shared.CocompiledCheckOpt = shared.CocompiledCheck.warn

    def placement(self, ctx: typer.Context) -> "Placement":
        return shared.placement(ctx, device=self.device, cpu_model=self.cpu_model, runtime=self.runtime,
                                threads=self.threads, no_probe=self.no_probe,
                                cpu_kernels=self.cpu_kernels, performance=self.performance,
                                isolate=self.isolate, invoke_timeout=self.invoke_timeout,
                                recover=self.recover, retry_tpu=self.retry_tpu,
                                cocompiled_check=self.cocompiled_check)


def command() -> Any:
    """The `camera` command, with every task's camera options."""
    from edgeapp.cli.task_commands import build_command, camera_parameters, given_options
    from edgeapp.flows.camera.request import CameraSettings

    def param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                 annotation=annotation)

    def default(f: Field) -> Any:
        if f.default is MISSING:
            return inspect.Parameter.empty
        return None if f.default == () else f.default  # a repeatable flag not given: None

    task_params, task_options = camera_parameters()
    mine = {f.name: param(f.name, _task_option() if f.name == "task" else f.type, default(f))
            for f in fields(CameraOptions)}
    settings = [param(f.name, FLAGS[f.name], default(f)) for f in fields(CameraSettings)]
    at = [p.name for p in settings].index("output") + 1
    signature = ([param("ctx", typer.Context, inspect.Parameter.empty), mine["model"], mine["task"]]
                 + settings[:at] + [mine["labels"]] + task_params + settings[at:]
                 + [p for name, p in mine.items() if name not in ("model", "task", "labels")])
    setting_names = {f.name for f in fields(CameraSettings)}

    def run(ctx: typer.Context, **values: Any) -> None:
        task_settings, _ = given_options(task_options, values)
        camera(ctx, CameraOptions(**{k: v for k, v in values.items() if k in mine}),
               CameraSettings(**{k: v for k, v in values.items() if k in setting_names}),
               {k: v for k, v in task_settings.items() if v is not None})

    return build_command(signature, run, "camera", HELP)


def _task_option() -> Any:
    names = shared.choices("TaskName", tasks.names())
    return Annotated[Optional[names], typer.Option(
        "--task", help="Default: the model's metadata, else the task its outputs are for.",
        show_default=False)]


def camera(ctx: typer.Context, values: CameraOptions, settings: "CameraSettings", options: dict) -> None:
    """Parse, run the flow, render the outcome."""
    from edgeapp.flows.camera.request import CLI_WORDS, camera_request
    from edgeapp.flows.camera.run import CameraRun

    v = values
    check_common(options, model=v.model, mean=v.mean, std=v.std, device=v.device, cpu_model=v.cpu_model,
                 labels=v.labels)
    _check_flags(ctx, settings)
    if v.summary_file is not None and v.summary_file.is_dir():
        raise UsageError(f"--summary-file {v.summary_file} is a folder")
    request = camera_request(settings, CLI_WORDS, model=v.model, task=choice_value(v.task),
                             place=v.placement(ctx), options=options, labels_file=v.labels,
                             mean=v.mean, std=v.std, records_stdout=None,
                             show_token=sys.stderr.isatty())
    request.model, request.place = resolved(request.model, request.place)  # once it can run
    stop = threading.Event()
    run = CameraRun(request, say, stop)
    restore = _on_sigterm(stop)
    try:
        outcome = run.run()
    finally:
        restore()
    _finish(outcome, v.summary, v.summary_file)


def _check_flags(ctx: typer.Context, s: "CameraSettings") -> None:
    """What only a command line can get wrong (Typer reads nan and inf as floats; a window
    without a display), and a warning for an option with no effect. The rest of what cannot run
    is the request builder's (flows/camera/request.py), for the API too."""
    from edgeapp.sinks.display import has_display

    finite("--serve-fps", s.serve_fps)
    finite("--mqtt-debounce", s.mqtt_debounce)
    finite("--duration", s.duration)
    for name in ("pre", "post", "clips_max_gb", "notify_holdoff"):
        finite(f"--{name.replace('_', '-')}", getattr(s, name))
    if s.display and not has_display():
        raise UsageError("--display: there is no display here (DISPLAY is not set); use --no-display")
    unused = [("serve", (s.serve, ("serve_fps",))),  # the token is --metrics-port's too
              ("serve", (s.serve or s.metrics_port, ("serve_token", "serve_token_file"))),
              ("mqtt", (s.mqtt, ("mqtt_mode", "mqtt_debounce", "mqtt_queue", "mqtt_discovery"))),
              ("clips", (s.clips, ("pre", "post", "clips_max_gb"))),
              ("notify", (s.notify or None, ("notify_holdoff", "notify_template")))]
    for parent, (value, names) in unused:
        if value is None:
            for name in names:
                if given(ctx, name):
                    say(f"warning: --{name.replace('_', '-')} has no effect without --{parent}")
    if s.mqtt is not None and choice_value(s.mqtt_mode) == "frames" and given(ctx, "mqtt_debounce"):
        say("warning: --mqtt-debounce applies to --mqtt-mode events only")


def _finish(outcome: "CameraOutcome", summary: SummaryFormat, summary_file: Optional[Path] = None) -> None:
    """Warnings, the summary (text or JSON, the last line on stderr, or `summary_file`) and
    the exit code."""
    for warning in outcome.warnings:
        say(f"warning: {warning}")
    if outcome.error is not None:
        say(f"error: {outcome.error}")
    if choice_value(summary) == "json":
        text = json.dumps(outcome.summary())
    else:
        lead = "" if summary_file else "edgeapp: "
        lines = outcome.summary_lines()
        tracked = outcome.source_outputs
        lines = [lead + line + ("; " + tracking_line(tracked[name]["tracking"])
                                if name in tracked else "")
                 for name, line in zip(list(outcome.sources) + [None], lines)]
        text = "\n".join(lines) + _outputs_line(outcome.outputs)
    if summary_file is None:
        typer.echo(text, err=True)
    else:
        try:
            summary_file.parent.mkdir(parents=True, exist_ok=True)
            summary_file.write_text(text + "\n", encoding="utf-8")
        except OSError as e:
            say(f"--summary-file {summary_file}: cannot write it ({e.strerror}); the summary: {text}")
    if outcome.interrupted:  # Ctrl-C: the summary, then 130 as every command
        raise typer.Exit(int(ExitCode.INTERRUPTED))
    if outcome.error is not None:
        raise typer.Exit(int(outcome.error.exit_code))


def _outputs_line(extra: dict) -> str:
    text = ""
    if "live_view" in extra:
        v = extra["live_view"]
        text += f"; live view: {v['viewers_total']} viewer(s), {v['frames_encoded']} frame(s) encoded"
    if "tracking" in extra:
        text += "; " + tracking_line(extra["tracking"])
    if "clips" in extra:
        c = extra["clips"]
        text += (f"; clips: {c['clips']} clip(s), {c['snapshots']} snapshot(s) in {c['folder']}, "
                 f"buffer peak {c['buffer_peak_bytes'] / 1e6:.1f} MB")
    if "notify" in extra:
        n = extra["notify"]
        text += f"; notify: {n['sent']} sent, {n['held']} held, {n['undelivered']} undelivered"
    if "engine" in extra:
        e = extra["engine"]
        text += f"; {outage_words(e)}, {e['frames_skipped']} frame(s) skipped"
    if "mqtt" in extra:
        m = extra["mqtt"]
        text += (f"; mqtt: {m['published']} published, {m['dropped']} dropped, "
                 f"{m['reconnects']} reconnect(s)")
    return text


def tracking_line(counts: dict) -> str:
    """The summary's words for --track: tracks, each line's crossings, each zone's visits."""
    parts = [f"{counts['tracks']} track(s)"]
    for name, c in counts["lines"].items():
        parts.append(f"line {name}: {c['in']} in, {c['out']} out")
    for name, c in counts["zones"].items():
        parts.append(f"zone {name}: {c['entered']} entered, {c['left']} left, {c['now']} inside")
    for name, n in (counts.get("alerts") or {}).items():
        parts.append(f"alert {name}: {n}")
    return ", ".join(parts)


def _on_sigterm(stop: threading.Event):
    """SIGTERM (systemd stop, docker stop) stops cleanly like Ctrl-C; returns the undo."""
    if threading.current_thread() is not threading.main_thread() or sys.platform == "win32":
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return lambda: signal.signal(signal.SIGTERM, previous)
