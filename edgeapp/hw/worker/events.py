"""What an outage of an engine tells, as it happens: the events (`engine_lost` when a worker is
ended, `engine_recovered` when a step of the ladder brought the engine back) and the lines to
say (a step that needs root, once). Whoever runs a command listens (`listening`): camera's
--events file, MQTT and the live view's /stats, and every command's summary through `Tally`.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, Iterator, List, Optional

from typing_extensions import TypedDict

LOST, RECOVERED = "engine_lost", "engine_recovered"


class EngineEventDoc(TypedDict):
    """An event as --events, MQTT and /stats write it."""

    event: str  # engine_lost | engine_recovered
    device: str
    cause: str  # hang | crash | error | gone
    step: Optional[str]
    seconds: float
    at: float  # Unix time


class OutageCounts(TypedDict):
    """A command's summary of its engine outages."""

    engine_lost: int
    engine_recovered: int
    outage_seconds: float
    causes: Dict[str, int]  # cause -> outages
    steps: Dict[str, int]  # ladder step -> recoveries


@dataclass(frozen=True)
class EngineEvent:
    """{"event", "device", "cause", "step", "seconds"}: `cause` hang|crash|error|gone, `step`
    the ladder's step that brought the engine back (None while lost, or when none did),
    `seconds` since the outage began."""

    event: str
    device: str
    cause: str
    step: Optional[str]
    seconds: float
    at: float = field(default_factory=time.time)

    def as_dict(self) -> EngineEventDoc:
        out: EngineEventDoc = asdict(self)  # type: ignore[assignment]
        out["seconds"] = round(self.seconds, 3)
        out["at"] = round(self.at, 3)
        return out


OnEvent = Callable[[EngineEvent], None]
OnNotice = Callable[[str], None]
_lock = threading.Lock()
_listeners: List[tuple] = []
_said: set = set()


def publish(event: EngineEvent) -> None:
    for on_event, _ in list(_listeners):
        if on_event is not None:
            on_event(event)


def notify(text: str, once: bool = False) -> None:
    """A line for the user (a step that needs root); `once` per process."""
    with _lock:
        if once and text in _said:
            return
        _said.add(text)
    for _, on_notice in list(_listeners):
        if on_notice is not None:
            on_notice(text)


@contextmanager
def listening(on_event: Optional[OnEvent] = None, on_notice: Optional[OnNotice] = None) -> Iterator[None]:
    """Hear the events and lines for as long as the block runs."""
    entry = (on_event, on_notice)
    with _lock:
        _listeners.append(entry)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(entry)


class Tally:
    """The counts a summary gives: outages, recoveries by step, seconds without an engine."""

    def __init__(self) -> None:
        self.events: List[EngineEvent] = []
        self._lock = threading.Lock()

    def __call__(self, event: EngineEvent) -> None:
        with self._lock:
            self.events.append(event)

    @property
    def lost(self) -> int:
        return sum(1 for e in self.events if e.event == LOST)

    @property
    def recovered(self) -> int:
        return sum(1 for e in self.events if e.event == RECOVERED)

    @property
    def outage_seconds(self) -> float:
        return sum(e.seconds for e in self.events if e.event == RECOVERED)

    def summary(self) -> OutageCounts:
        causes: Dict[str, int] = {}
        steps: Dict[str, int] = {}
        for e in self.events:
            if e.event == LOST:
                causes[e.cause] = causes.get(e.cause, 0) + 1
            elif e.step:
                steps[e.step] = steps.get(e.step, 0) + 1
        return {"engine_lost": self.lost, "engine_recovered": self.recovered,
                "outage_seconds": round(self.outage_seconds, 3), "causes": causes, "steps": steps}

    def line(self) -> Optional[str]:
        """The summary's words, or None when nothing happened."""
        return outage_words(self.summary()) if self.events else None


def outage_words(s: OutageCounts) -> str:
    """A summary's words for its engine outages: how many, their causes, the steps that ended
    them, the time without the engine."""
    causes = ", ".join(f"{n} {c}" for c, n in sorted(s["causes"].items()))
    steps = ", ".join(f"{n} by {st}" for st, n in sorted(s["steps"].items()))
    return (f"engine lost {s['engine_lost']} time(s)" + (f" ({causes})" if causes else "")
            + f", recovered {s['engine_recovered']}" + (f" ({steps})" if steps else "")
            + f", {s['outage_seconds']:.1f} s without it")
