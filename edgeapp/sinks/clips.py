"""`camera --clips DIR --pre S --post S`: on each alert, a clip that starts `--pre` seconds before
its trigger frame and ends `--post` seconds after the last alert it holds (alerts that overlap
extend one clip), a snapshot of the track's best-scoring frame, and a JSON sidecar of the alert
and the boxes. Files: `DIR/<time>_<rule>_<track>.mp4|.jpg|.json`.

Nothing here runs on the inference loop but `claim` (names an alert's files: no I/O) and
`on_frame` (a reference to the frame into a queue). When the encoder is behind by QUEUE frames,
a camera's frame is left out of the clips and counted, never waited for; a video file processed
frame by frame (no frame is ever dropped there) waits for the encoder instead, so its clips miss
no frame. The encoder thread draws the
overlay (on a copy) and keeps the frames as JPEG in the ring (sinks/clip_buffer.py, where the
memory bound is stated); the writer thread writes files, keeps the folder under `--clips-max-gb`
(oldest first) and turns a full disk into an event and one warning while the run goes on.
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Deque, List, Optional

import numpy as np
from typing_extensions import TypedDict

from edgeapp.errors import UsageError
from edgeapp.sinks.clip_buffer import QUALITY, Buffered, Ring, jpeg_bytes, memory_bound, ring_frames
from edgeapp.tasks.base import Result, annotate_frame

if TYPE_CHECKING:
    from edgeapp.sinks.frame_stats import StreamStats
    from edgeapp.tasks.base import TaskKind

QUEUE = 4  # raw frames waiting for the encoder at most (the bound's second term)
OURS = re.compile(r"^\d{8}-\d{6}\.\d{3}_[A-Za-z0-9_.-]+_[A-Za-z0-9]+\.(mp4|jpg|json)$")
TRIGGER = (0, 0, 255)  # BGR: the trigger frame's mark


@dataclass
class ClipSettings:
    """What --clips, --pre, --post and --clips-max-gb ask for."""

    folder: Path
    pre: float = 5.0
    post: float = 10.0
    max_gb: Optional[float] = 1.0

    def check(self) -> "ClipSettings":
        for flag, value in (("--pre", self.pre), ("--post", self.post)):
            if not (value >= 0 and value < 3600):
                raise UsageError(f"{flag} {value:g}: give seconds from 0 to 3600")
        if self.max_gb is not None and not self.max_gb > 0:
            raise UsageError(f"--clips-max-gb {self.max_gb:g}: give a size above 0")
        if self.folder.exists() and not self.folder.is_dir():
            raise UsageError(f"--clips {self.folder} is a file, not a folder")
        return self


@dataclass
class _Clip:
    stem: str
    end: float  # the post-roll ends here (s)
    frames: List[Buffered]
    alerts: List[dict] = field(default_factory=list)



class ClipCounts(TypedDict):
    alerts: int
    clips: int
    snapshots: int
    frames_skipped: int
    disk_full: int
    removed: int  # old files removed to stay under the folder's limit


class ClipsSummary(ClipCounts):
    """Alert clips of a camera run: the counts, the folder, the frame ring's memory."""
    folder: str
    buffer_peak_bytes: int
    buffer_frames: Optional[int]
    jpeg_mean_bytes: int
    memory_bound_bytes: int

class ClipSink:
    """The clips of one camera run. `fps`: the source's; `on_saved(alert, snapshot)`: after an
    alert's snapshot is on disk (or could not be written: None), from the writer thread;
    `on_event`: the sink's own events (a full disk); `on_notice`: the one-line warning."""

    def __init__(self, settings: ClipSettings, kind: TaskKind, fps: float,
                 on_saved: Optional[Callable[[dict, Optional[Path]], None]] = None,
                 on_event: Optional[Callable[[dict], None]] = None,
                 on_notice: Optional[Callable[[str], None]] = None) -> None:
        self.settings, self.kind, self.fps = settings, kind, fps if fps and fps > 0 else 30.0
        self.on_saved, self.on_event = on_saved, on_event
        self.say = on_notice or (lambda _t: None)
        settings.folder.mkdir(parents=True, exist_ok=True)
        self.ring = Ring(settings.pre, ring_frames(settings.pre, self.fps))
        self._items: Deque[tuple] = deque()
        self._frames_queued = 0
        self._cond = threading.Condition()
        self._closing = False
        self._jobs: Deque[tuple] = deque()
        self._jobs_cond = threading.Condition()
        self._clip: Optional[_Clip] = None
        self._claimed: Optional[tuple] = None  # (stem, end) of the clip the loop last named
        self.stats: ClipCounts = {"alerts": 0, "clips": 0, "snapshots": 0, "frames_skipped": 0,
                      "disk_full": 0, "removed": 0}
        self._warned = False
        self._size = (0, 0)  # the frames' width and height, once one came
        self._encoder = threading.Thread(target=self._encode_loop, name="clips-encoder", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name="clips-writer", daemon=True)
        self._encoder.start()
        self._writer.start()

    # -- the inference loop's side ----------------------------------------------------------------

    def claim(self, alert: dict) -> None:
        """Name the alert's files (relative to the clips folder) and queue it: a clip still
        collecting its post-roll is extended, else a new one starts."""
        t = alert["media_time"]
        track = "all" if alert.get("track_id") is None else str(alert["track_id"])
        now = time.time()
        stem = (time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) +
                f".{int(now * 1000) % 1000:03d}_{alert['rule']}_{track}")
        if self._claimed is not None and t <= self._claimed[1]:
            clip = self._claimed[0]
        else:
            clip = stem
        self._claimed = (clip, t + self.settings.post)
        alert.update(clip=f"{clip}.mp4", snapshot=f"{stem}.jpg", sidecar=f"{stem}.json")
        with self._cond:
            self._items.append(("alert", dict(alert)))
            self._cond.notify()

    def on_frame(self, image: np.ndarray, record: dict, *, annotated: bool = False,
                 fps: Optional[float] = None, stats: Optional[StreamStats] = None,
                 extras: Optional[dict] = None, counting: Optional[tuple] = None) -> None:
        every = stats is not None and getattr(stats, "policy", "") == "every"
        with self._cond:
            while every and self._frames_queued >= QUEUE and self._encoder.is_alive():
                self._cond.wait(0.5)  # a file's every frame: its clips miss none
            if self._frames_queued >= QUEUE:
                self.stats["frames_skipped"] += 1
                return
            self._frames_queued += 1
            self._items.append(("frame", image, record, annotated, fps, extras or {}, counting))
            self._cond.notify()

    def wait_encoded(self, timeout: float = 10.0) -> bool:
        """Wait until every frame handed over so far is in the ring (for measurements); False
        on timeout."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._items and self._encoder.is_alive():
                if not self._cond.wait(max(0.0, end - time.monotonic())) and time.monotonic() >= end:
                    return False
        return True

    # -- the encoder thread -----------------------------------------------------------------------

    def _encode_loop(self) -> None:
        waiting: List[dict] = []
        while True:
            with self._cond:
                while not self._items and not self._closing:
                    self._cond.wait()
                if not self._items:
                    break
                item = self._items.popleft()
                if item[0] == "frame":
                    self._frames_queued -= 1
                    self._cond.notify_all()
            if item[0] == "alert":
                waiting.append(item[1])
                continue
            frame = self._encode(*item[1:])
            if frame is None:
                continue
            if self._clip is not None and frame.timestamp > self._clip.end:
                self._close_clip()
            self.ring.add(frame)
            if self._clip is not None:
                self._clip.frames.append(frame)
            for alert in [a for a in waiting if a["frame"] <= frame.index]:
                waiting.remove(alert)
                self._take(alert)
        for alert in waiting:  # the run ended before their frame came back
            self._take(alert)
        self._close_clip()

    def _encode(self, image: np.ndarray, record: dict, annotated: bool, fps: Optional[float],
                extras: dict, counting: Optional[tuple]) -> Optional[Buffered]:
        from edgeapp.hw.capture import cv2_module

        cv2 = cv2_module()
        if not annotated:  # drawn on a copy: the live view may draw on the frame too
            image = image.copy()
            annotate_frame(self.kind, image, Result(record, extras, counting), record.get("latency_ms"),
                           fps, str(record.get("device", "")))
        self._size = (image.shape[1], image.shape[0])
        ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, QUALITY])
        if not ok:
            return None
        tracks = {o["track_id"]: (o.get("score", 0.0), o.get("bbox"))
                  for o in record.get(getattr(self.kind, "tracks", None) or "objects") or []
                  if isinstance(o, dict) and o.get("track_id") is not None}
        t = record["source_ms"] / 1000.0 if record.get("source_ms") is not None else record.get("timestamp", 0.0)
        return Buffered(record.get("frame", 0), float(t), buf.tobytes(), tracks)

    def _take(self, alert: dict) -> None:
        """An alert whose trigger frame is in the ring: its clip opened or extended, its
        snapshot written."""
        self.stats["alerts"] += 1
        stem = alert["clip"][:-4]
        end = alert["media_time"] + self.settings.post
        if self._clip is not None and self._clip.stem == stem:
            self._clip.end = max(self._clip.end, end)
        else:
            self._close_clip()
            self._clip = _Clip(stem, end, self.ring.since(alert["media_time"] - self.settings.pre))
        self._clip.alerts.append(alert)
        tracks = alert.get("tracks") or ([alert["track_id"]] if alert.get("track_id") is not None else [])
        best = self.ring.best(tracks) or (self.ring.frames[-1] if self.ring.frames else None)
        self._job(("snapshot", alert, best.jpeg if best is not None else None))

    def _close_clip(self) -> None:
        if self._clip is not None:
            self._job(("clip", self._clip))
            self._clip = None

    # -- the writer thread ------------------------------------------------------------------------

    def _job(self, job: tuple) -> None:
        with self._jobs_cond:
            self._jobs.append(job)
            self._jobs_cond.notify()

    def _write_loop(self) -> None:
        while True:
            with self._jobs_cond:
                while not self._jobs and not (self._closing and not self._encoder.is_alive()):
                    self._jobs_cond.wait(0.2)
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            if job[0] == "snapshot":
                self._snapshot(job[1], job[2])
            else:
                self._write_clip(job[1])
            self._prune()

    def _snapshot(self, alert: dict, jpeg: Optional[bytes]) -> None:
        path = self.settings.folder / alert["snapshot"]
        saved = None
        if jpeg is not None and self._guarded(path, lambda: path.write_bytes(jpeg)):
            saved = path
            self.stats["snapshots"] += 1
        if self.on_saved is not None:
            self.on_saved(alert, saved)

    def _write_clip(self, clip: _Clip) -> None:
        path = self.settings.folder / f"{clip.stem}.mp4"
        triggers = {a["frame"]: a["rule"] for a in clip.alerts}
        if self._guarded(path, lambda: _write_video(path, clip.frames, self.fps, triggers)):
            self.stats["clips"] += 1
        first = clip.frames[0] if clip.frames else None
        for alert in clip.alerts:
            ids = alert.get("tracks") or [alert.get("track_id")]
            data = {"alert": alert, "clip": alert["clip"], "fps": self.fps,
                    "first_frame": first.index if first else None,
                    "first_time": first.timestamp if first else None,
                    "trigger_position": next((i for i, f in enumerate(clip.frames)
                                              if f.index == alert["frame"]), None),
                    "frames": len(clip.frames),
                    "boxes": [{"frame": f.index, "time": f.timestamp, "track_id": t,
                               "score": f.tracks[t][0], "bbox": f.tracks[t][1]}
                              for f in clip.frames for t in ids if t in f.tracks]}
            side = self.settings.folder / alert["sidecar"]
            self._guarded(side, lambda: side.write_text(json.dumps(data, indent=1) + "\n"))

    def _guarded(self, path: Path, write: Callable[[], Any]) -> bool:
        """Run a write; a full disk (or any OSError) is an event and, once, a warning."""
        try:
            write()
            return True
        except OSError as e:
            full = e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
            reason = "disk full" if full else (e.strerror or str(e))
            self.stats["disk_full"] += int(full)
            try:
                path.unlink()
            except OSError:
                pass
            if self.on_event is not None:
                self.on_event({"event": "clip_failed", "path": path.name, "reason": reason})
            if not self._warned:
                self._warned = True
                self.say(f"warning: --clips {self.settings.folder}: {reason} writing {path.name}; "
                         "the run goes on (clips are skipped while it lasts)")
            return False

    def _prune(self) -> None:
        """Keep the folder's clips under --clips-max-gb: the oldest files go first."""
        if self.settings.max_gb is None:
            return
        try:
            ours = sorted((p for p in self.settings.folder.iterdir() if OURS.match(p.name)),
                          key=lambda p: p.name)
            sizes = [p.stat().st_size for p in ours]
        except OSError:
            return
        total, limit = sum(sizes), self.settings.max_gb * 1e9
        for p, size in zip(ours, sizes):
            if total <= limit:
                break
            try:
                p.unlink()
                total -= size
                self.stats["removed"] += 1
            except OSError:
                pass

    # -- the end ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Every frame encoded, every open clip and snapshot written, then the threads end."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._encoder.join()
        with self._jobs_cond:
            self._jobs_cond.notify_all()
        self._writer.join()

    def summary(self) -> ClipsSummary:
        frames = list(self.ring.frames)
        jpeg = jpeg_bytes(frames)
        s = self.settings
        return {**self.stats, "folder": str(s.folder),
                "buffer_peak_bytes": self.ring.peak_bytes, "buffer_frames": self.ring.frames.maxlen,
                "jpeg_mean_bytes": round(jpeg),
                "memory_bound_bytes": memory_bound(s.pre, s.post, self.fps, jpeg, *self._size, QUEUE)}


def _write_video(path: Path, frames: List[Buffered], fps: float, triggers: dict) -> None:
    """The clip as MP4; the trigger frames marked (a red frame border and the rule's name). A
    file OpenCV could not finish (a full disk) is an OSError."""
    from edgeapp.hw.capture import cv2_module

    cv2 = cv2_module()
    if not frames:
        return
    writer = None
    try:
        for f in frames:
            img = cv2.imdecode(np.frombuffer(f.jpeg, np.uint8), cv2.IMREAD_COLOR)
            if writer is None:
                h, w = img.shape[:2]
                writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
                if not writer.isOpened():
                    _failed(path, frames, 0, "OpenCV cannot write an MP4 here")
            if f.index in triggers:
                h, w = img.shape[:2]
                cv2.rectangle(img, (0, h - 40), (w // 2, h - 1), TRIGGER, 3)
                cv2.putText(img, f"ALERT {triggers[f.index]}", (8, h - 12), cv2.FONT_HERSHEY_SIMPLEX,
                            0.7, TRIGGER, 2, cv2.LINE_AA)
            writer.write(img)
    finally:
        if writer is not None:
            writer.release()
    written = _frame_count(cv2, path)
    if written != len(frames):  # OpenCV says nothing when the disk fills under it
        _failed(path, frames, written, f"{written} of {len(frames)} frames written")


def _failed(path: Path, frames: List[Buffered], written: int, why: str) -> None:
    """An OSError for a clip OpenCV could not write: ENOSPC when the disk has less room than
    the clip's frames take as JPEG (a full disk), else EIO with `why`."""
    import shutil

    needed = sum(len(f.jpeg) for f in frames)
    if shutil.disk_usage(str(path.parent)).free < needed:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    raise OSError(errno.EIO, why, str(path))


def _frame_count(cv2: ModuleType, path: Path) -> int:
    """Frames a written clip gives back (0: it cannot be opened, a truncated MP4)."""
    cap = cv2.VideoCapture(str(path))
    try:
        n = 0
        while cap.isOpened() and cap.grab():
            n += 1
        return n
    finally:
        cap.release()
