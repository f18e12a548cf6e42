"""The camera's window: annotated frames shown with OpenCV (q or Esc quits)."""

from __future__ import annotations

import os
import sys

import numpy as np

from edgeapp.errors import UsageError
from edgeapp.hw.capture import cv2_module


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
