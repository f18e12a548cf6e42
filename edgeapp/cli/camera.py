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
from enum import Enum
from pathlib import Path
from typing import Any, List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli import options as shared
from edgeapp.cli.options import check_common, choice_value, finite, given, say
from edgeapp.errors import ExitCode, UsageError
from edgeapp.sinks.records import Format

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
    help="With --track: write one JSON line per event (track_started, track_ended, line_crossed, "
         "zone_entered, zone_left) to FILE.", show_default=False)]
SummaryOpt = Annotated[SummaryFormat, typer.Option(
    "--summary", help="End-of-run summary on stderr: one text line or one JSON object.")]



# The camera's own options, in help order: (parameter, annotation, default). The tasks' options
# (cli/task_commands.camera_parameters) follow --labels.
OWN = (
    ("source", SourceOpt, "0"), ("width", WidthOpt, None),
    ("height", HeightOpt, None), ("display", DisplayOpt, None), ("record", RecordOpt, None),
    ("max_frames", MaxFramesOpt, None), ("duration", DurationOpt, None), ("fmt", FormatOpt, None),
    ("output", OutputOpt, None), ("labels", shared.LabelsOpt, None),
)
AFTER = (
    ("drop_frames", DropOpt, None), ("reconnect", ReconnectOpt, 10.0), ("serve", ServeOpt, None),
    ("serve_fps", ServeFpsOpt, 10.0), ("serve_token", ServeTokenOpt, None),
    ("serve_token_file", ServeTokenFileOpt, None), ("mqtt", MqttOpt, None),
    ("mqtt_mode", MqttModeOpt, MqttMode.frames), ("mqtt_debounce", DebounceOpt, 1.0),
    ("mqtt_queue", MqttQueueOpt, 100), ("mqtt_discovery", MqttDiscoveryOpt, True),
    ("track", TrackOpt, False), ("count_line", CountLineOpt, None), ("zone", ZoneOpt, None),
    ("events", EventsOpt, None), ("summary", SummaryOpt, SummaryFormat.text), ("mean", shared.MeanOpt, None),
    ("std", shared.StdOpt, None), ("device", shared.DeviceOpt, None),
    ("cpu_model", shared.CpuModelOpt, None), ("threads", shared.ThreadsOneOpt, None),
    ("cpu_kernels", shared.CpuKernelsOpt, shared.CpuKernels.fast),
    ("runtime", shared.RuntimeOpt, None), ("no_probe", shared.NoProbeOpt, False),
    ("performance", shared.PerformanceOpt, None),
)
ModelArg = Annotated[Path, typer.Argument(metavar="MODEL", show_default=False, help=(
    "A model of any task, or its *_edgetpu.tflite build, or a Coral model's name."))]


def command() -> Any:
    """The `camera` command, with every task's camera options."""
    from edgeapp.cli.task_commands import build_command, camera_parameters, given_options

    def param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                 annotation=annotation)

    task_params, task_options = camera_parameters()
    signature = ([param("ctx", typer.Context, inspect.Parameter.empty),
                  param("model", ModelArg, inspect.Parameter.empty),
                  param("task", _task_option(), None)]
                 + [param(*o) for o in OWN] + task_params + [param(*o) for o in AFTER])

    def run(ctx: typer.Context, **values: Any) -> None:
        settings, _ = given_options(task_options, values)
        camera(ctx, {k: v for k, v in settings.items() if v is not None})

    return build_command(signature, run, "camera", HELP)


def _task_option() -> Any:
    from edgeapp import tasks

    names = shared.choices("TaskName", tasks.names())
    return Annotated[Optional[names], typer.Option(
        "--task", help="Default: the model's metadata, else the task its outputs are for.",
        show_default=False)]


def camera(ctx: typer.Context, options: dict) -> None:
    """Parse, run the flow, render the outcome."""
    from edgeapp.flows.camera.run import CameraRun

    check_common(ctx.params, options)
    _check_flags(ctx)
    stop = threading.Event()
    run = CameraRun(_request(ctx, options), say, stop)
    restore = _on_sigterm(stop)
    try:
        outcome = run.run()
    finally:
        restore()
    _finish(outcome, ctx.params["summary"])


def _request(ctx: typer.Context, options: dict) -> Any:
    from edgeapp.cli.options import placement, resolve_model
    from edgeapp.flows.camera.run import CameraRequest, LiveViewSettings, MqttSettings

    p = ctx.params
    view = mqtt = None
    if p.get("serve") is not None:
        view = LiveViewSettings(p["serve"], p["serve_fps"], p.get("serve_token"),
                                p.get("serve_token_file"), show_token=sys.stderr.isatty())
    if p.get("mqtt") is not None:
        mqtt = MqttSettings(p["mqtt"], choice_value(p["mqtt_mode"]), p["mqtt_debounce"],
                            p["mqtt_queue"], p["mqtt_discovery"])
    return CameraRequest(
        model=p["model"], task=choice_value(p.get("task")), place=placement(ctx), options=options,
        labels_file=p.get("labels"), mean=p.get("mean"), std=p.get("std"), source=p["source"],
        width=p.get("width"), height=p.get("height"), display=p.get("display"),
        record=p.get("record"), max_frames=p.get("max_frames"), duration=p.get("duration"),
        drop_frames=p.get("drop_frames"), reconnect=p["reconnect"], records_format=p.get("fmt"),
        records_output=p.get("output"), records_stdout=None, live_view=view, mqtt=mqtt,
        resolve=resolve_model, tracking=_tracking(p))


def _tracking(p: dict) -> Any:
    """--track's settings: its lines and zones parsed (a usage error names the flag)."""
    if not p.get("track"):
        return None
    from edgeapp.core.zones import parse_line, parse_zone
    from edgeapp.flows.camera.tracking import TrackingSettings

    return TrackingSettings(lines=[parse_line(x) for x in p.get("count_line") or ()],
                            zones=[parse_zone(z) for z in p.get("zone") or ()],
                            events=p.get("events"))


def _check_flags(ctx: typer.Context) -> None:
    """Contradictions: a usage error when nothing could run, a warning for an option with no
    effect."""
    from edgeapp.sinks.display import has_display

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
    if not p.get("track"):
        for name in ("count_line", "zone", "events"):
            if p.get(name):
                raise UsageError(f"--{name.replace('_', '-')} counts tracked objects: add --track")
    events = p.get("events")
    if events is not None and events.exists() and events.is_dir():
        raise UsageError(f"--events {events} is a folder")
    unused = {"serve": ("serve_fps", "serve_token", "serve_token_file"),
              "mqtt": ("mqtt_mode", "mqtt_debounce", "mqtt_queue", "mqtt_discovery")}
    for parent, names in unused.items():
        if p.get(parent) is None:
            for name in names:
                if given(ctx, name):
                    say(f"warning: --{name.replace('_', '-')} has no effect without --{parent}")
    if p.get("mqtt") is not None and choice_value(p["mqtt_mode"]) == "frames" and \
            given(ctx, "mqtt_debounce"):
        say("warning: --mqtt-debounce applies to --mqtt-mode events only")


def _finish(outcome: Any, summary: Any) -> None:
    """Warnings, the summary (text or JSON, the last line on stderr) and the exit code."""
    for warning in outcome.warnings:
        say(f"warning: {warning}")
    if outcome.error is not None:
        say(f"error: {outcome.error}")
    if choice_value(summary) == "json":
        typer.echo(json.dumps(outcome.summary()), err=True)
    else:
        say(outcome.stats.summary_line() + _outputs_line(outcome.outputs))
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
    return ", ".join(parts)


def _on_sigterm(stop: threading.Event):
    """SIGTERM (systemd stop, docker stop) stops cleanly like Ctrl-C; returns the undo."""
    if threading.current_thread() is not threading.main_thread() or sys.platform == "win32":
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return lambda: signal.signal(signal.SIGTERM, previous)
