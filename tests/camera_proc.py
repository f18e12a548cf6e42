"""Helpers for the live view and MQTT tests: an endless camera stream, and `edgeapp camera`
run as a user runs it (a subprocess), with its stderr read as it comes so a test can wait for
a line. (Videos, and the index marker their frames carry: tests/media.py.)

`StreamServer`: what an IP camera serves, MJPEG over HTTP, without end. A camera reading it
runs until the test stops it, however slow the machine: a video file would end after its
length in real time whatever the tests still had to do.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from conftest import ROOT
from media import BGR, CLASSES, H, W, colour_frame, mark


def square_frame(name: Optional[str], cell: int, index: int) -> np.ndarray:
    """Black with one pure-colour square on the detection models' 4x4 grid (80x60 pixels a
    cell at 320x240), or none."""
    f = np.zeros((H, W, 3), np.uint8)
    if name is not None:
        r, c = divmod(cell % 16, 4)
        f[r * 60:(r + 1) * 60, c * 80:(c + 1) * 80, BGR[name]] = 255
    return mark(f, index)


class StreamServer:
    """An endless MJPEG stream on 127.0.0.1 at `fps`: `frame(i)` makes frame i (default: the
    colour classes in turn, a second each, with the index marker). Each connection starts at
    frame 0; `served` counts the frames sent."""

    def __init__(self, fps: float = 15.0, frame: Optional[Callable[[int], np.ndarray]] = None) -> None:
        import cv2

        rng = np.random.default_rng(11)
        make = frame or (lambda i: mark(colour_frame(CLASSES[(i // 15) % 3], rng), i))
        stop = self._stop = threading.Event()
        owner = self
        self.served = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.end_headers()
                i, start = 0, time.monotonic()
                try:
                    while not stop.is_set():
                        jpeg = cv2.imencode(".jpg", make(i))[1].tobytes()
                        self.wfile.write(b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: "
                                         + str(len(jpeg)).encode() + b"\r\n\r\n" + jpeg + b"\r\n")
                        owner.served += 1
                        i += 1
                        stop.wait(max(0.0, start + i / fps - time.monotonic()))
                except OSError:  # the camera went away
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/camera.mjpg"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                         daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "StreamServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CameraProc:
    """`python -m edgeapp camera ...` in the background; stderr lines collected as they come."""

    def __init__(self, *args: object, env: Optional[dict] = None, cwd: Path = ROOT) -> None:
        cmd = [sys.executable, "-m", "edgeapp", "camera", *[str(a) for a in args]]
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        self.stdout = ""
        self._cond = threading.Condition()
        self._err = threading.Thread(target=self._read_err, daemon=True)
        self._out = threading.Thread(target=self._read_out, daemon=True)
        self._err.start()
        self._out.start()

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def _read_out(self) -> None:
        self.stdout = self.proc.stdout.read()

    def wait_line(self, pred: Callable[[str], bool], timeout: float = 60.0) -> str:
        """The first stderr line matching `pred`; fails on timeout or when the process ends."""
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if pred(line):
                        return line
                if self.proc.poll() is not None and not self._err.is_alive():
                    raise AssertionError(f"camera exited ({self.proc.returncode}): {self.stderr}")
                left = end - time.monotonic()
                assert left > 0, f"no such line within {timeout} s: {self.stderr}"
                self._cond.wait(min(left, 0.2))

    def url(self) -> str:
        """The first URL the live view printed (without what follows it on the line)."""
        line = self.wait_line(lambda ln: "live view on http://" in ln)
        return line.split("live view on ", 1)[1].split()[0]

    @property
    def stderr(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal it (SIGTERM: a clean stop, as systemd does) and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"camera did not stop within {timeout} s: {self.stderr}")
        self._err.join(5)
        self._out.join(5)
        return rc

    def summary(self) -> dict:
        return json.loads(self.lines[-1])

    def __enter__(self) -> "CameraProc":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
