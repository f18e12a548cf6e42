"""Alert rules (core/track/rules.py) evaluated frame by frame over tracked objects, pure.

Each frame (at time `t`: a video file's position, a camera's clock) the caller says which
tracks it saw (`Sighting`: id, label, the zones their point is in now, score) and which line
crossings the tracking stage counted; `Alerts.update` answers with the alerts that fired on that
frame. A video file's time is its own, so it gives the same alerts on every run and machine.

- line: fires on a counted crossing (once per track and direction, as the stage counts them).
- zone: inside for `inertia` frames in a row is entered; outside for `inertia` in a row is
  left (a box flickering on the zone's edge neither enters nor leaves). Fires once per visit,
  when the track has been inside for `dwell` seconds counted from the first frame of the run
  that entered. A frame the track is not seen in (occluded) changes nothing.
- count: more than `over` tracks entered (with the same inertia) for `hold` seconds; fires once,
  and again only after the count has dropped to `over` or fewer.
- appear: a track seen `inertia` processed frames in a row; once per track.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Sequence

from typing_extensions import TypedDict

from edgeapp.core.track.rules import Rule


class Alert(TypedDict, total=False):
    """An alert event (a JSONL line, an MQTT message, a notification): which rule fired, on
    which track and frame, and what the rule's kind adds (`count` and `tracks` of a count rule,
    `seconds` of a dwell); sinks/clips.py fills `clip`, `snapshot` and `sidecar` when it saves them."""
    event: str  # "alert"
    rule: str
    kind: str
    track_id: Optional[int]
    label: Optional[str]
    source: Optional[str]
    frame: int
    timestamp: float
    media_time: float
    count: int
    tracks: List[int]
    seconds: float
    clip: Optional[str]
    snapshot: Optional[str]
    sidecar: Optional[str]

@dataclass(frozen=True)
class Sighting:
    """One tracked object in one frame."""

    track_id: int
    label: str
    zones: FrozenSet[str] = frozenset()  # the zones holding its point in this frame
    score: float = 0.0


@dataclass
class Presence:
    """Inside or outside, flipped only by `inertia` frames in a row saying the other."""

    inertia: int
    present: bool = False
    run: int = 0  # frames in a row that disagree with `present`
    run_start: Optional[float] = None
    since: Optional[float] = None  # inside since (the first frame of the run that entered)
    fired: bool = False  # this visit's alert went

    def see(self, inside: bool, t: float) -> None:
        if inside == self.present:
            self.run, self.run_start = 0, None
            return
        if self.run == 0:
            self.run_start = t
        self.run += 1
        if self.run >= self.inertia:
            self.present, self.since = inside, self.run_start if inside else None
            self.run, self.run_start, self.fired = 0, None, False


@dataclass
class _RuleState:
    zones: Dict[int, Presence] = field(default_factory=dict)  # track -> presence in the target
    seen_run: Dict[int, tuple] = field(default_factory=dict)  # track -> (last tick, frames in a row)
    fired_tracks: set = field(default_factory=set)  # appear: tracks already announced
    over_since: Optional[float] = None  # count: above `over` since
    count_fired: bool = False


class Alerts:
    """The rules of one camera (`source`: its name, for the rules' `source=`)."""

    def __init__(self, rules: Sequence[Rule], source: str) -> None:
        self.rules = list(rules)
        self.source = source
        self.states = {r.name: _RuleState() for r in self.rules}
        self.tick = 0
        self.fired: Dict[str, int] = {r.name: 0 for r in self.rules}

    def update(self, frame: int, t: float, seen: Sequence[Sighting],
               crossings: Sequence[dict] = ()) -> List[Alert]:
        """This frame's alerts. `crossings`: the stage's `line_crossed` events of this frame
        (track_id, label, line, direction)."""
        self.tick += 1
        out: List[Alert] = []
        for rule in self.rules:
            if rule.source is not None and rule.source != self.source:
                continue
            state = self.states[rule.name]
            if rule.kind == "line":
                out += [self._alert(rule, frame, t, c["track_id"], c["label"], c.get("score"))
                        for c in crossings
                        if c.get("line") == rule.target and rule.matches(c["label"], self.source)
                        and (rule.direction is None or c.get("direction") == rule.direction)]
            elif rule.kind == "zone":
                out += self._zone(rule, state, frame, t, seen)
            elif rule.kind == "count":
                out += self._count(rule, state, frame, t, seen)
            else:
                out += self._appear(rule, state, frame, t, seen)
        return out

    def end(self, track_id: int) -> None:
        """A track ended: whatever the rules remembered of it goes (a count drops it)."""
        for state in self.states.values():
            state.zones.pop(track_id, None)
            state.seen_run.pop(track_id, None)
            state.fired_tracks.discard(track_id)

    def _zone(self, rule: Rule, state: _RuleState, frame: int, t: float,
              seen: Sequence[Sighting]) -> List[Alert]:
        out = []
        for s in seen:
            if not rule.matches(s.label, self.source):
                continue
            p = state.zones.setdefault(s.track_id, Presence(rule.inertia))
            p.see(rule.target in s.zones, t)
            if p.present and not p.fired and p.since is not None and t - p.since >= rule.dwell - 1e-9:
                p.fired = True
                out.append(self._alert(rule, frame, t, s.track_id, s.label, s.score,
                                       seconds=round(t - p.since, 3)))
        return out

    def _count(self, rule: Rule, state: _RuleState, frame: int, t: float,
               seen: Sequence[Sighting]) -> List[Alert]:
        for s in seen:
            if rule.matches(s.label, self.source):
                state.zones.setdefault(s.track_id, Presence(rule.inertia)).see(rule.target in s.zones, t)
        inside = sorted(tid for tid, p in state.zones.items() if p.present)
        if len(inside) <= rule.over:
            state.over_since, state.count_fired = None, False
            return []
        if state.over_since is None:
            state.over_since = t
        if state.count_fired or t - state.over_since < rule.hold - 1e-9:
            return []
        state.count_fired = True
        labels = {s.track_id: s.label for s in seen}
        label = rule.label or ",".join(sorted({labels[i] for i in inside if i in labels})) or None
        return [self._alert(rule, frame, t, None, label, None, count=len(inside), tracks=inside)]

    def _appear(self, rule: Rule, state: _RuleState, frame: int, t: float,
                seen: Sequence[Sighting]) -> List[Alert]:
        out = []
        for s in seen:
            if s.track_id in state.fired_tracks or not rule.matches(s.label, self.source):
                continue
            last, run = state.seen_run.get(s.track_id, (None, 0))
            run = run + 1 if last == self.tick - 1 else 1
            state.seen_run[s.track_id] = (self.tick, run)
            if run >= rule.inertia:
                state.fired_tracks.add(s.track_id)
                state.seen_run.pop(s.track_id, None)
                out.append(self._alert(rule, frame, t, s.track_id, s.label, s.score))
        return out

    def _alert(self, rule: Rule, frame: int, t: float, track_id: Optional[int],
               label: Optional[str], score: Optional[float], **more) -> Alert:
        self.fired[rule.name] += 1
        return {"event": "alert", "rule": rule.name, "kind": rule.kind, "track_id": track_id,
                "label": label, "source": self.source, "frame": frame, "timestamp": round(t, 3),
                "media_time": round(t, 6),
                **more, "clip": None, "snapshot": None, "sidecar": None}
