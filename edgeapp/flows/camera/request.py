"""A camera run's options, declared once, and the one builder both faces call.

`CameraSettings` has one field per camera option: the CLI's flag in snake case (its Typer
declaration is cli/camera.py's `FLAGS`), the API's `Model.camera` keyword. `camera_request`
checks them (what needs --track, outputs that would overwrite each other, folders where files
are asked for), parses the counting lines and zones, and builds the tracking, live-view and
MQTT settings into the typed `CameraRequest` that flows/camera/run.py runs. A message names an
option as the face that was given it spells it (`Words`: `--count-line` for the CLI,
`count_lines` for the API).

To add an option: a field here (with `flag` metadata when its flag is not the field's name, and
`output` when it names a file the run writes), its flag in cli/camera.FLAGS; the run reads it as
`request.settings.<name>`.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from edgeapp.core.track.zones import check_names, parse_line, parse_zone
from edgeapp.errors import UsageError
from edgeapp.flows.camera.sources import NamedSource, check_scopes, parse_sources, split_scope
from edgeapp.flows.camera.tracking import TrackingSettings
from edgeapp.flows.open_task import Placement
from edgeapp.sinks.records import Format

if TYPE_CHECKING:
    from edgeapp.core.naming import PathLike

OUTPUT = {"output": True}  # metadata of a field naming a file the run writes (see `check_outputs`)


@dataclass
class CameraSettings:
    """What a camera run is asked, as the user wrote it: plain values, each field one option."""

    source: Any = ()  # one, a list (--source repeated) or a dict name -> source; (): camera 0
    width: Optional[int] = None
    height: Optional[int] = None
    display: Optional[bool] = None  # None: when there is a display
    record: Optional[Path] = field(default=None, metadata=OUTPUT)
    max_frames: Optional[int] = None
    duration: Optional[float] = None
    format: Optional[Any] = None  # sinks.records.Format or its name; None: JSON lines
    output: Optional[Path] = field(default=None, metadata=OUTPUT)
    drop_frames: Optional[bool] = None  # None: on for cameras and streams, off for files
    reconnect: float = 10.0
    serve: Optional[str] = None
    serve_fps: float = 10.0
    serve_token: Optional[str] = None
    serve_token_file: Optional[Path] = None
    mqtt: Optional[str] = None
    mqtt_mode: Any = "frames"
    mqtt_debounce: float = 1.0
    mqtt_queue: int = 100
    mqtt_discovery: bool = True
    track: bool = False
    count_lines: Sequence[str] = field(default=(), metadata={"flag": "--count-line"})
    zones: Sequence[str] = field(default=(), metadata={"flag": "--zone"})
    events: Optional[Path] = field(default=None, metadata=OUTPUT)
    track_score: Optional[str] = None  # median:SCORE
    alerts: Sequence[str] = field(default=(), metadata={"flag": "--alert"})
    rules: Optional[Path] = None  # a YAML or TOML file of alert rules
    clips: Optional[Path] = field(default=None, metadata=OUTPUT)  # a folder
    pre: float = 5.0
    post: float = 10.0
    clips_max_gb: float = 1.0
    notify: Sequence[str] = ()  # Apprise URLs
    notify_holdoff: float = 60.0
    notify_template: Optional[str] = None
    metrics_port: Optional[str] = None  # ADDRESS, as --serve's


SETTING_NAMES = tuple(f.name for f in fields(CameraSettings))
TRACKED = ("count_lines", "zones", "track_score", "alerts", "rules")  # need `track`


def flag(name: str) -> str:
    """The CLI's flag of a setting (`count_lines` -> `--count-line`)."""
    declared = next(f for f in fields(CameraSettings) if f.name == name).metadata.get("flag")
    return declared or "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Words:
    """How one face names settings in its messages: the CLI by flags, the API by keywords."""

    flags: bool

    def name(self, setting: str) -> str:
        return flag(setting) if self.flags else setting

    def turn_on(self, setting: str) -> str:
        return flag(setting) if self.flags else f"{setting}=True"


CLI_WORDS, API_WORDS = Words(True), Words(False)


@dataclass
class LiveViewSettings:
    """--serve: the address as users write it (PORT, HOST or HOST:PORT), viewers' frame rate,
    the token (or the file holding it); `show_token`: print the URL with its token (only to a
    terminal: a log or the journal must not get it)."""

    serve: str
    fps: float = 10.0
    token: Optional[str] = None
    token_file: Optional[Path] = None
    show_token: bool = False


@dataclass
class MqttSettings:
    """--mqtt: mqtt://[user:pass@]host[:port]/prefix, frames or events, and their knobs."""

    url: str
    mode: str = "frames"
    debounce: float = 1.0
    queue: int = 100
    discovery: bool = True


@dataclass
class CameraRequest:
    """What one camera run is asked to do: the model and how it opens, the settings as given,
    and what the builder made of them (live view, MQTT, tracking)."""

    model: Any
    task: Optional[str] = None  # None: the model's own
    place: Placement = field(default_factory=Placement)
    options: dict = field(default_factory=dict)  # the task's options (None: its default)
    labels_file: Any = None
    mean: Optional[float] = None
    std: Optional[float] = None
    settings: CameraSettings = field(default_factory=CameraSettings)
    records_format: Optional[Format] = None  # None: JSON lines
    records_stdout: Optional[bool] = False  # None: when nothing else shows the results
    live_view: Optional[LiveViewSettings] = None
    mqtt: Optional[MqttSettings] = None
    tracking: Optional[TrackingSettings] = None  # --track and its lines, zones, events, rules
    alerts: Any = None  # flows/camera/alerts.AlertSettings: --clips, --notify, --metrics-port
    on_record: Optional[Callable[[dict], None]] = None  # every frame's record, as it is made
    sources: List[NamedSource] = field(default_factory=list)  # the settings' `source`, named

    @property
    def several(self) -> bool:
        """More than one source: records and events say which one they are of."""
        return len(self.sources) > 1


def split_settings(given: Mapping[str, object]) -> Tuple[Dict[str, object], Dict[str, object]]:
    """(the camera's settings, the rest: the task's options) of the API's keywords."""
    return ({k: v for k, v in given.items() if k in SETTING_NAMES},
            {k: v for k, v in given.items() if k not in SETTING_NAMES})


def camera_request(settings: CameraSettings, words: Words, *, model: PathLike, task: Optional[str] = None,
                   place: Optional[Placement] = None, options: Optional[dict] = None,
                   labels_file: Optional[PathLike] = None, mean: Optional[float] = None, std: Optional[float] = None,
                   records_stdout: Optional[bool] = False, show_token: bool = False,
                   on_record: Optional[Callable[[dict], None]] = None) -> CameraRequest:
    """The request both faces run: `settings` checked (a UsageError names the option in
    `words`), paths as Paths, lines and zones parsed, the live view, MQTT and tracking built."""
    s = _paths(settings)
    sources = parse_sources(s.source, words.name("source"))
    _check(s, words)
    if len(sources) > 1 and s.clips is not None:
        raise UsageError(f"{words.name('clips')} records one source's clips: give one "
                         f"{words.name('source')}, or run one camera per source")
    if len(sources) > 1 and s.mqtt is not None and _plain(s.mqtt_mode) == "events":
        raise UsageError(f"{words.name('mqtt_mode')} events follows one source's changes: use "
                         "frames (each record has its source), or run one camera per source")
    view = mqtt = None
    if s.serve is not None:
        view = LiveViewSettings(s.serve, s.serve_fps, s.serve_token, s.serve_token_file,
                                show_token=show_token)
    if s.mqtt is not None:
        mqtt = MqttSettings(s.mqtt, _plain(s.mqtt_mode), s.mqtt_debounce, s.mqtt_queue,
                            s.mqtt_discovery)
    return CameraRequest(model=model, task=task, place=place or Placement(), options=options or {},
                         labels_file=labels_file, mean=mean, std=std, settings=s,
                         records_format=_format(s.format, words),
                         records_stdout=records_stdout, live_view=view, mqtt=mqtt,
                         tracking=_tracking(s, sources), alerts=_alert_outputs(s), on_record=on_record,
                         sources=sources)


def _paths(s: CameraSettings) -> CameraSettings:
    """Every path-typed setting as a Path (the API takes strings too)."""
    from dataclasses import replace

    changes: Dict[str, Any] = {}
    for f in fields(s):
        value, typed = getattr(s, f.name), str(f.type)  # the annotation as written
        if "Path" in typed and value is not None and not isinstance(value, Path):
            changes[f.name] = Path(value)
        elif "Sequence[" in typed:
            changes[f.name] = list(value or ())  # the CLI's None for a repeatable flag not given
    return replace(s, **changes)


def _format(value: Union[str, Enum, None], words: Words) -> Optional[Format]:
    if value is None:
        return None
    try:
        return Format(_plain(value))
    except ValueError:
        raise UsageError(f"{words.name('format')} {value!r}: one of "
                         f"{', '.join(f.value for f in Format)}") from None


def _plain(value: Union[str, Enum, None]) -> Any:
    """A choice's plain string (the CLI hands Enums)."""
    return getattr(value, "value", value)


def _check(s: CameraSettings, words: Words) -> None:
    """What cannot run, before anything opens."""
    if s.duration is not None and s.duration <= 0:
        raise UsageError(f"{words.name('duration')} {s.duration:g} stops before the first frame: "
                         "give seconds above 0, or leave it out" +
                         (f" ({words.name('max_frames')} stops on its own)" if s.max_frames else ""))
    if s.output is not None and _is_folder(s.output):
        raise UsageError(f"{words.name('output')} {s.output} is a folder")
    if not s.track:
        for name in TRACKED:
            if getattr(s, name):
                raise UsageError(f"{words.name(name)} counts tracked objects: add "
                                 f"{words.turn_on('track')}")
    if s.events is not None and _is_folder(s.events):
        raise UsageError(f"{words.name('events')} {s.events} is a folder")
    if (s.clips is not None or s.notify) and not (s.alerts or s.rules is not None):
        raise UsageError(f"{words.name('clips')} and {words.name('notify')} follow alerts: add "
                         f"{words.name('alerts')} or {words.name('rules')}")
    if s.clips is not None and s.clips.exists() and not _is_folder(s.clips):
        raise UsageError(f"{words.name('clips')} {s.clips} is a file, not a folder")
    check_outputs(s, words)


def _is_folder(path: Path) -> bool:
    """A folder where a file is asked for; a path that cannot even be looked at (too long, a
    link loop) is said when its file is opened."""
    try:
        return path.is_dir()
    except OSError:
        return False


def check_outputs(s: CameraSettings, words: Words) -> None:
    """Two outputs given one path would write over each other (half lines of each): refused.
    Every field with `output` metadata takes part."""
    seen: Dict[str, str] = {}
    for f in fields(s):
        path = getattr(s, f.name)
        if not f.metadata.get("output") or path is None:
            continue
        key = _same_file_key(Path(path))
        if key is None:
            continue
        if key in seen:
            raise UsageError(f"{seen[key]} and {words.name(f.name)} name the same file ({path}): "
                             "give each its own")
        seen[key] = words.name(f.name)


def _same_file_key(path: Path) -> Optional[str]:
    """One key for every name of one file: links resolved, and an existing file by its inode;
    None for a device (/dev/null), which two outputs may share."""
    try:
        st = path.stat()
    except OSError:
        return os.path.realpath(path)
    if stat.S_ISCHR(st.st_mode):  # /dev/null twice throws both away: nothing to mix
        return None
    return f"inode {st.st_dev}:{st.st_ino}"


def _tracking(s: CameraSettings, sources: List[NamedSource]) -> Optional[TrackingSettings]:
    """--track's settings: its lines, zones and alert rules parsed (a usage error names the
    flag), the rules checked against the lines and zones; a line or zone prefixed with a source's
    name (`yard/door:...`) is that source's only, and the source must be one of the run's."""
    if not s.track:
        return None
    from edgeapp.core.track.rules import check_rules
    from edgeapp.core.track.score import parse_track_score
    from edgeapp.flows.camera.alerts import read_rules

    line_scopes = [split_scope(x) for x in s.count_lines]
    zone_scopes = [split_scope(z) for z in s.zones]
    check_scopes([("--count-line", scope) for scope, _ in line_scopes] +
                 [("--zone", scope) for scope, _ in zone_scopes], sources)
    lines = [parse_line(x) for _, x in line_scopes]
    zones = [parse_zone(z) for _, z in zone_scopes]
    check_names(lines, zones)
    rules = read_rules(s.alerts, s.rules)
    check_rules(rules, [x.name for x in lines], [z.name for z in zones])
    return TrackingSettings(lines=lines, zones=zones, events=s.events, rules=rules,
                            line_sources=[scope for scope, _ in line_scopes],
                            zone_sources=[scope for scope, _ in zone_scopes],
                            track_score=parse_track_score(s.track_score) if s.track_score else None)


def _alert_outputs(s: CameraSettings) -> Any:
    """Where alerts go besides the events: clips, notifications, metrics (None: nowhere)."""
    if s.clips is None and not s.notify and s.metrics_port is None:
        return None
    from edgeapp.flows.camera.alerts import AlertSettings, MetricsSettings
    from edgeapp.sinks.clips import ClipSettings
    from edgeapp.sinks.notify import TEMPLATE, NotifySettings

    return AlertSettings(
        clips=ClipSettings(s.clips, s.pre, s.post, s.clips_max_gb) if s.clips is not None else None,
        notify=NotifySettings(list(s.notify), s.notify_holdoff, s.notify_template or TEMPLATE)
        if s.notify else None,
        metrics=MetricsSettings(s.metrics_port, s.serve_token, s.serve_token_file)
        if s.metrics_port is not None else None)

