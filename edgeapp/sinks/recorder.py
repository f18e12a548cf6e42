"""The camera's recording: annotated frames written to a video file with OpenCV."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import numpy as np

from edgeapp.errors import UsageError
from edgeapp.hw.capture import cv2_module
from edgeapp.sinks.records import make_parent_folder

CODECS = {".mp4": "mp4v", ".mov": "mp4v", ".m4v": "mp4v", ".avi": "MJPG"}


class Recorder:
    """Writes annotated frames to a video (mp4v for .mp4/.mov, MJPG for .avi), opened on the
    first frame so its size is the frames' size. The file's folder is made, and the name
    checked, when the recorder is made: before any frame is captured."""

    def __init__(self, path: str, fps: Optional[float] = None) -> None:
        suffix = Path(path).suffix.lower()
        if suffix not in CODECS:
            raise UsageError(f"--record {path}: name the video .mp4 or .avi (OpenCV picks the "
                             "codec by the extension)")
        make_parent_folder(Path(path))
        self.path, self.fps = path, fps  # None: the source's frame rate (set by the loop), else 30
        self.codec = CODECS[suffix]
        self._writer = None
        self.frames = 0

    def write(self, img: np.ndarray) -> None:
        cv2 = cv2_module()
        if self._writer is None:
            h, w = img.shape[:2]
            fps = self.fps if self.fps and self.fps > 0 else 30.0
            self._writer = cv2.VideoWriter(self.path, cv2.VideoWriter_fourcc(*self.codec), fps, (w, h))
            if not self._writer.isOpened():
                self._writer = None
                raise UsageError(f"--record {self.path}: {self._why_not()}")
        self._writer.write(img)
        self.frames += 1

    def _why_not(self) -> str:
        folder = Path(self.path).parent
        if not os.access(folder, os.W_OK):
            return f"the folder {folder} is not writable"
        other = ".avi" if self.codec != "MJPG" else ".mp4"
        return (f"this OpenCV build cannot write {self.codec} video; try a {other} name, or "
                "pip install opencv-python (PyPI's builds write both)")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None
