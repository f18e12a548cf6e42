"""Live and video inference: the loop that takes frames from `capture.FrameGrabber`, runs the
model on the newest one, hands each result to the sinks (display, recording, records, live
view, MQTT), and keeps the statistics for the summary. flows/camera/run.py sets a whole run up.

The frame policy (newest frame for live sources, every frame for files) and reconnecting are
the capture side's: see hw/capture.py. OpenCV is imported only inside functions.

Several sources (`run_cameras`) share one runner: each has its own grabber, statistics and
sinks, and when the runner has room the next source in turn with a frame ready gives one
(round-robin), so a busy engine is shared equally and a fast source only drops its own frames.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence

import numpy as np
from typing_extensions import Protocol, TypedDict

from edgeapp.core.stats import P50P99, p50_p99
from edgeapp.errors import is_interrupt
from edgeapp.hw.capture import Frame, FrameGrabber, FrameSource, ReconnectPolicy
from edgeapp.tasks.base import TaskKind, annotate_frame

if TYPE_CHECKING:
    from edgeapp.execution.runner import Done, Runner
    from edgeapp.flows.camera.tracking import TrackStage
    from edgeapp.flows.cascade import Cascade
    from edgeapp.sinks.display import Display
    from edgeapp.sinks.recorder import Recorder

# ---------------------------------------------------------------------------------------------
# The loop


class StreamSummary(TypedDict):
    """One source's statistics in the JSON summary (CameraStats.summary)."""

    source: str
    device: str
    policy: str
    frames_captured: int
    frames_processed: int
    frames_dropped: int
    seconds: float
    fps: float
    inference_ms: P50P99
    frame_ms: P50P99
    end_to_end_ms: P50P99
    reconnects: int
    reconnect_attempts: int
    stop: str


@dataclass
class CameraStats:
    source: str
    device: str
    policy: str  # "newest" (drop stale frames) or "every" (every frame)
    captured: int = 0
    processed: int = 0
    dropped: int = 0
    reconnects: int = 0
    reconnect_attempts: int = 0
    max_pending: int = 0
    seconds: float = 0.0
    stop: str = ""  # end of stream, source lost, max frames, duration, interrupted, ...
    reopen_error: Optional[str] = None  # why reopening a lost source last failed
    live: bool = True
    inference_ms: list[float] = field(default_factory=list)
    frame_ms: list[float] = field(default_factory=list)  # taken from the queue -> done
    end_to_end_ms: list[float] = field(default_factory=list)  # captured -> done

    @property
    def fps(self) -> float:
        return self.processed / self.seconds if self.seconds > 0 else 0.0

    @property
    def lost(self) -> bool:
        return self.stop == "source lost"

    def summary(self) -> StreamSummary:
        return {"source": self.source, "device": self.device, "policy": self.policy,
                "frames_captured": self.captured, "frames_processed": self.processed,
                "frames_dropped": self.dropped, "seconds": round(self.seconds, 3),
                "fps": round(self.fps, 2), "inference_ms": p50_p99(self.inference_ms),
                "frame_ms": p50_p99(self.frame_ms),
                "end_to_end_ms": p50_p99(self.end_to_end_ms),
                "reconnects": self.reconnects, "reconnect_attempts": self.reconnect_attempts,
                "stop": self.stop}

    def summary_line(self) -> str:
        inf, frm = p50_p99(self.inference_ms), p50_p99(self.frame_ms)

        def ms(p: P50P99) -> str:
            return "n/a" if p["p50"] is None else f"p50 {p['p50']:.2f} / p99 {p['p99']:.2f} ms"

        text = (f"{self.source}: {self.captured} frame(s) captured, {self.processed} processed, "
                f"{self.dropped} dropped in {self.seconds:.2f} s ({self.fps:.1f} FPS) on "
                f"{self.device}; inference {ms(inf)}; whole frame {ms(frm)}; stop: {self.stop}")
        if self.reconnect_attempts:
            text += f"; {self.reconnects} reconnect(s) in {self.reconnect_attempts} attempt(s)"
        return text


class FrameOutput(Protocol):
    """Gets every processed frame after the loop is done with it (live view, MQTT): it may keep
    the image, must not change `record`, and must return at once (hand work to its own thread).
    `annotated`: the overlay is already drawn on `image`. `stats` is updated as frames go.
    `extras`: what the task's result holds besides the record (a segmentation's class map);
    `counting`: with --track, what the overlay draws of lines and zones (Result.counting)."""

    def on_frame(self, image: np.ndarray, record: dict, *, annotated: bool, fps: Optional[float],
                 stats: "CameraStats", extras: dict, counting: Optional[tuple]) -> None:
        ...


@dataclass
class Sinks:
    """Where a camera run's frames go besides the statistics."""

    on_record: Optional[Callable[[dict], None]] = None  # the per-frame records (results file)
    display: Any = None  # sinks/display.Display
    recorder: Any = None  # sinks/recorder.Recorder
    outputs: Sequence[FrameOutput] = ()  # live view, MQTT
    overlay: bool = True  # draw the results on the frames shown and recorded
    tracking: Any = None  # flows/camera/tracking.TrackStage: track ids, lines, zones, events
    cascade: Any = None  # flows/cascade.Cascade: a second model on the boxes' crops (--then)
    counts: Optional[Callable[[], dict]] = None  # the counts outputs get with events (default: tracking's)


def run_camera(source: FrameSource, runner: Runner, *, drop: Optional[bool] = None,
               max_frames: Optional[int] = None, duration: Optional[float] = None,
               reconnect: ReconnectPolicy = ReconnectPolicy(), queue_size: int = 4,
               on_record: Optional[Callable[[dict], None]] = None, display: Optional[Display] = None,
               recorder: Optional[Recorder] = None, overlay: bool = True,
               stop_event: Optional[threading.Event] = None,
               on_notice: Optional[Callable[[str], None]] = None,
               outputs: Sequence[FrameOutput] = (), kind: Optional[TaskKind] = None,
               tracking: Optional[TrackStage] = None, cascade: Optional[Cascade] = None) -> CameraStats:
    """Open `source`, run `task` on frames until the end, a limit or a stop; return the stats.

    `runner`: the frames' runner (execution/placement.open_runner with frames=True, as
    flows/open_task opens it): each device's thread runs the whole task on a frame and hands
    back (Result, inference ms), one frame per device in flight, in frame order. `drop` None:
    newest-frame for live sources, every
    frame for files (see the module doc). Each processed frame gives one record to `on_record`:
    frame index, timestamp, the task's fields, inference latency and the whole frame's time.
    Ctrl-C stops cleanly (stop "interrupted"). Raises only if the source cannot be opened at
    all. `outputs` (live view, MQTT) get each processed frame and its record after display and
    recording. `kind` draws the overlay. `tracking`
    (flows/camera/tracking.TrackStage) gives objects their track ids before anything sees the record;
    its events go to the outputs that take them (`on_events`), the last ones when the run ends.
    `cascade` (flows/cascade.Cascade) runs its second model on the boxes' crops of the frame,
    after tracking (a track's crop is not run again on every frame) and before drawing.
    """
    stream = Stream(source, Sinks(on_record, display, recorder, outputs, overlay, tracking, cascade))
    ran = run_cameras([stream], runner, kind=kind, drop=drop, max_frames=max_frames,
                      duration=duration, reconnect=reconnect, queue_size=queue_size,
                      stop_event=stop_event, on_notice=on_notice)
    return ran.streams[0]


@dataclass
class Stream:
    """One source of a run and its own sinks (window, recording, tracking); `name`, when given,
    is every record's `source` (a run of several sources, or a named one)."""

    source: FrameSource
    sinks: Sinks
    name: Optional[str] = None


class EngineLoad(TypedDict):
    """One device's share of a run: frames it ran and its busy fraction (inference time over
    the run's wall time)."""

    frames: int
    busy: float


@dataclass
class RunStats:
    """A run of one or more sources: each one's statistics, in the order given, and the time
    each device spent on inference."""

    streams: List[CameraStats]
    seconds: float = 0.0
    busy_ms: Dict[str, float] = field(default_factory=dict)
    frames: Dict[str, int] = field(default_factory=dict)

    def engines(self) -> Dict[str, EngineLoad]:
        """Per device: frames run and busy fraction (1.0: never idle; the bottleneck)."""
        return {device: EngineLoad(frames=self.frames[device],
                                   busy=round(ms / 1000.0 / self.seconds, 3) if self.seconds > 0 else 0.0)
                for device, ms in self.busy_ms.items()}


def run_cameras(streams: Sequence[Stream], runner: Runner, *, kind: Optional[TaskKind] = None,
                drop: Optional[bool] = None, max_frames: Optional[int] = None,
                duration: Optional[float] = None, reconnect: ReconnectPolicy = ReconnectPolicy(),
                queue_size: int = 4, stop_event: Optional[threading.Event] = None,
                on_notice: Optional[Callable[[str], None]] = None) -> RunStats:
    """`run_camera` over several sources sharing one runner: each has its capture thread, frame
    policy, reconnecting, tracking, window and recording; `max_frames` is per source, `duration`
    the run's. When the runner has room it takes the next frame of the sources in turn
    (round-robin over those with a frame ready), so a busy engine is shared equally; a source
    faster than its share drops frames (newest-frame policy) and never delays the others."""
    loop = _Loop(list(streams), runner, kind)
    return loop.run(drop, max_frames, duration, reconnect, queue_size, stop_event, on_notice)


# Stops the run chose (a limit, Ctrl-C, a stop asked for): the source had more to give.
_RUN_ENDED = ("max frames", "duration", "interrupted", "stopped", "window closed")


class _Feed:
    """One source's side of a run: its grabber, statistics, sinks and the frames in flight."""

    def __init__(self, stream: Stream, kind: Optional[TaskKind]) -> None:
        self.source, self.sinks, self.name, self.kind = stream.source, stream.sinks, stream.name, kind
        sinks = stream.sinks
        self.draw = sinks.overlay and (sinks.display is not None or sinks.recorder is not None)
        self.fps_ema: Optional[float] = None
        self.last_done: Optional[float] = None
        self.grabber: Any = None
        self.stats: Any = None
        self.in_flight = 0
        self.ended = False
        self.ended_at: Optional[float] = None  # perf_counter() when it ended: its own seconds
        self.last_index: Optional[int] = None  # the last frame processed
        self.last_frame: Any = None  # (index, timestamp, source_ms) of the last frame delivered

    def start(self, drop, reconnect, queue_size, on_notice, ready: threading.Event, label: str) -> None:
        source, recorder = self.source, self.sinks.recorder
        if not getattr(source, "is_open", False):  # opened already: CameraRun opens it first
            source.open()
        drop = source.live if drop is None else drop
        if recorder is not None and recorder.fps is None and source.fps:
            recorder.fps = source.fps
        self.stats = CameraStats(source=self.name or source.name, device=label, live=source.live,
                                 policy="newest" if drop else "every")
        self.grabber = FrameGrabber(source, drop, reconnect, queue_size, pace=drop and not source.live,
                                    on_notice=on_notice, ready=ready)

    def end(self, why: str) -> None:
        if not self.ended:
            self.ended, self.stats.stop = True, why
            self.ended_at = time.perf_counter()

    def deliver(self, frame: Frame, t0: float, ran: Done) -> bool:
        """One result to the sinks; False when the window was closed."""
        result, latency = ran.outputs
        sinks, stats = self.sinks, self.stats
        events: list = []
        if sinks.tracking is not None:
            height, width = frame.image.shape[:2]
            events = sinks.tracking.update(result.fields, frame.index, frame.timestamp, width, height,
                                           frame.source_ms)
            result.counting = sinks.tracking.snapshot()
            self.last_frame = (frame.index, frame.timestamp, frame.source_ms)
        if sinks.cascade is not None:
            sinks.cascade.apply(result.fields, frame.image, frame.index)
        if self.draw:
            annotate_frame(self.kind, frame.image, result, latency, self.fps_ema, ran.device)
        if sinks.recorder is not None:
            sinks.recorder.write(frame.image)
        keep_going = sinks.display.show(frame.image) if sinks.display is not None else True
        done = time.perf_counter()
        frame_ms = (done - t0) * 1000.0
        stats.processed += 1
        self.last_index = frame.index
        stats.inference_ms.append(latency)
        stats.frame_ms.append(frame_ms)
        stats.end_to_end_ms.append((done - frame.captured_at) * 1000.0)
        if self.last_done is not None and done > self.last_done:
            inst = 1.0 / (done - self.last_done)
            self.fps_ema = inst if self.fps_ema is None else 0.9 * self.fps_ema + 0.1 * inst
        self.last_done = done
        if sinks.on_record is not None or sinks.outputs:
            record = {"frame": frame.index, "timestamp": round(frame.timestamp, 3),
                      "source_ms": frame.source_ms, "device": ran.device, **result.fields,
                      "latency_ms": round(latency, 3), "frame_ms": round(frame_ms, 3)}
            if self.name is not None:
                record = {"source": self.name, **record}
            if sinks.on_record is not None:
                sinks.on_record(record)
            if sinks.outputs:
                stats.captured, stats.dropped = self.grabber.captured, self.grabber.dropped
                for out in sinks.outputs:
                    out.on_frame(frame.image, record, annotated=self.draw, fps=self.fps_ema,
                                 stats=stats, extras=result.extras, counting=result.counting)
        if events:
            self._send_events(events)
        return keep_going

    def _send_events(self, events: list) -> None:
        counts = self.sinks.counts() if self.sinks.counts is not None else self.sinks.tracking.summary()
        for out in self.sinks.outputs:
            take = getattr(out, "on_events", None)
            if take is not None:
                take(events, counts)

    def finish_tracking(self) -> None:
        """The tracks still alive when the run ends end now (their events are sent)."""
        if self.sinks.tracking is None or self.last_frame is None:
            return
        events = self.sinks.tracking.finish(*self.last_frame)
        if events:
            self._send_events(events)

    def close(self, start: float, seconds: float) -> None:
        """Its statistics final: its seconds are from the run's start to its own end."""
        stats, grabber, sinks = self.stats, self.grabber, self.sinks
        stats.seconds = seconds if self.ended_at is None else min(seconds, self.ended_at - start)
        if grabber.stop():
            self.source.close()
        if sinks.recorder is not None:
            sinks.recorder.close()
        if sinks.display is not None:
            sinks.display.close()
        stats.captured, stats.dropped = grabber.captured, grabber.dropped
        if stats.stop in _RUN_ENDED and self.last_index is not None:
            # the frames read ahead after the last one processed were no part of the run
            stats.captured = min(stats.captured, self.last_index + 1)
            stats.dropped = min(stats.dropped, stats.captured - stats.processed)
        stats.reconnects, stats.reconnect_attempts = grabber.reconnects, grabber.reconnect_attempts
        stats.max_pending = grabber.max_pending
        stats.reopen_error = grabber.last_error
        if grabber.error is not None and stats.stop == "capture error":
            stats.stop = f"capture error: {type(grabber.error).__name__}: {grabber.error}"


class _Loop:
    """One camera run: frames of every source in, results out to their sinks, statistics kept."""

    def __init__(self, streams: List[Stream], run: Runner, kind: Optional[TaskKind]) -> None:
        self.feeds = [_Feed(s, kind) for s in streams]
        self.run_on = run
        self.ready = threading.Event()  # set by every grabber when a frame comes or it ends
        self.turn = 0  # the source asked first for the next frame (round-robin)
        self.ran = RunStats([])

    def run(self, drop, max_frames, duration, reconnect, queue_size, stop_event,
            on_notice) -> RunStats:
        run, ran = self.run_on, self.ran
        started: List[_Feed] = []
        try:
            for feed in self.feeds:  # a source that cannot be opened fails the run before a frame
                feed.start(drop, reconnect, queue_size, on_notice, self.ready, run.label)
                started.append(feed)
        except BaseException:
            for feed in started:
                feed.source.close()
            raise
        start = time.perf_counter()
        for feed in self.feeds:
            feed.grabber.start()
        try:
            self._frames(start, max_frames, duration, stop_event)
        except KeyboardInterrupt:
            self._end_all("interrupted")
        except Exception as e:  # noqa: BLE001 - what Ctrl-C broke on its way out is Ctrl-C
            if not is_interrupt(e):
                raise
            self._end_all("interrupted")
        finally:
            ran.seconds = time.perf_counter() - start
            try:
                for feed in self.feeds:
                    feed.finish_tracking()
            finally:
                for feed in self.feeds:
                    feed.close(start, ran.seconds)
        for feed in self.feeds:
            feed.stats.device = run.label  # "..., then cpu" when a TPU was lost
        ran.streams = [feed.stats for feed in self.feeds]
        return ran

    def _end_all(self, why: str) -> None:
        for feed in self.feeds:
            feed.end(why)

    def _frames(self, start: float, max_frames, duration, stop_event) -> None:
        """Feed the devices and hand results on until every source has ended or the run stops."""
        run = self.run_on
        while True:
            if stop_event is not None and stop_event.is_set():
                return self._end_all("stopped")
            if duration is not None and time.perf_counter() - start >= duration:
                return self._end_all("duration")
            for feed in self.feeds:
                if feed.ended or feed.in_flight:
                    continue
                if max_frames is not None and feed.stats.processed >= max_frames:
                    feed.end("max frames")
                elif feed.grabber.done:
                    feed.end(feed.grabber.end_reason or "end of stream")
            if all(feed.ended for feed in self.feeds):
                return None
            # every device gets a frame: the sources' newest ones, each source in turn
            while run.has_room:
                self.ready.clear()  # a frame coming after this wakes the wait below
                took = self._next_frame(max_frames)
                if took is None:
                    break
                feed, frame = took
                feed.in_flight += 1
                run.submit((feed, frame, time.perf_counter()), frame.image)
            if not run.pending:
                self.ready.wait(0.05)
                continue
            done = run.next_done(timeout=0.05)
            if done is not None and not self._deliver(*done):
                return self._end_all("window closed")

    def _next_frame(self, max_frames: Optional[int]) -> Optional[tuple]:
        """(feed, frame) of the next source in turn that has a frame ready, or None."""
        feeds = self.feeds
        for k in range(len(feeds)):
            i = (self.turn + k) % len(feeds)
            feed = feeds[i]
            if feed.ended or (max_frames is not None
                              and feed.stats.processed + feed.in_flight >= max_frames):
                continue
            frame = feed.grabber.get(timeout=0.0)
            if frame is not None:
                self.turn = i + 1
                return feed, frame
        return None

    def _deliver(self, key: tuple, ran: Done) -> bool:
        feed, frame, t0 = key
        feed.in_flight -= 1
        latency = ran.outputs[1]
        self.ran.busy_ms[ran.device] = self.ran.busy_ms.get(ran.device, 0.0) + latency
        self.ran.frames[ran.device] = self.ran.frames.get(ran.device, 0) + 1
        return feed.deliver(frame, t0, ran)
