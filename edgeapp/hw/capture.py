"""Frame capture: sources (cameras, files, streams), reconnect with backoff, and the grabber thread.

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
source stops giving frames before its end, the grabber reopens it with exponential backoff for
a bounded time (`ReconnectPolicy`), then gives up. OpenCV is imported only inside functions.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
from typing_extensions import Protocol

from edgeapp.errors import DeviceUnavailable


def cv2_module(needed_for: str = "video"):
    """OpenCV, with its own logging silenced (errors reach the user as one line from us)."""
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # FFmpeg: quiet
    os.environ.setdefault("OPENCV_LOG_LEVEL", "OFF")
    try:
        import cv2
    except ImportError as e:
        from edgeapp.errors import MissingDependency

        raise MissingDependency(f"OpenCV is needed for {needed_for} ({e}): pip install opencv-python "
                                "(opencv-python-headless on servers; on a Coral Dev Board: sudo apt "
                                "install python3-opencv)") from None
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

    def check(self) -> None:
        """What can be known without opening: a file that is missing or not a regular file
        (DeviceUnavailable: exit 5, as every source that cannot be opened)."""
        if self.kind != "file":
            return
        if not os.path.exists(self.target):
            raise DeviceUnavailable(f"--source {self.target}: no such file, and not a camera "
                                    "index, /dev/videoN, URL or GStreamer pipeline")
        if not (os.path.isfile(self.target) or self.target.startswith("/dev/")):
            # a FIFO or socket would block OpenCV's open() in C, beyond the reach of Ctrl-C
            raise DeviceUnavailable(f"--source {self.target}: not a regular file (a folder, pipe "
                                    "or special file); for a stream use a URL or a GStreamer "
                                    "pipeline")

    def open(self) -> None:
        self.check()
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
            return DeviceUnavailable(f"--source {self.target}: OpenCV cannot open this video (not "
                                     "a video, truncated, or a codec this OpenCV build lacks)")
        hints = {
            "camera": "is it plugged in, and may you use it (video group)? `v4l2-ctl --list-devices` "
                      "lists cameras",
            "device": "does it exist, and may you use it (video group)?",
            "url": "is the stream reachable and the URL right?",
            "gstreamer": "is OpenCV built with GStreamer, and does the pipeline end in appsink?",
        }
        return DeviceUnavailable(f"cannot open {self.name}: {hints[self.kind]}")

    @property
    def is_open(self) -> bool:
        return self._cap is not None

    def read(self) -> Optional[np.ndarray]:
        if self._cap is None:
            return None
        ok, frame = self._cap.read()
        if not ok or frame is None:
            return None
        self.position += 1
        return frame

    def at_end(self) -> bool:
        # A file that gives no more frames has ended, even short of the frame count its
        # container declares: reopening a truncated file cannot bring frames that are not there.
        return not self.live

    @property
    def missing_frames(self) -> int:
        """Files: frames the container declares beyond the last one read (a truncated file),
        0 within the error of the container's estimate (1%, at least 2 frames)."""
        if self.live or self.declared_frames <= 0:
            return 0
        short = self.declared_frames - self.position
        return short if short > max(2, self.declared_frames // 100) else 0

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
                 on_notice: Optional[Callable[[str], None]] = None,
                 ready: Optional[threading.Event] = None) -> None:
        """`ready`: set when a frame comes or the capture ends (one event may serve several
        grabbers: the loop of a run of several sources waits on it)."""
        self.source, self.drop, self.reconnect = source, drop, reconnect
        self.ready = ready
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
        if self.ready is not None:
            self.ready.set()

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
            if self.ready is not None:
                self.ready.set()

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
