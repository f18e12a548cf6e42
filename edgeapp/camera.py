"""Live and video inference: a capture thread feeding the newest frame to one inference loop.

Frame policy, explicit per source kind:
- live sources (cameras, /dev/videoN, rtsp:// and other URLs, GStreamer pipelines): the capture
  thread keeps only the newest frame. When inference is slower than the camera, the frame
  waiting is replaced by the next one and counted as dropped: latency stays one frame, the
  memory one frame.
- video files: every frame is processed (offline analysis wants all of them). The capture
  thread reads ahead into a small bounded queue and waits when it is full, so nothing is
  dropped and nothing piles up. `drop=True` plays a file like a camera instead: frames are
  read at the file's own frame rate and the newest-frame policy applies.

A source is anything with the `FrameSource` methods; `OpenCVSource` is the real one. When a
source stops giving frames before its end, the capture thread reopens it with exponential
backoff for a bounded time (`ReconnectPolicy`), then gives up and the loop stops with its
summary. OpenCV is imported only inside functions.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

import numpy as np

from .boxes import Fit, ResizeMode, make_fit
from .errors import DeviceUnavailable, InputError, UsageError


def cv2_module():
    """OpenCV, with its own logging silenced (errors reach the user as one line from us)."""
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # FFmpeg: quiet
    os.environ.setdefault("OPENCV_LOG_LEVEL", "OFF")
    try:
        import cv2
    except ImportError as e:
        from .errors import MissingDependency

        raise MissingDependency(f"OpenCV is needed for video ({e}): pip install opencv-python") from None
    try:
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
    except AttributeError:  # very old builds
        pass
    return cv2


# ---------------------------------------------------------------------------------------------
# Sources


class FrameSource(Protocol):
    """What the capture thread needs from a source of frames (the extension point for tests)."""

    live: bool  # a camera or stream (newest-frame policy) rather than a file
    fps: float  # frames per second it declares, 0 if unknown
    name: str

    def open(self) -> None:
        """Open (or reopen after a failure); raise an EdgeappError when it cannot be opened."""

    def read(self) -> Optional[np.ndarray]:
        """The next BGR frame (H, W, 3) uint8, or None when none comes."""

    def at_end(self) -> bool:
        """After read() gave None: True at a normal end of stream, False when the source failed."""

    def close(self) -> None:
        ...


_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.I)


def parse_source(text: str) -> tuple[str, Any]:
    """(kind, target): camera (index), device (/dev/videoN), url, gstreamer (a pipeline), file."""
    t = text.strip()
    if re.fullmatch(r"\d+", t):
        return "camera", int(t)
    if re.fullmatch(r"/dev/video\d+", t):
        return "device", t
    if _URL.match(t) and not t.lower().startswith("file://"):
        return "url", t
    if "!" in t:  # `v4l2src ! videoconvert ! appsink`
        return "gstreamer", t
    return "file", t[7:] if t.lower().startswith("file://") else t


class OpenCVSource:
    """A cv2.VideoCapture: camera index, /dev/videoN, file, URL or GStreamer pipeline.

    Reopening a file resumes at the frame after the last one read.
    """

    def __init__(self, spec: str, width: Optional[int] = None, height: Optional[int] = None) -> None:
        self.spec = spec
        self.kind, self.target = parse_source(spec)
        self.live = self.kind != "file"
        self.width, self.height = width, height
        self.name = f"camera {self.target}" if self.kind == "camera" else str(self.target)
        self.fps = 0.0
        self.declared_frames = 0  # files: the container's frame count (0 if unknown)
        self.position = 0  # files: frames read so far
        self._cap = None

    def open(self) -> None:
        if self.kind == "file" and not os.path.exists(self.target):
            raise UsageError(f"--source {self.target}: no such file, and not a camera index, "
                             "/dev/videoN, URL or GStreamer pipeline")
        cv2 = cv2_module()
        self.close()
        if self.kind == "camera":
            backend = cv2.CAP_V4L2 if sys.platform.startswith("linux") else cv2.CAP_ANY
            cap = cv2.VideoCapture(self.target, backend)
        elif self.kind == "device":
            cap = cv2.VideoCapture(self.target, cv2.CAP_V4L2)
        elif self.kind == "gstreamer":
            cap = cv2.VideoCapture(self.target, cv2.CAP_GSTREAMER)
        else:
            cap = cv2.VideoCapture(self.target)
        if not cap.isOpened():
            cap.release()
            raise self._open_error()
        if self.live:
            if self.width:
                cap.set(cv2.CAP_PROP_FRAME_WIDTH, self.width)
            if self.height:
                cap.set(cv2.CAP_PROP_FRAME_HEIGHT, self.height)
        else:
            self.declared_frames = max(0, int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0))
            if self.position:
                cap.set(cv2.CAP_PROP_POS_FRAMES, self.position)
        fps = cap.get(cv2.CAP_PROP_FPS)
        self.fps = float(fps) if fps and 0 < fps < 1000 else 0.0
        self._cap = cap

    def _open_error(self) -> Exception:
        if self.kind == "file":
            return InputError(f"{self.target}: OpenCV cannot open this video (not a video, or a "
                              "codec this OpenCV build lacks)")
        hints = {
            "camera": "is it plugged in, and may you use it (video group)? `v4l2-ctl --list-devices` "
                      "lists cameras",
            "device": "does it exist, and may you use it (video group)?",
            "url": "is the stream reachable and the URL right?",
            "gstreamer": "is OpenCV built with GStreamer, and does the pipeline end in appsink?",
        }
        return DeviceUnavailable(f"cannot open {self.name}: {hints[self.kind]}")

    def read(self) -> Optional[np.ndarray]:
        if self._cap is None:
            return None
        ok, frame = self._cap.read()
        if not ok or frame is None:
            return None
        self.position += 1
        return frame

    def at_end(self) -> bool:
        if self.live:
            return False
        if self.declared_frames <= 0:
            return True
        # containers estimate their length: short by more than 1% (and 2 frames) is a failure
        return self.position >= self.declared_frames - max(2, self.declared_frames // 100)

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None


# ---------------------------------------------------------------------------------------------
# The capture thread


@dataclass(frozen=True)
class ReconnectPolicy:
    """Reopen a failed source with delays first, 2·first, 4·first... (at most `max_delay`),
    for at most `timeout` seconds after the last good frame; 0 disables reconnecting."""

    timeout: float = 10.0
    first_delay: float = 0.25
    max_delay: float = 2.0


@dataclass
class Frame:
    index: int  # capture order, from 0: gaps in processed indices are dropped frames
    image: np.ndarray
    timestamp: float  # wall clock (time.time()) at capture
    captured_at: float  # time.perf_counter() at capture
    source_ms: Optional[float] = None  # position in a video file


class FrameGrabber:
    """Reads a source in its own thread; `get` hands frames to the inference loop.

    drop=True keeps only the newest frame (replaced frames count as dropped); drop=False keeps
    up to `queue_size` frames and makes the reader wait when they are all pending.
    """

    def __init__(self, source: FrameSource, drop: bool, reconnect: ReconnectPolicy = ReconnectPolicy(),
                 queue_size: int = 4, pace: bool = False,
                 on_notice: Optional[Callable[[str], None]] = None) -> None:
        self.source, self.drop, self.reconnect = source, drop, reconnect
        self.capacity = 1 if drop else max(1, queue_size)
        self.pace = pace and source.fps > 0
        self.on_notice = on_notice
        self.captured = 0
        self.dropped = 0
        self.reconnects = 0  # successful reopenings
        self.reconnect_attempts = 0
        self.max_pending = 0  # the most frames ever waiting: never above capacity
        self.end_reason: Optional[str] = None
        self.error: Optional[BaseException] = None  # what broke the capture thread
        self.last_error: Optional[str] = None  # why the last reopening failed
        self.finished = False
        self._frames: deque[Frame] = deque()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="edgeapp-capture", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 3.0) -> bool:
        """Ask the thread to stop and wait for it; False if it is stuck in a read."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._frames)

    @property
    def done(self) -> bool:
        with self._cond:
            return self.finished and not self._frames

    def get(self, timeout: float = 0.1) -> Optional[Frame]:
        """The next frame to process, or None if none came within `timeout`."""
        with self._cond:
            if not self._frames and not self.finished:
                self._cond.wait(timeout)
            if not self._frames:
                return None
            frame = self._frames.popleft()
            self._cond.notify_all()
            return frame

    def _push(self, image: np.ndarray, source_ms: Optional[float]) -> None:
        with self._cond:
            if not self.drop:
                while len(self._frames) >= self.capacity and not self._stop.is_set():
                    self._cond.wait(0.1)
                if self._stop.is_set():
                    return
            frame = Frame(self.captured, image, time.time(), time.perf_counter(), source_ms)
            self.captured += 1
            if self.drop and self._frames:
                self._frames.popleft()
                self.dropped += 1
            self._frames.append(frame)
            self.max_pending = max(self.max_pending, len(self._frames))
            self._cond.notify_all()

    def _run(self) -> None:
        src = self.source
        paced_start: Optional[float] = None
        paced_count = 0
        try:
            while not self._stop.is_set():
                image = src.read()
                if image is None:
                    if src.at_end():
                        self.end_reason = "end of stream"
                        break
                    image = self._reopen()
                    if image is None:
                        if not self._stop.is_set():
                            self.end_reason = "source lost"
                        break
                    paced_start = None
                if self.pace:
                    now = time.perf_counter()
                    if paced_start is None:
                        paced_start, paced_count = now, 0
                    due = paced_start + paced_count / src.fps
                    if due > now and self._stop.wait(due - now):
                        break
                    paced_count += 1
                pos = getattr(src, "position", None)
                source_ms = None if src.live or not src.fps or pos is None else \
                    round((pos - 1) * 1000.0 / src.fps, 3)
                self._push(image, source_ms)
        except Exception as e:  # reported by the loop
            self.error = e
            self.end_reason = "capture error"
        finally:
            if self.end_reason is None:
                self.end_reason = "stopped"
            with self._cond:
                self.finished = True
                self._cond.notify_all()

    def _reopen(self) -> Optional[np.ndarray]:
        """Reconnect with backoff until a frame comes or the policy's time is up."""
        policy = self.reconnect
        if policy.timeout <= 0:
            return None
        start = time.monotonic()
        delay = policy.first_delay
        last_error = None
        while not self._stop.is_set():
            remaining = policy.timeout - (time.monotonic() - start)
            if remaining <= 0:
                break
            if self._stop.wait(min(delay, remaining)):
                return None
            self.reconnect_attempts += 1
            try:
                self.source.close()
                self.source.open()
                image = self.source.read()
            except Exception as e:
                image, last_error = None, str(e)
            if image is not None:
                self.reconnects += 1
                self._notice(f"{self.source.name}: reconnected after {self.reconnect_attempts} "
                             f"attempt(s)")
                return image
            delay = min(delay * 2, policy.max_delay)
        self.last_error = last_error
        return None

    def _notice(self, message: str) -> None:
        if self.on_notice:
            self.on_notice(message)


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


class ClassifyTask:
    """Top-k classes of a frame: {"classes": [{"id", "label", "score"}]}."""

    def __init__(self, engine, spec, labels: Optional[dict[int, str]], top_k: int = 3,
                 threshold: float = 0.0) -> None:
        from .classify import get_classes_from_scores, get_scores
        from .preprocess import quantize_input

        self.engine, self.spec, self.labels = engine, spec, labels
        self.top_k, self.threshold = top_k, threshold
        self.device = engine.device
        self._scores, self._classes, self._quantize = get_scores, get_classes_from_scores, quantize_input
        self._out_q = engine.outputs[0].get("quantization", (0.0, 0))

    def __call__(self, frame: np.ndarray) -> tuple[dict, float]:
        s = self.spec
        pixels, _ = fit_frame(frame, (s.width, s.height), s.channels, ResizeMode.stretch)
        tensor = self._quantize(pixels, s.dtype, s.scale, s.zero_point, s.mean, s.std)[None]
        t0 = time.perf_counter()
        outputs = self.engine.run(tensor)
        latency = (time.perf_counter() - t0) * 1000.0
        scores = self._scores(outputs[0], *self._out_q)
        classes = self._classes(scores, self.top_k, self.threshold)
        return {"classes": [{"id": c.id, "label": self.labels.get(c.id) if self.labels else None,
                             "score": round(c.score, 6)} for c in classes]}, latency


class DetectTask:
    """Objects in a frame: {"objects": [{"id", "label", "score", "bbox"}]} in frame pixels."""

    def __init__(self, engine, spec, labels: Optional[dict[int, str]], threshold: float = 0.4,
                 top_k: Optional[int] = None, resize: ResizeMode | str = ResizeMode.stretch) -> None:
        from .detect import engine_layout, get_objects, object_fields
        from .preprocess import quantize_input

        self._get_objects, self._fields, self._quantize = get_objects, object_fields, quantize_input
        self.engine, self.spec, self.labels = engine, spec, labels
        self.threshold, self.top_k, self.resize = threshold, top_k, ResizeMode(resize)
        self.device = engine.device
        self.layout = engine_layout(engine)
        self._quant = [o.get("quantization", (0.0, 0)) for o in engine.outputs]

    def __call__(self, frame: np.ndarray) -> tuple[dict, float]:
        s = self.spec
        pixels, fit = fit_frame(frame, (s.width, s.height), s.channels, self.resize)
        tensor = self._quantize(pixels, s.dtype, s.scale, s.zero_point, s.mean, s.std)[None]
        t0 = time.perf_counter()
        outputs = self.engine.run(tensor)
        latency = (time.perf_counter() - t0) * 1000.0
        objects = self._get_objects(outputs, self.layout, fit, self._quant, self.threshold, self.top_k)
        return {"objects": self._fields(objects, self.labels)}, latency


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


def run_camera(source: FrameSource, task: FrameTask, *, drop: Optional[bool] = None,
               max_frames: Optional[int] = None, duration: Optional[float] = None,
               reconnect: ReconnectPolicy = ReconnectPolicy(), queue_size: int = 4,
               on_record: Optional[Callable[[dict], None]] = None, display: Optional[Display] = None,
               recorder: Optional[Recorder] = None, overlay: bool = True,
               stop_event: Optional[threading.Event] = None,
               on_notice: Optional[Callable[[str], None]] = None) -> CameraStats:
    """Open `source`, run `task` on frames until the end, a limit or a stop; return the stats.

    `drop` None: newest-frame for live sources, every frame for files (see the module doc).
    Each processed frame gives one record to `on_record`: frame index, timestamp, the task's
    fields, inference latency and the whole frame's time. Ctrl-C stops cleanly (stop
    "interrupted"). Raises only if the source cannot be opened at all.
    """
    source.open()
    drop = source.live if drop is None else drop
    if recorder is not None and recorder.fps is None and source.fps:
        recorder.fps = source.fps
    stats = CameraStats(source=source.name, device=task.device, live=source.live,
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
            frame = grabber.get(timeout=0.05)
            if frame is None:
                if grabber.done:
                    stats.stop = grabber.end_reason or "end of stream"
                    break
                continue
            t0 = time.perf_counter()
            fields, latency = task(frame.image)
            if draw:
                from .overlay import draw_result

                draw_result(frame.image, fields, latency, fps_ema, task.device)
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
            if on_record is not None:
                on_record({"frame": frame.index, "timestamp": round(frame.timestamp, 3),
                           "source_ms": frame.source_ms, "device": task.device, **fields,
                           "latency_ms": round(latency, 3), "frame_ms": round(frame_ms, 3)})
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
    if grabber.error is not None and stats.stop == "capture error":
        stats.stop = f"capture error: {type(grabber.error).__name__}: {grabber.error}"
    return stats
