"""A camera run's engine outages (hw/worker/events.py), told as they happen: each event to
--events and MQTT (with a Home Assistant problem sensor, "Edge TPU lost"), the state to the
live view's /stats, and the counts, seconds and frames skipped to the summary.

A frame output (flows/camera/loop.FrameOutput): the frames a live source dropped while the
engine was gone are the frames skipped by the outage.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

from typing_extensions import TypedDict

from edgeapp.hw.worker.events import LOST, RECOVERED, EngineEvent, Tally

if TYPE_CHECKING:
    from edgeapp.sinks.mqtt import MqttOut


class EngineState(TypedDict):
    """The engine's state (the live view's /stats, MQTT, the summary): lost now or not, and the
    outages so far (hw/worker/events.Tally.summary's counts) with the frames they skipped."""

    lost: bool
    engine_lost: int
    engine_recovered: int
    outage_seconds: float
    causes: Dict[str, int]  # outages per cause
    steps: Dict[str, int]  # recoveries per step of the ladder
    frames_skipped: int


class EngineStats(TypedDict, total=False):
    """What /stats serves of the engine: nothing until an event happened."""

    engine: EngineState


class EngineWatch:
    """Listens to the engine events of one camera run (`__call__`) and sees its frames."""

    def __init__(self, write: Optional[Callable[[List[dict]], None]] = None) -> None:
        self.tally = Tally()
        self._write = write
        self._publish: Optional[Callable[[dict], None]] = None
        self._lock = threading.Lock()
        self.lost_now = False
        self.skipped = 0
        self._dropped: Dict[str, int] = {}  # frames dropped so far, per source (the loop's counts)
        self._dropped_at: Optional[Dict[str, int]] = None  # ... when the current outage began

    def publish_to(self, mqtt_out: MqttOut) -> None:
        """Also publish each event and the state to this MqttOut (sinks/mqtt.publish_engine)."""
        from edgeapp.sinks.mqtt import publish_engine

        first = [True]

        def publish(event: dict) -> None:
            publish_engine(mqtt_out, event, self.state(), discovery=first[0])
            first[0] = False

        self._publish = publish

    def __call__(self, event: EngineEvent) -> None:
        self.tally(event)
        with self._lock:
            if event.event == LOST and event.step is None:
                self.lost_now = True
                pending = self._dropped_at or {}  # sources not seen since the last outage: from then
                self._dropped_at = {**self._dropped, **pending}
            elif event.event == RECOVERED:
                self.lost_now = False
        record = event.as_dict()
        if self._write is not None:
            self._write([record])
        if self._publish is not None:
            self._publish(record)

    def on_frame(self, image: object, record: dict, *, stats: object = None, **_: object) -> None:
        if stats is None:
            return
        source = str(getattr(stats, "source", ""))
        with self._lock:
            if self._dropped_at is not None and not self.lost_now:  # each source's first frame back
                self.skipped += max(0, stats.dropped - self._dropped_at.pop(source, 0))
                if not self._dropped_at:
                    self._dropped_at = None
            self._dropped[source] = stats.dropped

    def state(self) -> EngineState:
        """The engine's state: lost now or not, and the counts so far."""
        return {"lost": self.lost_now, **self.tally.summary(), "frames_skipped": self.skipped}

    def stats(self) -> EngineStats:
        """What /stats serves: {"engine": ...} once something happened, else {}."""
        return {"engine": self.state()} if self.tally.events else {}

