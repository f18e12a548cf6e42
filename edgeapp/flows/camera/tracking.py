"""`camera --track`: identities, line counts and zone times over a detection run's frames.

One `TrackStage` per run sits between the task's result and the sinks (flows/camera/loop.py):
it gives each object of the record a `track_id` (core/track/tracking.py, ByteTrack), decides
which tracks crossed a counting line or entered or left a zone (core/track/zones.py), and turns
that into events: `track_started`, `track_ended` (duration, path length), `line_crossed` (line,
direction), `zone_entered`, `zone_left` (zone, seconds inside), and the `alert`s of `--alert`
rules (core/track/alerts.py). Counts go into the run's summary, the overlay, the live view and
MQTT; events into `--events FILE` (JSON lines) and MQTT. With `--track-score`, a track is shown,
counted and alerted on only while the median of its recent scores passes (core/track/score.py).
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, cast

from typing_extensions import TypedDict

from edgeapp.core.track.alerts import Alerts, Sighting
from edgeapp.core.track.rules import Rule
from edgeapp.core.track.score import ScoreHistory, TrackScore
from edgeapp.core.track.tracking import ByteTracker, Track, TrackerSettings
from edgeapp.core.track.zones import Line, Zone, centre, check_inside, crossing, inside, side
from edgeapp.errors import MissingDependency, WrongTask

if TYPE_CHECKING:
    from edgeapp.tasks.base import TaskKind

LOW = 0.1  # ByteTrack's floor: boxes down to this keep a track alive, never start one
TRAIL = 30  # centres kept per track for the overlay's trail
INSTALL = "pip install 'edgeapp[track]'"

# A line's counts: crossings each way, and per label ("in" is a keyword: the functional form).
LineCount = TypedDict("LineCount", {"in": int, "out": int, "by_label": Dict[str, Dict[str, int]]})


class ZoneCount(TypedDict):
    """A zone's counts: tracks inside now, entries and exits, and per label."""

    now: int
    entered: int
    left: int
    by_label: Dict[str, Dict[str, int]]


class TrackingCounts(TypedDict):
    """A stream's tracking counts (the summary's `tracking`, MQTT's retained counts, the overlay)."""

    tracks: int
    lines: Dict[str, LineCount]
    zones: Dict[str, ZoneCount]


class TrackingSummary(TrackingCounts, total=False):
    alerts: Dict[str, int]  # alerts fired per rule, with --alert or --rules


class EventTime(TypedDict):
    """When an event happened: the frame, the wall clock at capture, a file's own time."""

    frame: int
    timestamp: float
    source_ms: Optional[float]


@dataclass
class TrackingSettings:
    """What `--track`, `--count-line`, `--zone` and `--events` ask for (plain values)."""

    lines: Sequence[Line] = ()
    zones: Sequence[Zone] = ()
    events: Optional[Path] = None  # JSON lines, one per event
    lost_frames: int = 30
    rules: Sequence[Rule] = ()  # --alert, --rules
    track_score: Optional[TrackScore] = None  # --track-score median:0.6
    line_sources: Sequence[Optional[str]] = ()  # each line's source (`yard/door:...`); None: all
    zone_sources: Sequence[Optional[str]] = ()

    def for_source(self, name: str) -> "TrackingSettings":
        """The lines and zones one source counts: its own and the unscoped ones."""
        from dataclasses import replace

        def mine(items: Sequence, scopes: Sequence[Optional[str]]) -> list:
            scopes = list(scopes) or [None] * len(items)
            return [x for x, scope in zip(items, scopes) if scope is None or scope == name]

        return replace(self, lines=mine(self.lines, self.line_sources),
                       zones=mine(self.zones, self.zone_sources), line_sources=(), zone_sources=())


def check_tracking_available() -> None:
    """The tracker's assignment solver is SciPy's (the `track` extra): exit 7 without it."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        raise MissingDependency(f"--track needs SciPy (the track extra): {INSTALL}") from None


def check_trackable(kind: TaskKind) -> None:
    """--track follows a task's objects; other tasks are refused as another task's model."""
    if getattr(kind, "tracks", None) is None:
        raise WrongTask(f"--track follows detected objects: the model is {kind.noun}, not a "
                        "detection model")


@dataclass
class _State:
    """What the stage remembers of one track beyond the tracker's own state."""

    label: str
    first_t: float
    last_t: float
    first_frame: int
    last_frame: int
    path: float = 0.0
    last_point: Optional[tuple] = None
    trail: deque = field(default_factory=lambda: deque(maxlen=TRAIL))
    sides: Dict[str, int] = field(default_factory=dict)  # line -> last side taken
    crossed: set = field(default_factory=set)  # (line, direction) counted once per track
    zones: Dict[str, float] = field(default_factory=dict)  # zone -> entered at (s)


@dataclass(frozen=True)
class _Clock:
    """One frame's times: `t` the wall clock at capture, `source_ms` a file's own time."""

    frame: int
    t: float
    source_ms: Optional[float] = None

    @property
    def seconds(self) -> float:
        """What durations and dwell are measured in: the file's time, else the wall clock."""
        return self.source_ms / 1000.0 if self.source_ms is not None else self.t

    def fields(self) -> EventTime:
        return {"frame": self.frame, "timestamp": round(self.t, 3), "source_ms": self.source_ms}


class TrackStage:
    """Tracks, lines and zones for one stream of frames."""

    def __init__(self, settings: TrackingSettings, high: float, field: str = "objects",
                 labels: Optional[Callable[[int], str]] = None,
                 write_events: Optional[Callable[[List[dict]], None]] = None, source: str = "",
                 on_alert: Optional[Callable[[dict], None]] = None, stamp: bool = False) -> None:
        """`write_events` gets each frame's events (the --events file, opened by the run);
        `source`: the camera's name (rules' `source=`); `on_alert`: called with each alert
        before it is written anywhere, to fill in its clip's paths (sinks/clips.py); `stamp`:
        every event carries `source` (a run of several sources)."""
        self.settings, self.high, self.field = settings, high, field
        self.source, self.stamp = source, stamp
        self.alerts = Alerts(settings.rules, source) if settings.rules else None
        self.on_alert = on_alert
        self.scores = ScoreHistory(settings.track_score) if settings.track_score else None
        self.pending: Dict[int, Track] = {}  # confirmed tracks whose score does not pass yet
        self.tracker = ByteTracker(TrackerSettings(high=high, low=min(LOW, high),
                                                   lost_frames=settings.lost_frames))
        self.label_of = labels or str
        self.states: Dict[int, _State] = {}
        self.lines: List[Line] = []
        self.zones: List[Zone] = []
        self.size: Optional[tuple] = None
        self.counts = self._empty_counts(settings)
        self.frames = 0
        self.write_events = write_events

    @staticmethod
    def _empty_counts(settings: TrackingSettings) -> TrackingCounts:
        return {"tracks": 0,
                "lines": {x.name: {"in": 0, "out": 0, "by_label": {}} for x in settings.lines},
                "zones": {z.name: {"now": 0, "entered": 0, "left": 0, "by_label": {}}
                          for z in settings.zones}}

    def _place(self, width: int, height: int) -> None:
        """Lines and zones in this stream's pixels (checked against its first frame)."""
        check_inside(list(self.settings.lines) + list(self.settings.zones), width, height)
        self.size = (width, height)
        self.lines = [x.at(width, height) for x in self.settings.lines]
        self.zones = [z.at(width, height) for z in self.settings.zones]

    def update(self, fields: dict, frame: int, t: float, width: int, height: int,
               source_ms: Optional[float] = None) -> List[dict]:
        """Track this frame's objects (the record's `objects` get `track_id`; boxes below the
        display threshold stay only where they carry a track); the events of this frame. `t` is
        the wall clock at capture (the events' `timestamp`); `source_ms`, a video file's own
        time of the frame, which times durations and dwell when given (a file is processed
        faster or slower than it plays), else `t` does (a live source)."""
        clock = _Clock(frame, t, source_ms)
        if self.size is None:
            self._place(width, height)
        self.frames += 1
        objects = fields.get(self.field) or []
        step = self.tracker.update([o["bbox"] for o in objects], [o["score"] for o in objects],
                                   [o.get("id", 0) for o in objects])
        kept, events, moved = [], [], []
        self.pending.update((track.track_id, track) for track in step.started)
        weak = 0
        for o, tid, smooth in zip(objects, step.ids, step.smoothed):
            if tid is None and o["score"] < self.high:
                continue
            if tid is not None and self.scores is not None and not self.scores.add(tid, o["score"]):
                weak += 1  # not shown, counted or alerted on while its median fails
                continue
            kept.append({**o, "track_id": tid})
            if tid is not None:
                moved.append((tid, smooth, o["score"]))
        fields[self.field] = kept
        if self.scores is not None:
            fields["filtered"] = {**(fields.get("filtered") or {}), "track_score": weak}
        for tid, _, _ in moved:
            if tid in self.pending:
                events.append(self._start(self.pending.pop(tid), clock))
        for tid, smooth, _ in moved:
            events.extend(self._move(tid, smooth, clock))
        events.extend(self._alerts(moved, events, clock))
        for track in step.ended:
            events.extend(self._end(track, clock))
        self._write(events)
        return events

    def _alerts(self, moved: list, events: List[dict], clock: "_Clock") -> List[dict]:
        """The rules' alerts of this frame (their clip paths filled in by `on_alert`), timed in
        the clock's seconds (a file's own time), stamped with the wall clock as every event."""
        if self.alerts is None:
            return []
        seen = [Sighting(tid, self.states[tid].label,
                         frozenset(z.name for z in self.zones if inside(centre(box), z.points)), score)
                for tid, box, score in moved]
        fired = self.alerts.update(clock.frame, clock.seconds, seen,
                                   [e for e in events if e["event"] == "line_crossed"])
        for alert in fired:
            alert["timestamp"] = round(clock.t, 3)
            if self.on_alert is not None:
                self.on_alert(alert)
        return fired

    def finish(self, frame: int, t: float, source_ms: Optional[float] = None) -> List[dict]:
        """The stream ended (after frame `frame`, as `update` was told it): every track still
        alive ends (and leaves its zones)."""
        events: List[dict] = []
        clock = _Clock(frame, t, source_ms)
        for track in self.tracker.finish():
            events.extend(self._end(track, clock))
        self._write(events)
        return events

    def _start(self, track: Track, clock: "_Clock") -> dict:
        label = self.label_of(track.class_id)
        state = self.states[track.track_id] = _State(label, clock.seconds, clock.seconds, clock.frame,
                                                     clock.frame)
        if track.first_box is not None:  # seen before it was confirmed: the side it came from
            for line in self.lines:
                first = side(centre(track.first_box), line)
                if first:
                    state.sides[line.name] = first
        self.counts["tracks"] += 1
        return {"event": "track_started", **clock.fields(), "track_id": track.track_id, "label": label}

    def _move(self, tid: int, box: tuple, clock: "_Clock") -> List[dict]:
        """A track seen in this frame, at `box` (its smoothed box): path, lines, zones."""
        state = self.states[tid]
        point = centre(box)
        if state.last_point is not None:
            state.path += math.hypot(point[0] - state.last_point[0], point[1] - state.last_point[1])
        state.last_point, state.last_t, state.last_frame = point, clock.seconds, clock.frame
        state.trail.append((int(round(point[0])), int(round(point[1]))))
        base = {**clock.fields(), "track_id": tid, "label": state.label}
        events = []
        for line in self.lines:
            now = side(point, line)
            if now == 0:
                continue
            direction = crossing(state.sides.get(line.name), now)
            state.sides[line.name] = now
            if direction is None or (line.name, direction) in state.crossed:
                continue
            state.crossed.add((line.name, direction))
            self._count(self.counts["lines"][line.name], direction, state.label)
            events.append({"event": "line_crossed", **base, "line": line.name,
                           "direction": direction})
        for zone in self.zones:
            events.extend(self._zone(zone, state, inside(point, zone.points), base, clock.seconds))
        return events

    def _zone(self, zone: Zone, state: _State, now_inside: bool, base: dict, t: float) -> list:
        count = self.counts["zones"][zone.name]
        was = zone.name in state.zones
        if now_inside and not was:
            state.zones[zone.name] = t
            count["now"] += 1
            self._count(count, "entered", state.label)
            return [{"event": "zone_entered", **base, "zone": zone.name}]
        if was and not now_inside:
            entered = state.zones.pop(zone.name)
            count["now"] -= 1
            self._count(count, "left", state.label)
            return [{"event": "zone_left", **base, "zone": zone.name,
                     "seconds": round(t - entered, 3)}]
        return []

    @staticmethod
    def _count(counts: dict, key: str, label: str) -> None:
        counts[key] += 1
        per = counts["by_label"].setdefault(label, {})
        per[key] = per.get(key, 0) + 1

    def _end(self, track: Track, clock: "_Clock") -> List[dict]:
        self.pending.pop(track.track_id, None)
        if self.scores is not None:
            self.scores.end(track.track_id)
        if self.alerts is not None:
            self.alerts.end(track.track_id)
        state = self.states.pop(track.track_id, None)
        if state is None:
            return []
        base = {**clock.fields(), "track_id": track.track_id, "label": state.label}
        events = []
        for name in sorted(state.zones):  # a track that ends inside a zone leaves it
            entered = state.zones.pop(name)
            count = self.counts["zones"][name]
            count["now"] -= 1
            self._count(count, "left", state.label)
            events.append({"event": "zone_left", **base, "zone": name,
                           "seconds": round(state.last_t - entered, 3)})
        events.append({"event": "track_ended", **base, "first_frame": state.first_frame,
                       "last_frame": state.last_frame,
                       "duration": round(state.last_t - state.first_t, 3),
                       "path_length": round(state.path, 1),
                       "frames_seen": track.hits})
        return events

    def _write(self, events: List[dict]) -> None:
        if self.stamp:
            for event in events:
                event.setdefault("source", self.source)
        if self.write_events is not None and events:
            self.write_events(events)

    def trails(self) -> Dict[int, List[tuple]]:
        """Each live track's recent centres, for the overlay."""
        return {tid: list(s.trail) for tid, s in self.states.items()}

    def snapshot(self) -> tuple:
        """What the overlay draws for this frame (core/vision/overlay.draw_counting's arguments): the
        lines, zones, counts and trails as they are now, copied (drawn later, in another thread)."""
        return (self.lines, self.zones, json.loads(json.dumps(self.counts)), self.trails())

    def summary(self) -> TrackingSummary:
        out: TrackingSummary = {
            "tracks": self.counts["tracks"], "lines": self.counts["lines"],
            "zones": {k: {kk: vv for kk, vv in v.items()} for k, v in self.counts["zones"].items()}}
        if self.alerts is not None:
            out["alerts"] = dict(self.alerts.fired)
        return out

    def close(self) -> None:
        """Nothing of its own to close (the run closes the events file)."""


def merge_counts(parts: Sequence[TrackingSummary]) -> TrackingSummary:
    """Several sources' tracking summaries as one (numbers summed key by key, at every depth):
    what MQTT's retained counts, the live view and the run's totals show. A line or zone of
    one source is its count; one that every source counts sums theirs."""
    return cast(TrackingSummary, _summed(parts))  # the same keys, summed


def _summed(parts: Sequence[Mapping[str, object]]) -> dict:
    """Nested maps of numbers summed key by key, at every depth."""
    out: dict = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict):
                out[key] = _summed([out.get(key) or {}, value])
            else:
                out[key] = out.get(key, 0) + value
    return out
