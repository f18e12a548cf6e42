"""Live and video inference: the loop that takes frames from `capture.FrameGrabber`, runs the
model on the newest one, hands each result to the sinks (display, recording, records, live
view, MQTT), and keeps the statistics for the summary. flows/camera/run.py sets a whole run up.

The frame policy (newest frame for live sources, every frame for files) and reconnecting are
the capture side's: see hw/capture.py. OpenCV is imported only inside functions.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np
from typing_extensions import Protocol

from edgeapp.core.stats import p50_p99
from edgeapp.errors import is_interrupt
from edgeapp.hw.capture import FrameGrabber, FrameSource, ReconnectPolicy
from edgeapp.tasks.base import TaskKind, annotate_frame

if TYPE_CHECKING:
    from edgeapp.execution.runner import Done, Runner
    from edgeapp.flows.camera.tracking import TrackStage
    from edgeapp.flows.cascade import Cascade
    from edgeapp.sinks.display import Display
    from edgeapp.sinks.recorder import Recorder

# ---------------------------------------------------------------------------------------------
# The loop


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

    def summary(self) -> dict:
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

        def ms(p: dict) -> str:
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
    loop = _Loop(source, runner, kind, Sinks(on_record, display, recorder, outputs, overlay, tracking,
                                             cascade))
    return loop.run(drop, max_frames, duration, reconnect, queue_size, stop_event, on_notice)


# Stops the run chose (a limit, Ctrl-C, a stop asked for): the source had more to give.
_RUN_ENDED = ("max frames", "duration", "interrupted", "stopped", "window closed")


class _Loop:
    """One camera run: frames in, results out to the sinks, statistics kept."""

    def __init__(self, source: FrameSource, run: Runner, kind: Optional[TaskKind], sinks: Sinks) -> None:
        self.source, self.run_on, self.kind, self.sinks = source, run, kind, sinks
        self.draw = sinks.overlay and (sinks.display is not None or sinks.recorder is not None)
        self.fps_ema: Optional[float] = None
        self.last_done: Optional[float] = None
        self.grabber: Any = None
        self.stats: Any = None
        self.last_index: Optional[int] = None  # the last frame processed
        self.last_frame: Any = None  # (index, timestamp, source_ms) of the last frame delivered

    def run(self, drop, max_frames, duration, reconnect, queue_size, stop_event,
            on_notice) -> CameraStats:
        source, run, recorder = self.source, self.run_on, self.sinks.recorder
        if not getattr(source, "is_open", False):  # opened already: CameraRun opens it first
            source.open()
        drop = source.live if drop is None else drop
        if recorder is not None and recorder.fps is None and source.fps:
            recorder.fps = source.fps
        stats = self.stats = CameraStats(source=source.name, device=run.label, live=source.live,
                                         policy="newest" if drop else "every")
        grabber = self.grabber = FrameGrabber(source, drop, reconnect, queue_size,
                                              pace=drop and not source.live, on_notice=on_notice)
        start = time.perf_counter()
        grabber.start()
        try:
            stats.stop = self._frames(start, max_frames, duration, stop_event)
        except KeyboardInterrupt:
            stats.stop = "interrupted"
        except Exception as e:  # noqa: BLE001 - what Ctrl-C broke on its way out is Ctrl-C
            if not is_interrupt(e):
                raise
            stats.stop = "interrupted"
        finally:
            stats.seconds = time.perf_counter() - start
            try:
                self._finish_tracking()
            finally:
                self._close()
        stats.device = run.label  # "..., then cpu" when a TPU was lost
        if grabber.error is not None and stats.stop == "capture error":
            stats.stop = f"capture error: {type(grabber.error).__name__}: {grabber.error}"
        return stats

    def _frames(self, start: float, max_frames, duration, stop_event) -> str:
        """Feed the devices and hand results on until something stops the run; why it stopped."""
        stats, grabber, run = self.stats, self.grabber, self.run_on
        while True:
            if stop_event is not None and stop_event.is_set():
                return "stopped"
            if max_frames is not None and stats.processed >= max_frames:
                return "max frames"
            if duration is not None and time.perf_counter() - start >= duration:
                return "duration"
            # every device gets a frame (the newest ones, under the drop policy)
            while run.has_room and (max_frames is None or stats.processed + run.pending < max_frames):
                frame = grabber.get(timeout=0.0 if run.pending else 0.05)
                if frame is None:
                    break
                run.submit((frame, time.perf_counter()), frame.image)
            if not run.pending:
                if grabber.done:
                    return grabber.end_reason or "end of stream"
                continue
            done = run.next_done(timeout=0.05)
            if done is not None and not self._deliver(*done):
                return "window closed"

    def _deliver(self, key: tuple, ran: Done) -> bool:
        """One result to the sinks; False when the window was closed."""
        (frame, t0), (result, latency) = key, ran.outputs
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
        counts = self.sinks.tracking.summary()
        for out in self.sinks.outputs:
            take = getattr(out, "on_events", None)
            if take is not None:
                take(events, counts)

    def _finish_tracking(self) -> None:
        """The tracks still alive when the run ends end now (their events are sent)."""
        if self.sinks.tracking is None or self.last_frame is None:
            return
        events = self.sinks.tracking.finish(*self.last_frame)
        if events:
            self._send_events(events)

    def _close(self) -> None:
        stats, grabber, sinks = self.stats, self.grabber, self.sinks
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
