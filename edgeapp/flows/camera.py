"""Live and video inference: the loop that takes frames from `capture.FrameGrabber`, runs the
model on the newest one, draws, records, and keeps the statistics for the summary.

The frame policy (newest frame for live sources, every frame for files) and reconnecting are
the capture side's: see capture.py. OpenCV is imported only inside functions.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
from typing_extensions import Protocol

from edgeapp.core.boxes import Fit, ResizeMode, make_fit
from edgeapp.errors import UsageError
from edgeapp.hw.capture import FrameGrabber, FrameSource, ReconnectPolicy, cv2_module
from edgeapp.core.classify import class_fields, get_classes_from_scores, get_scores
from edgeapp.core.detect import engine_layout, get_objects, object_fields
from edgeapp.core.pose import movenet_pose, pose_fields
from edgeapp.core.segment import class_map, class_shares, to_original
from edgeapp.flows.batch import classifier_output, require_task
from edgeapp.core.preprocess import quantize_input

# ---------------------------------------------------------------------------------------------
# Per-frame work: preprocessing with OpenCV, inference, post-processing


def resize_frame(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize to (width, height): halve with INTER_AREA while at least twice too big, then
    INTER_LINEAR.

    Close to a true area average (no aliasing when shrinking 640×480 to 224×224: mean error
    0.9 vs 2.0 levels for INTER_LINEAR alone) at a sixth of INTER_AREA's cost for a
    non-integer ratio (0.29 ms vs 1.9 ms measured here): OpenCV's area filter is fast for
    exactly 2× only.
    """
    cv2 = cv2_module()
    img = frame
    while img.shape[1] >= 2 * size[0] and img.shape[0] >= 2 * size[1]:
        img = cv2.resize(img, (img.shape[1] // 2, img.shape[0] // 2), interpolation=cv2.INTER_AREA)
    if (img.shape[1], img.shape[0]) != size:
        img = cv2.resize(img, size, interpolation=cv2.INTER_LINEAR)
    return img


def fit_frame(frame: np.ndarray, size: tuple[int, int], channels: int,
              mode: ResizeMode | str = ResizeMode.stretch) -> tuple[np.ndarray, Fit]:
    """A BGR frame resized into (width, height) and converted to RGB (or gray): (pixels, Fit).

    Resizing before the colour conversion converts the small image only. See `resize_frame`.
    """
    cv2 = cv2_module()
    h, w = frame.shape[:2]
    fit = make_fit(mode, (w, h), size)
    cw, ch = fit.content_w, fit.content_h
    small = resize_frame(frame, (cw, ch))
    if small.ndim == 2 or small.shape[2] == 1:
        small = small.reshape(ch, cw) if channels == 1 else cv2.cvtColor(small, cv2.COLOR_GRAY2RGB)
    elif channels == 1:
        small = cv2.cvtColor(small, cv2.COLOR_BGRA2GRAY if small.shape[2] == 4 else cv2.COLOR_BGR2GRAY)
    else:
        small = cv2.cvtColor(small, cv2.COLOR_BGRA2RGB if small.shape[2] == 4 else cv2.COLOR_BGR2RGB)
    if (cw, ch) != size:
        canvas = np.zeros((size[1], size[0]) + small.shape[2:], np.uint8)
        canvas[fit.pad_y:fit.pad_y + ch, fit.pad_x:fit.pad_x + cw] = small
        small = canvas
    if small.ndim == 2:
        small = small[:, :, None]
    return small, fit


class FrameTask(Protocol):
    """Turns one BGR frame into result fields; the loop only needs this (tests pass slow ones)."""

    device: str

    def __call__(self, frame: np.ndarray) -> tuple[dict, float]:
        """(result fields, inference milliseconds)."""


def infer_frame(engine, spec, frame: np.ndarray, mode: ResizeMode) -> tuple[list[np.ndarray], Fit, float]:
    """Fit a BGR frame to the model input, run it: (outputs, fit, inference ms)."""
    pixels, fit = fit_frame(frame, (spec.width, spec.height), spec.channels, mode)
    tensor = quantize_input(pixels, spec.dtype, spec.scale, spec.zero_point, spec.mean, spec.std)[None]
    t0 = time.perf_counter()
    outputs = engine.run(tensor)
    return outputs, fit, (time.perf_counter() - t0) * 1000.0


class ClassifyTask:
    """Top-k classes of a frame: {"classes": [{"id", "label", "score"}]}."""

    def __init__(self, engine, spec, labels: Optional[dict[int, str]], top_k: int = 3,
                 threshold: float = 0.0) -> None:
        self.engine, self.spec, self.labels = engine, spec, labels
        self.top_k, self.threshold = top_k, threshold
        self.device = engine.device
        self._out_q = classifier_output(engine)

    def __call__(self, frame: np.ndarray) -> tuple[dict, float]:
        outputs, _, latency = infer_frame(self.engine, self.spec, frame, ResizeMode.stretch)
        scores = get_scores(outputs[0], *self._out_q)
        classes = get_classes_from_scores(scores, self.top_k, self.threshold)
        return {"classes": class_fields(classes, self.labels)}, latency


class DetectTask:
    """Objects in a frame: {"objects": [{"id", "label", "score", "bbox"}]} in frame pixels."""

    def __init__(self, engine, spec, labels: Optional[dict[int, str]], threshold: float = 0.4,
                 top_k: Optional[int] = None, resize: ResizeMode | str = ResizeMode.stretch) -> None:
        self.engine, self.spec, self.labels = engine, spec, labels
        self.threshold, self.top_k, self.resize = threshold, top_k, ResizeMode(resize)
        self.device = engine.device
        self.layout = engine_layout(engine)
        self._quant = [o.get("quantization", (0.0, 0)) for o in engine.outputs]

    def __call__(self, frame: np.ndarray) -> tuple[dict, float]:
        outputs, fit, latency = infer_frame(self.engine, self.spec, frame, self.resize)
        objects = get_objects(outputs, self.layout, fit, self._quant, self.threshold, self.top_k)
        return {"objects": object_fields(objects, self.labels)}, latency


class PoseTask:
    """The pose in a frame: {"poses": [{"score", "keypoints": [{"name", "x", "y", "score"}]}]}
    in frame pixels (keypoints scoring at least `threshold`)."""

    def __init__(self, engine, spec, threshold: float = 0.2,
                 resize: ResizeMode | str = ResizeMode.stretch) -> None:
        require_task(engine, "pose", "a MoveNet single-pose output [1, 1, 17, 3]")
        self.engine, self.spec, self.threshold, self.resize = engine, spec, threshold, ResizeMode(resize)
        self.device = engine.device
        scale, zero = engine.outputs[0].get("quantization", (0.0, 0))
        self._q = (float(scale), int(zero))

    def __call__(self, frame: np.ndarray) -> tuple[dict, float]:
        outputs, fit, latency = infer_frame(self.engine, self.spec, frame, self.resize)
        return {"poses": pose_fields([movenet_pose(outputs[0], fit, *self._q)], self.threshold)}, latency


class SegmentTask:
    """The classes in a frame: {"classes": [{"id", "label", "share"}]}; `mask` keeps the last
    frame-sized class map for the overlay."""

    def __init__(self, engine, spec, labels: Optional[dict[int, str]],
                 resize: ResizeMode | str = ResizeMode.stretch) -> None:
        require_task(engine, "segment", "segmentation outputs ([1, H, W, C] class scores or a "
                                        "[1, H, W] class map)")
        self.engine, self.spec, self.labels, self.resize = engine, spec, labels, ResizeMode(resize)
        self.device = engine.device
        scale, zero = engine.outputs[0].get("quantization", (0.0, 0))
        self._q = (float(scale), int(zero))
        self.mask: Optional[np.ndarray] = None

    def __call__(self, frame: np.ndarray) -> tuple[dict, float]:
        outputs, fit, latency = infer_frame(self.engine, self.spec, frame, self.resize)
        self.mask = to_original(class_map(outputs[0], *self._q), fit)
        return {"classes": class_shares(self.mask, self.labels)}, latency


# ---------------------------------------------------------------------------------------------
# Display and recording


def has_display() -> bool:
    """False on Linux/BSD without an X11 or Wayland display (SSH, services, CI)."""
    if sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


class Display:
    """An OpenCV window; `show` returns False when the user pressed q or Esc or closed it."""

    def __init__(self, title: str = "edgeapp") -> None:
        self.title = title
        cv2 = cv2_module()
        try:
            cv2.namedWindow(title, cv2.WINDOW_AUTOSIZE)
        except cv2.error as e:
            raise UsageError(f"cannot open a window ({str(e).strip().splitlines()[-1]}); "
                             "use --no-display") from None

    def show(self, img: np.ndarray) -> bool:
        cv2 = cv2_module()
        cv2.imshow(self.title, img)
        key = cv2.waitKey(1) & 0xFF
        if key in (ord("q"), 27):
            return False
        try:
            return cv2.getWindowProperty(self.title, cv2.WND_PROP_VISIBLE) >= 1
        except cv2.error:
            return False

    def close(self) -> None:
        cv2 = cv2_module()
        try:
            cv2.destroyWindow(self.title)
            cv2.waitKey(1)
        except cv2.error:
            pass


class Recorder:
    """Writes annotated frames to a video (mp4v for .mp4/.mov, MJPG for .avi), opened on the
    first frame so its size is the frames' size."""

    def __init__(self, path: str, fps: Optional[float] = None) -> None:
        self.path, self.fps = path, fps  # None: the source's frame rate (set by run_camera), else 30
        self._writer = None
        self.frames = 0

    def write(self, img: np.ndarray) -> None:
        cv2 = cv2_module()
        if self._writer is None:
            fourcc = "MJPG" if self.path.lower().endswith(".avi") else "mp4v"
            h, w = img.shape[:2]
            fps = self.fps if self.fps and self.fps > 0 else 30.0
            self._writer = cv2.VideoWriter(self.path, cv2.VideoWriter_fourcc(*fourcc), fps, (w, h))
            if not self._writer.isOpened():
                self._writer = None
                raise UsageError(f"--record {self.path}: OpenCV cannot write this video "
                                 "(use .mp4 or .avi, in a writable folder)")
        self._writer.write(img)
        self.frames += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None


# ---------------------------------------------------------------------------------------------
# The loop


class _Inline:
    """One FrameTask in the loop's own thread, behind the runners' submit/next_done face."""

    window = 1

    def __init__(self, task: FrameTask) -> None:
        self.task, self.label = task, task.device
        self._queued: list = []

    @property
    def pending(self) -> int:
        return len(self._queued)

    @property
    def has_room(self) -> bool:
        return not self._queued

    def submit(self, key, image: np.ndarray) -> None:
        self._queued.append((key, image))

    def next_done(self, timeout: Optional[float] = None):
        from edgeapp.flows.parallel import Done

        key, image = self._queued.pop(0)
        fields, latency = self.task(image)
        return key, Done((fields, latency, getattr(self.task, "mask", None)), self.task.device, latency)


def _percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p99": None}
    p50, p99 = np.percentile(np.asarray(values, dtype=np.float64), [50, 99])
    return {"p50": round(float(p50), 3), "p99": round(float(p99), 3)}


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
                "fps": round(self.fps, 2), "inference_ms": _percentiles(self.inference_ms),
                "frame_ms": _percentiles(self.frame_ms),
                "end_to_end_ms": _percentiles(self.end_to_end_ms),
                "reconnects": self.reconnects, "reconnect_attempts": self.reconnect_attempts,
                "stop": self.stop}

    def summary_line(self) -> str:
        inf, frm = _percentiles(self.inference_ms), _percentiles(self.frame_ms)

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
    `annotated`: the overlay is already drawn on `image`. `stats` is updated as frames go."""

    def on_frame(self, image: np.ndarray, record: dict, *, annotated: bool, fps: Optional[float],
                 stats: "CameraStats") -> None:
        ...


def run_camera(source: FrameSource, task: FrameTask, *, drop: Optional[bool] = None,
               max_frames: Optional[int] = None, duration: Optional[float] = None,
               reconnect: ReconnectPolicy = ReconnectPolicy(), queue_size: int = 4,
               on_record: Optional[Callable[[dict], None]] = None, display: Optional[Display] = None,
               recorder: Optional[Recorder] = None, overlay: bool = True,
               stop_event: Optional[threading.Event] = None,
               on_notice: Optional[Callable[[str], None]] = None,
               outputs: Sequence[FrameOutput] = (), runner=None) -> CameraStats:
    """Open `source`, run `task` on frames until the end, a limit or a stop; return the stats.

    `drop` None: newest-frame for live sources, every frame for files (see the module doc).
    Each processed frame gives one record to `on_record`: frame index, timestamp, the task's
    fields, inference latency and the whole frame's time. Ctrl-C stops cleanly (stop
    "interrupted"). Raises only if the source cannot be opened at all. `outputs` (live view,
    MQTT) get each processed frame and its record after display and recording.
    `runner` (flows/parallel.py) runs the frames on several Edge TPUs at once, one frame each,
    results still in frame order; without it `task` runs in this thread.
    """
    run = runner if runner is not None else _Inline(task)
    source.open()
    drop = source.live if drop is None else drop
    if recorder is not None and recorder.fps is None and source.fps:
        recorder.fps = source.fps
    stats = CameraStats(source=source.name, device=run.label, live=source.live,
                        policy="newest" if drop else "every")
    grabber = FrameGrabber(source, drop, reconnect, queue_size,
                           pace=drop and not source.live, on_notice=on_notice)
    draw = overlay and (display is not None or recorder is not None)
    fps_ema: Optional[float] = None
    last_done: Optional[float] = None
    start = time.perf_counter()
    grabber.start()
    try:
        while True:
            if stop_event is not None and stop_event.is_set():
                stats.stop = "stopped"
                break
            if max_frames is not None and stats.processed >= max_frames:
                stats.stop = "max frames"
                break
            if duration is not None and time.perf_counter() - start >= duration:
                stats.stop = "duration"
                break
            # every device gets a frame (the newest ones, under the drop policy)
            while run.has_room and (max_frames is None or stats.processed + run.pending < max_frames):
                frame = grabber.get(timeout=0.0 if run.pending else 0.05)
                if frame is None:
                    break
                run.submit((frame, time.perf_counter()), frame.image)
            if not run.pending:
                if grabber.done:
                    stats.stop = grabber.end_reason or "end of stream"
                    break
                continue
            result = run.next_done(timeout=0.05)
            if result is None:
                continue
            (frame, t0), ran = result
            fields, latency, mask = ran.outputs  # mask: a segmentation task's class map, else None
            if draw:
                from edgeapp.core.overlay import draw_result

                draw_result(frame.image, fields, latency, fps_ema, ran.device, mask)
            if recorder is not None:
                recorder.write(frame.image)
            keep_going = display.show(frame.image) if display is not None else True
            done = time.perf_counter()
            frame_ms = (done - t0) * 1000.0
            stats.processed += 1
            stats.inference_ms.append(latency)
            stats.frame_ms.append(frame_ms)
            stats.end_to_end_ms.append((done - frame.captured_at) * 1000.0)
            if last_done is not None and done > last_done:
                inst = 1.0 / (done - last_done)
                fps_ema = inst if fps_ema is None else 0.9 * fps_ema + 0.1 * inst
            last_done = done
            if on_record is not None or outputs:
                record = {"frame": frame.index, "timestamp": round(frame.timestamp, 3),
                          "source_ms": frame.source_ms, "device": ran.device, **fields,
                          "latency_ms": round(latency, 3), "frame_ms": round(frame_ms, 3)}
                if on_record is not None:
                    on_record(record)
                if outputs:
                    stats.captured, stats.dropped = grabber.captured, grabber.dropped
                    for out in outputs:
                        out.on_frame(frame.image, record, annotated=draw, fps=fps_ema, stats=stats)
            if not keep_going:
                stats.stop = "window closed"
                break
    except KeyboardInterrupt:
        stats.stop = "interrupted"
    finally:
        stats.seconds = time.perf_counter() - start
        stopped = grabber.stop()
        if stopped:
            source.close()
        if recorder is not None:
            recorder.close()
        if display is not None:
            display.close()
        stats.captured, stats.dropped = grabber.captured, grabber.dropped
        stats.reconnects, stats.reconnect_attempts = grabber.reconnects, grabber.reconnect_attempts
        stats.max_pending = grabber.max_pending
        stats.reopen_error = grabber.last_error
    stats.device = run.label  # "..., then cpu" when a TPU was lost
    if grabber.error is not None and stats.stop == "capture error":
        stats.stop = f"capture error: {type(grabber.error).__name__}: {grabber.error}"
    return stats
