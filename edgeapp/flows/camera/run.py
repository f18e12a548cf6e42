"""A whole camera run, for the CLI's `camera` and the API's `Model.camera`: the model opened for
its task on its devices, the source, the sinks (per-frame records, a window, a recording, the
live view, MQTT, the Edge TPU's health), the frame loop (flows/camera/loop.py), and the outcome:
statistics, warnings and the error that decides the exit code.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

from typing_extensions import TypedDict

from edgeapp.core.version import VERSION
from edgeapp.errors import DeviceUnavailable, EdgeappError, InputError
from edgeapp.flows.camera.alerts import AlertOutputs, AlertSummary
from edgeapp.flows.camera.engine_watch import EngineState, EngineWatch
from edgeapp.flows.camera.loop import CameraStats, EngineLoad, RunStats, Sinks, Stream, StreamSummary, run_cameras
from edgeapp.flows.camera.request import CameraRequest
from edgeapp.flows.camera.sources import record_path
from edgeapp.flows.camera.tpu_health import TpuHealth
from edgeapp.flows.camera.tracking import TrackStage, check_trackable, check_tracking_available, merge_counts
from edgeapp.flows.open_task import open_task
from edgeapp.hw.capture import OpenCVSource, ReconnectPolicy
from edgeapp.hw.worker import events as engine_events
from edgeapp.sinks.display import Display, has_display
from edgeapp.sinks.event_file import EventFile
from edgeapp.sinks.ha_discovery import counting_discovery, discovery_messages
from edgeapp.sinks.recorder import Recorder
from edgeapp.sinks.records import Format, Layout

if TYPE_CHECKING:
    from edgeapp.flows.camera.tracking import TrackingSummary
    from edgeapp.sinks.ha_discovery import MqttSummary
    from edgeapp.sinks.live_http import LiveSummary
    from edgeapp.tasks.base import TaskKind

MQTT_SETTLE = 10.0  # seconds a file's run waits for the broker's first answer before its frames
Notice = Callable[[str], None]


class CameraOutputs(AlertSummary, total=False):
    """What the outputs that ran say, in the summary (and the outcome's `outputs`)."""

    live_view: LiveSummary
    mqtt: MqttSummary
    tracking: TrackingSummary  # one source's, or with several theirs summed
    engine: EngineState  # when the engine was lost at least once


class SourceOutputs(TypedDict, total=False):
    tracking: TrackingSummary  # with several sources, each one's


class SourceSummary(StreamSummary, SourceOutputs):
    """One source's statistics and tracking, in the summary of a run of several."""


class OneSourceSummary(StreamSummary, CameraOutputs):
    """The JSON summary of a run of one source: its statistics, the model, the devices."""

    model: str
    task: str
    engines: Dict[str, EngineLoad]


class SourcesSummary(CameraOutputs):
    """The JSON summary of a run of several sources: each one's, the totals, the devices."""

    sources: List[SourceSummary]
    frames_captured: int
    frames_processed: int
    frames_dropped: int
    seconds: float
    fps: float
    device: str
    stop: str
    engines: Dict[str, EngineLoad]
    model: str
    task: str


@dataclass
class CameraOutcome:
    """How a run ended: its statistics, what the outputs say, and the error (None: success).
    `stats`: the one source's, or with several the run's totals; `sources`: each source's, in
    the order given (name -> stats); `engines`: each device's frames and busy fraction."""

    stats: CameraStats
    model: str
    task: str
    outputs: CameraOutputs
    warnings: List[str]
    error: Optional[EdgeappError] = None
    sources: Dict[str, CameraStats] = field(default_factory=dict)
    engines: Dict[str, EngineLoad] = field(default_factory=dict)
    source_outputs: Dict[str, SourceOutputs] = field(default_factory=dict)  # per source: its tracking

    @property
    def interrupted(self) -> bool:
        return self.stats.stop == "interrupted"

    @property
    def several(self) -> bool:
        return len(self.sources) > 1

    def summary(self) -> Union[OneSourceSummary, SourcesSummary]:
        """The JSON summary: one source's statistics as ever (and `engines`); with several,
        the run's totals, `sources` (each one's statistics and tracking) and `engines`."""
        if not self.several:
            return {**self.stats.summary(), "model": self.model, "task": self.task,
                    "engines": self.engines, **self.outputs}
        total = self.stats
        return {"sources": [{**s.summary(), **self.source_outputs.get(name, {})}
                            for name, s in self.sources.items()],
                "frames_captured": total.captured, "frames_processed": total.processed,
                "frames_dropped": total.dropped, "seconds": round(total.seconds, 3),
                "fps": round(total.fps, 2), "device": total.device, "stop": total.stop,
                "engines": self.engines, "model": self.model, "task": self.task, **self.outputs}

    def summary_lines(self) -> List[str]:
        """The text summary: one line per source, and with several a last line of totals and
        each device's busy fraction."""
        if not self.several:
            return [self.stats.summary_line()]
        total = self.stats
        busy = ", ".join(f"{device} busy {load['busy'] * 100:.0f}%"
                         for device, load in self.engines.items()) or "no frame ran"
        return [s.summary_line() for s in self.sources.values()] + [
            f"{len(self.sources)} sources: {total.captured} frame(s) captured, {total.processed} "
            f"processed, {total.dropped} dropped in {total.seconds:.2f} s ({total.fps:.1f} FPS); "
            f"{busy}"]


class CameraRun:
    """One run. Made first (the network settings and paho are checked before a model is
    opened), then `run()` once; it closes everything it opened, whatever happens."""

    def __init__(self, request: CameraRequest, on_notice: Optional[Notice] = None,
                 stop: Optional[threading.Event] = None) -> None:
        self.request, self.say = request, on_notice or (lambda _text: None)
        self.stop = stop or threading.Event()
        self.address = self.target = self.token = None
        self.opened = self.live = self.publisher = self.writer = self.health = None
        self.caps: List[OpenCVSource] = []  # one per source, in the order given
        self.events: Optional[EventFile] = None
        self.trackers: Dict[str, TrackStage] = {}  # per source, with --track
        self.engine_watch: Optional[EngineWatch] = None
        self.output_error: List[EdgeappError] = []
        self._events_lock = threading.Lock()  # the loop and the clips' writer both write events
        self._network()
        if request.tracking is not None:
            check_tracking_available()  # missing: exit 7 with the install line, before the model
        self.alerting = (AlertOutputs(request.alerts, self.say)
                         if request.alerts is not None else None)

    def _network(self) -> None:
        view, mqtt = self.request.live_view, self.request.mqtt
        if view is not None:
            from edgeapp.sinks.live_http import resolve_token
            from edgeapp.sinks.live_view import check_exposure, parse_serve

            self.address = parse_serve(view.serve)
            self.token, declined = resolve_token(view.token, view.token_file)
            check_exposure(self.address, self.token, declined)
        if mqtt is not None:
            from edgeapp.sinks.mqtt import paho_module, parse_mqtt_url

            self.target = parse_mqtt_url(mqtt.url)
            paho_module()  # missing: exit 7 with the install line, before opening anything

    def run(self) -> CameraOutcome:
        r, s = self.request, self.request.settings
        try:
            for named in r.sources:  # a camera or file that cannot be opened fails before the
                cap = OpenCVSource(named.spec, s.width, s.height)  # model and the live view
                self.caps.append(cap)
                cap.open()
                if named.named:
                    cap.name = named.name
            recorders = [Recorder(str(record_path(s.record, named, r.several)))
                         if s.record is not None else None for named in r.sources]
            if s.events is not None:  # before the model, too
                self.events = EventFile(s.events)
            self.opened = opened = self._open()
            kind = opened.task.kind
            show = has_display() if s.display is None else s.display
            if (s.width or s.height) and not all(cap.live for cap in self.caps):
                self.say("--width/--height ask a camera for a capture size; a file's frames keep "
                         "their size")
            self._records(show, kind)
            self._alerts(kind)
            self._tracking(kind)
            outputs = self._outputs(kind, ", ".join(cap.name for cap in self.caps))
            for event in opened.engine_events:  # a worker lost while the model opened
                self.engine_watch(event)
            if self.publisher is not None and not all(cap.live for cap in self.caps):
                self.publisher.wait_settled(MQTT_SETTLE)  # a file: every record to the broker
            streams = self._streams(show, recorders, outputs)
            with engine_events.listening(self.engine_watch, self.say):
                ran = run_cameras(streams, self._runner(), kind=kind, drop=s.drop_frames,
                                  max_frames=s.max_frames, duration=s.duration,
                                  reconnect=ReconnectPolicy(timeout=s.reconnect),
                                  stop_event=self.stop, on_notice=self.say)
        finally:
            self.close()
        return self._outcome(ran)

    def _streams(self, show: bool, recorders: list, outputs: list) -> List[Stream]:
        """Each source with its own window, recording, tracking and cascade state (a cascade's
        tracks are one source's: the second model is shared, what it remembers is not)."""
        r, opened = self.request, self.opened
        on_record = self._on_record if self.writer or r.on_record else None
        title = f"edgeapp {Path(opened.engine.model_path).name}"
        streams = []
        for named, cap, recorder in zip(r.sources, self.caps, recorders):
            cascade = opened.cascade
            if cascade is not None and r.several:
                cascade = replace(cascade, runs=0, _tracks={})
            window = Display(f"{title} {named.name}" if r.several else title) if show else None
            sinks = Sinks(on_record, window, recorder, outputs, tracking=self.trackers.get(named.name),
                          cascade=cascade, counts=self._tracking_summary)
            streams.append(Stream(cap, sinks, named.name if named.named else None))
        return streams

    def _runner(self) -> Any:
        """The opened model's runner; with --motion, its frames carry the regions that moved."""
        opened = self.opened
        if not opened.task.options.get("motion"):
            return opened.runner
        from edgeapp.flows.camera.motion_stage import MotionRunner

        return MotionRunner(opened.runner, max(opened.task.spec.size),
                            stream_of=lambda key: key[0])  # the loop's key: (source's feed, frame, t0)

    def _open(self) -> Any:
        r = self.request
        options = r.options
        if r.tracking is not None and options.get("track_low") is None:
            from edgeapp.flows.camera.tracking import LOW  # weaker boxes too: they keep tracks alive

            options = {**options, "track_low": LOW}
        opened = open_task(r.model, r.task, r.place, options=options, labels_file=r.labels_file,
                           mean=r.mean, std=r.std, on_notice=self.say, frames=True,
                           strict_options=False)
        for note in opened.notices:
            self.say(note)
        for note in opened.task.warnings(r.labels_file):
            self.say(f"warning: {note}")
        return opened

    def _records(self, show: bool, kind: TaskKind) -> None:
        r = self.request
        to_stdout = r.records_stdout
        if to_stdout is None:  # the CLI's rule: records unless a window or a sink shows them
            networked = self.address is not None or self.target is not None
            to_stdout = not show and not (networked and r.records_format is None)
        if r.settings.output is not None or to_stdout:
            layout = Layout(kind, frames=True, tracked=r.tracking is not None,
                            sourced=any(named.named for named in r.sources))
            self.writer = layout.writer(r.records_format or Format.jsonl, r.settings.output)

    def _tracking(self, kind: TaskKind) -> None:
        """--track: the stage that follows the objects, at the task's display threshold."""
        settings = self.request.tracking
        if settings is None:
            return
        check_trackable(kind)
        labels = self.opened.model.labels or {}
        high = kind.track_threshold(self.opened.task.plan)
        for named, cap in zip(self.request.sources, self.caps):
            self.trackers[named.name] = TrackStage(
                settings.for_source(named.name), high, kind.tracks,
                labels=lambda i: str(labels.get(int(i), i)),
                write_events=self._write_events if self.events else None, source=cap.name,
                on_alert=self.alerting.claim if self.alerting is not None else None,
                stamp=named.named)

    def _tracking_summary(self) -> TrackingSummary:
        """The tracking counts: one source's, or with several, theirs summed (merge_counts)."""
        if len(self.trackers) == 1:
            return next(iter(self.trackers.values())).summary()
        return merge_counts([tracker.summary() for tracker in self.trackers.values()])

    def _alerts(self, kind: TaskKind) -> None:
        """Clips, notifications and metrics, before the tracking stage that feeds them."""
        if self.alerting is None:
            return
        if self.alerting.wants_health:
            self.health = TpuHealth(self.request.place.engine.performance).start()
        if self.events is not None:  # a clip that cannot be written: its event
            self.alerting.on_event = lambda e: self._write_events([e])
        cap = self.caps[0]  # clips take one source (request.py refuses --clips with several)
        self.alerting.start(kind, ", ".join(c.name for c in self.caps), cap.fps or 30.0, self.health,
                            lambda: self.engine_watch.state() if self.engine_watch is not None else None)

    def _on_record(self, record: dict) -> None:
        """A results file that cannot be written (a full disk) stops the run, with its summary."""
        if self.request.on_record is not None:
            self.request.on_record(record)
        if self.writer is not None:
            self._output(self.writer.write, record)

    def _write_events(self, events: List[dict]) -> None:
        """The --events file, as the records: a write error stops the run, with its summary."""
        with self._events_lock:
            self._output(self.events.write, events)

    def _output(self, write: Callable[[Any], None], what: Any) -> None:
        if self.output_error:
            return
        try:
            write(what)
        except EdgeappError as e:
            self.output_error.append(e)
            self.stop.set()

    def _outputs(self, kind: TaskKind, source: str) -> list:
        if (self.address is not None or self.target is not None) and self.health is None:
            self.health = TpuHealth(self.request.place.engine.performance).start()  # heat, clock
        self.engine_watch = EngineWatch(self._write_events if self.events else None)
        if self.address is not None:  # first: a port in use fails before anything connects
            self._live_view(kind, source)
        if self.target is not None:
            self._mqtt(kind)
        more = self.alerting.outputs() if self.alerting is not None else []
        return [o for o in (self.live, self.publisher, self.health, self.engine_watch)
                if o is not None] + more

    def _live_view(self, kind: TaskKind, source: str) -> None:
        from edgeapp.sinks.live_view import LiveView, announcement

        engine, view = self.opened.engine, self.request.live_view
        note = engine.notice or ("the Edge TPU" if engine.device == "edgetpu" else "--device cpu")
        self.live = LiveView(self.address, fps=view.fps, kind=kind, token=self.token,
                             extra=lambda: {**({"mqtt": self.publisher.summary()}
                                               if self.publisher is not None else {}),
                                            **({"tracking": self._tracking_summary()}
                                               if self.trackers else {}),
                                            **self.health.stats(), **self.engine_watch.stats()},
                             info={"model": Path(engine.model_path).name, "task": kind.name,
                                   "device": engine.device, "device_note": note,
                                   "source": source},
                             metrics=self.alerting.metrics.exposition
                             if self.alerting is not None and self.alerting.metrics is not None
                             else None).start()
        for line in announcement(self.live, self.address, self.token, view.show_token):
            self.say(line)

    def _mqtt(self, kind: TaskKind) -> None:
        from edgeapp.sinks.mqtt import MqttOut

        settings, engine = self.request.mqtt, self.opened.engine
        announce = discovery_messages(kind, self.opened.model.labels, self.target.prefix,
                                      settings.mode, remove=not settings.discovery,
                                      model=Path(engine.model_path).name, version=VERSION)
        tracking = self.request.tracking
        if tracking is not None and (tracking.lines or tracking.zones):
            announce += counting_discovery(self.target.prefix, [x.name for x in tracking.lines],
                                           [z.name for z in tracking.zones],
                                           remove=not settings.discovery,
                                           model=Path(engine.model_path).name, kind_name=kind.name)
        self.publisher = MqttOut(self.target, kind=kind, mode=settings.mode,
                                 debounce=settings.debounce, announce=announce,
                                 queue_size=settings.queue, on_notice=self.say).start()
        self.health.publish_to(self.publisher)
        self.engine_watch.publish_to(self.publisher)

    def close(self) -> None:
        for part in (self.opened, self.live, self.publisher, self.writer, self.alerting, self.health,
                     *self.trackers.values(), self.events, *self.caps):
            if part is not None:
                part.close()

    def _outcome(self, ran: RunStats) -> CameraOutcome:
        outputs: CameraOutputs = {}
        if self.live is not None:
            outputs["live_view"] = self.live.summary()
        if self.publisher is not None:
            outputs["mqtt"] = self.publisher.summary()
        per_source: Dict[str, SourceOutputs] = {}
        if self.trackers:
            outputs["tracking"] = self._tracking_summary()
        if len(self.trackers) > 1:
            per_source = {name: {"tracking": t.summary()} for name, t in self.trackers.items()}
        if self.alerting is not None:
            outputs.update(self.alerting.summary())
        if self.engine_watch is not None and self.engine_watch.tally.events:
            outputs["engine"] = self.engine_watch.state()
        sources = {named.name: stats for named, stats in zip(self.request.sources, ran.streams)}
        stats = ran.streams[0] if len(ran.streams) == 1 else totals(ran)
        mqtt = outputs.get("mqtt")
        warnings = [w for cap, st in zip(self.caps, ran.streams) for w in self._warnings(cap, st)]
        warnings += self._mqtt_warnings(mqtt)
        warnings += self.alerting.warnings() if self.alerting is not None else []
        error = next((e for e in (self._error(cap, st, mqtt) for cap, st in zip(self.caps, ran.streams))
                      if e is not None), None)
        if self.output_error:
            stats.stop = "output error"
        return CameraOutcome(stats, self.opened.engine.model_path, self.opened.task.name, outputs,
                             warnings, error, sources, ran.engines(), per_source)

    @staticmethod
    def _warnings(cap: OpenCVSource, stats: CameraStats) -> List[str]:
        missing = getattr(cap, "missing_frames", 0)
        if missing and stats.stop == "end of stream" and stats.captured:
            return [f"{cap.name} ended after {cap.position} frame(s), {missing} short of the "
                    f"{cap.declared_frames} its container declares (truncated?)"]
        return []

    @staticmethod
    def _mqtt_warnings(mqtt: Optional[dict]) -> List[str]:
        if mqtt is not None and not mqtt["ever_connected"]:
            why = f" ({mqtt['last_error']})" if mqtt.get("last_error") else ""
            return [f"mqtt: the broker at {mqtt['url']} never answered{why}: nothing was published"]
        return []

    def _error(self, cap: OpenCVSource, stats: CameraStats, mqtt: Optional[dict]) -> Optional[EdgeappError]:
        """What makes this source's run a failure, if anything (the CLI's exit code)."""
        r = self.request
        if self.output_error:
            stats.stop = "output error"
            return self.output_error[0]
        if stats.stop == "interrupted":
            return None
        if stats.stop.startswith("capture error"):
            return EdgeappError(stats.stop if len(self.caps) == 1 else f"{cap.name}: {stats.stop}")
        if stats.captured == 0 and stats.stop == "end of stream":  # opened, but not one frame
            return DeviceUnavailable(f"--source {cap.name}: no frame could be read (an empty or "
                                     "truncated video?)")
        if stats.lost:
            why = f" (last: {stats.reopen_error})" if stats.reopen_error else ""
            return DeviceUnavailable(f"{cap.name}: camera/stream lost; no frames after "
                                     f"{stats.reconnect_attempts} reconnect attempt(s) in "
                                     f"{r.settings.reconnect:g} s{why}")
        if mqtt is not None and mqtt["dropped"] and not cap.live:  # a file: every result counts
            return InputError(f"mqtt: {mqtt['dropped']} of {mqtt['dropped'] + mqtt['published']} "
                              f"message(s) for {cap.name} were not delivered to {mqtt['url']}")
        return None


def totals(ran: RunStats) -> CameraStats:
    """A run of several sources as one: frames summed, latencies pooled, the run's seconds;
    its stop is the sources' when they agree, else each one's."""
    streams = ran.streams
    stops = [s.stop for s in streams]
    total = CameraStats(source=", ".join(s.source for s in streams), device=streams[0].device,
                        policy="/".join(sorted({s.policy for s in streams})),
                        captured=sum(s.captured for s in streams),
                        processed=sum(s.processed for s in streams),
                        dropped=sum(s.dropped for s in streams),
                        reconnects=sum(s.reconnects for s in streams),
                        reconnect_attempts=sum(s.reconnect_attempts for s in streams),
                        seconds=ran.seconds, live=any(s.live for s in streams),
                        stop=stops[0] if len(set(stops)) == 1 else
                        "; ".join(f"{s.source}: {s.stop}" for s in streams))
    for s in streams:
        total.inference_ms += s.inference_ms
        total.frame_ms += s.frame_ms
        total.end_to_end_ms += s.end_to_end_ms
    return total
