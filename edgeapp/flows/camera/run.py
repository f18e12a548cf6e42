"""A whole camera run, for the CLI's `camera` and the API's `Model.camera`: the model opened for
its task on its devices, the source, the sinks (per-frame records, a window, a recording, the
live view, MQTT, the Edge TPU's health), the frame loop (flows/camera/loop.py), and the outcome:
statistics, warnings and the error that decides the exit code.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional

from edgeapp.core.version import VERSION
from edgeapp.errors import DeviceUnavailable, EdgeappError, InputError
from edgeapp.flows.camera.alerts import AlertOutputs
from edgeapp.flows.camera.engine_watch import EngineWatch
from edgeapp.flows.camera.loop import CameraStats, run_camera
from edgeapp.flows.camera.request import CameraRequest
from edgeapp.flows.camera.tpu_health import TpuHealth
from edgeapp.flows.camera.tracking import TrackStage, check_trackable, check_tracking_available
from edgeapp.flows.open_task import open_task
from edgeapp.hw.capture import OpenCVSource, ReconnectPolicy
from edgeapp.hw.worker import events as engine_events
from edgeapp.sinks.display import Display, has_display
from edgeapp.sinks.event_file import EventFile
from edgeapp.sinks.ha_discovery import counting_discovery, discovery_messages
from edgeapp.sinks.recorder import Recorder
from edgeapp.sinks.records import Format, Layout

if TYPE_CHECKING:
    from edgeapp.tasks.base import TaskKind

MQTT_SETTLE = 10.0  # seconds a file's run waits for the broker's first answer before its frames
Notice = Callable[[str], None]


@dataclass
class CameraOutcome:
    """How a run ended: its statistics, what the outputs say, and the error (None: success)."""

    stats: CameraStats
    model: str
    task: str
    outputs: dict  # "live_view" and "mqtt" summaries, when they ran
    warnings: List[str]
    error: Optional[EdgeappError] = None

    @property
    def interrupted(self) -> bool:
        return self.stats.stop == "interrupted"

    def summary(self) -> dict:
        return {**self.stats.summary(), "model": self.model, "task": self.task, **self.outputs}


class CameraRun:
    """One run. Made first (the network settings and paho are checked before a model is
    opened), then `run()` once; it closes everything it opened, whatever happens."""

    def __init__(self, request: CameraRequest, on_notice: Optional[Notice] = None,
                 stop: Optional[threading.Event] = None) -> None:
        self.request, self.say = request, on_notice or (lambda _text: None)
        self.stop = stop or threading.Event()
        self.address = self.target = self.token = None
        self.cap = self.opened = self.live = self.publisher = self.writer = self.health = None
        self.events: Optional[EventFile] = None
        self.tracker: Any = None
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
            cap = self.cap = OpenCVSource(s.source, s.width, s.height)
            cap.open()  # a camera or file that cannot be opened fails before the model and the live view
            recorder = Recorder(str(s.record)) if s.record is not None else None
            if s.events is not None:  # before the model, too
                self.events = EventFile(s.events)
            self.opened = opened = self._open()
            kind = opened.task.kind
            show = has_display() if s.display is None else s.display
            if (s.width or s.height) and not cap.live:
                self.say("--width/--height ask a camera for a capture size; a file's frames keep "
                         "their size")
            window = Display(f"edgeapp {Path(opened.engine.model_path).name}") if show else None
            self._records(show, kind)
            self._alerts(kind, cap)
            self._tracking(kind)
            outputs = self._outputs(kind, cap.name)
            if self.publisher is not None and not cap.live:  # a file: every record to the broker
                self.publisher.wait_settled(MQTT_SETTLE)
            with engine_events.listening(self.engine_watch, self.say):
                stats = run_camera(cap, self._runner(), drop=s.drop_frames, max_frames=s.max_frames,
                                   duration=s.duration, reconnect=ReconnectPolicy(timeout=s.reconnect),
                                   on_record=self._on_record if self.writer or r.on_record else None,
                                   display=window, recorder=recorder,
                                   stop_event=self.stop, on_notice=self.say, kind=kind,
                                   outputs=outputs, tracking=self.tracker, cascade=opened.cascade)
        finally:
            self.close()
        return self._outcome(stats)

    def _runner(self) -> Any:
        """The opened model's runner; with --motion, its frames carry the regions that moved."""
        opened = self.opened
        if not opened.task.options.get("motion"):
            return opened.runner
        from edgeapp.flows.camera.motion_stage import MotionRunner

        return MotionRunner(opened.runner, max(opened.task.spec.size))

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
            layout = Layout(kind, frames=True, tracked=r.tracking is not None)
            self.writer = layout.writer(r.records_format or Format.jsonl, r.settings.output)

    def _tracking(self, kind: TaskKind) -> None:
        """--track: the stage that follows the objects, at the task's display threshold."""
        settings = self.request.tracking
        if settings is None:
            return
        check_trackable(kind)
        labels = self.opened.model.labels or {}
        high = kind.track_threshold(self.opened.task.plan)
        self.tracker = TrackStage(settings, high, kind.tracks,
                                  labels=lambda i: str(labels.get(int(i), i)),
                                  write_events=self._write_events if self.events else None,
                                  source=self.cap.name,
                                  on_alert=self.alerting.claim if self.alerting is not None else None)

    def _alerts(self, kind: TaskKind, cap: OpenCVSource) -> None:
        """Clips, notifications and metrics, before the tracking stage that feeds them."""
        if self.alerting is None:
            return
        if self.alerting.wants_health:
            self.health = TpuHealth(self.request.place.engine.performance).start()
        if self.events is not None:  # a clip that cannot be written: its event
            self.alerting.on_event = lambda e: self._write_events([e])
        self.alerting.start(kind, cap.name, cap.fps or 30.0, self.health,
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
                                            **({"tracking": self.tracker.summary()}
                                               if self.tracker is not None else {}),
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
                     self.tracker, self.events, self.cap):
            if part is not None:
                part.close()

    def _outcome(self, stats: CameraStats) -> CameraOutcome:
        outputs: dict = {}
        if self.live is not None:
            outputs["live_view"] = self.live.summary()
        if self.publisher is not None:
            outputs["mqtt"] = self.publisher.summary()
        if self.tracker is not None:
            outputs["tracking"] = self.tracker.summary()
        if self.alerting is not None:
            outputs.update(self.alerting.summary())
        if self.engine_watch is not None and self.engine_watch.tally.events:
            outputs["engine"] = self.engine_watch.state()
        warnings = self._warnings(stats, outputs.get("mqtt"))
        warnings += self.alerting.warnings() if self.alerting is not None else []
        return CameraOutcome(stats, self.opened.engine.model_path, self.opened.task.name, outputs,
                             warnings, self._error(stats, outputs.get("mqtt")))

    def _warnings(self, stats: CameraStats, mqtt: Optional[dict]) -> List[str]:
        cap, out = self.cap, []
        missing = getattr(cap, "missing_frames", 0)
        if missing and stats.stop == "end of stream" and stats.captured:
            out.append(f"{cap.name} ended after {cap.position} frame(s), {missing} short of the "
                       f"{cap.declared_frames} its container declares (truncated?)")
        if mqtt is not None and not mqtt["ever_connected"]:
            why = f" ({mqtt['last_error']})" if mqtt.get("last_error") else ""
            out.append(f"mqtt: the broker at {mqtt['url']} never answered{why}: nothing was published")
        return out

    def _error(self, stats: CameraStats, mqtt: Optional[dict]) -> Optional[EdgeappError]:
        """What makes this run a failure, if anything (the CLI's exit code)."""
        cap, r = self.cap, self.request
        if self.output_error:
            stats.stop = "output error"
            return self.output_error[0]
        if stats.stop == "interrupted":
            return None
        if stats.stop.startswith("capture error"):
            return EdgeappError(stats.stop)
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
