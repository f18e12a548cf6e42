"""`edgeapp camera --serve`: the live view, served by a real `edgeapp camera` process running the
tiny colour classifier on a real OpenCV video, read over HTTP on 127.0.0.1 and in a real
headless Chromium.

Ports: the camera binds port 0 (any free port) and prints its URL, so parallel runs never
collide. The long video plays at its own frame rate (--drop-frames), like a camera.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
from camera_proc import CameraProc, H, W, color_frame, marker_index, write_video
from conftest import CLASSES

from edgeapp.errors import ExitCode
from edgeapp.sinks.live_view import ServeAddress, exposure_warning, parse_serve

cv2 = pytest.importorskip("cv2")

CHROMIUM = os.environ.get("EDGEAPP_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
SERVE_FPS = 8


@pytest.fixture(scope="module")
def long_video(tmp_path_factory) -> Path:
    """30 s at 15 FPS: the colour changes every second."""
    rng = np.random.default_rng(3)
    frames = [color_frame(CLASSES[(i // 15) % 3], i, rng) for i in range(450)]
    return write_video(tmp_path_factory.mktemp("live") / "long.avi", frames, fps=15.0)


@pytest.fixture(scope="module")
def live(tiny_model, long_video):
    """One camera serving for the module's tests; the last test stops it."""
    with CameraProc(tiny_model, "--source", long_video, "--drop-frames", "--serve", "127.0.0.1:0",
                    "--serve-fps", SERVE_FPS, "--summary", "json", "--duration", "60") as cam:
        cam.base = cam.url()
        yield cam


def get(base: str, path: str, timeout: float = 10.0) -> tuple[int, dict, bytes]:
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def stats(base: str) -> dict:
    status, headers, body = get(base, "/stats")
    assert status == 200 and headers["content-type"] == "application/json"
    return json.loads(body)


def wait_for(pred, timeout: float = 20.0, what: str = "condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class MjpegReader:
    """Reads /stream.mjpg part by part, checking the multipart framing of each."""

    def __init__(self, base: str, timeout: float = 15.0) -> None:
        u = urlsplit(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        self.conn.request("GET", "/stream.mjpg")
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200
        ctype = self.resp.getheader("Content-Type")
        assert ctype.startswith("multipart/x-mixed-replace; boundary=")
        self.boundary = ctype.split("boundary=", 1)[1].encode()

    def part(self) -> bytes:
        r = self.resp
        assert r.readline() == b"--" + self.boundary + b"\r\n"
        headers = {}
        while True:
            line = r.readline()
            assert line.endswith(b"\r\n"), line
            if line == b"\r\n":
                break
            k, v = line.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()
        assert headers["content-type"] == "image/jpeg"
        body = r.read(int(headers["content-length"]))
        assert body[:2] == b"\xff\xd8" and body[-2:] == b"\xff\xd9"  # a whole JPEG
        assert r.read(2) == b"\r\n"
        return body

    def frames(self, n: int) -> list[np.ndarray]:
        out = []
        for _ in range(n):
            img = cv2.imdecode(np.frombuffer(self.part(), np.uint8), cv2.IMREAD_COLOR)
            assert img is not None and img.shape == (H, W, 3)
            out.append(img)
        return out

    def close(self) -> None:
        self.resp.close()  # the response holds the socket open too
        self.conn.close()


def assert_newer_frames(images: list[np.ndarray]) -> None:
    idx = [marker_index(i) for i in images]
    assert all(b != a for a, b in zip(idx, idx[1:])), idx  # each part a newer frame


# ---------------------------------------------------------------------------------------------
# Over HTTP


def test_page_snapshot_and_unknown_paths(live):
    status, headers, body = get(live.base, "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    page = body.decode()
    assert 'src="/stream.mjpg"' in page and "/stats" in page
    wait_for(lambda: stats(live.base).get("frame") is not None, what="a first frame")
    status, headers, body = get(live.base, "/snapshot.jpg")
    assert status == 200 and headers["content-type"] == "image/jpeg"
    img = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
    assert img.shape == (H, W, 3)
    assert img[-22:, :100].mean() < 60  # the status line's dark box: the frame is annotated
    assert get(live.base, "/nothing")[0] == 404


def test_stats_has_the_numbers_and_updates(live):
    first = wait_for(lambda: (lambda s: s if s.get("frames_processed", 0) >= 3 else None)(stats(live.base)),
                     what="3 processed frames")
    assert first["running"] is True and first["device"] == "cpu" and first["task"] == "classify"
    assert "CPU" in first["device_note"] or "cpu" in first["device_note"]
    assert first["model"].endswith(".tflite") and first["source"].endswith("long.avi")
    assert 0 < first["inference_ms"]["p50"] <= first["inference_ms"]["p99"]
    assert first["fps"] > 0 and first["frames_captured"] >= first["frames_processed"]
    assert first["classes"][0]["label"] in CLASSES
    later = wait_for(lambda: (lambda s: s if s["frame"] > first["frame"] else None)(stats(live.base)),
                     what="a newer frame in /stats")
    assert later["frames_processed"] > first["frames_processed"]


def test_stream_framing_and_newest_frames(live):
    reader = MjpegReader(live.base)
    try:
        images = reader.frames(4)
    finally:
        reader.close()
    assert_newer_frames(images)


def test_two_viewers_at_once(live):
    # the server notices a closed viewer only when a write to it fails: the previous test's
    # reader may still be counted for a frame or two
    wait_for(lambda: stats(live.base)["viewers"] == 0, what="earlier viewers gone")
    a, b = MjpegReader(live.base), MjpegReader(live.base)
    try:
        got: dict = {}
        ta = threading.Thread(target=lambda: got.__setitem__("a", a.frames(3)))
        ta.start()
        got["b"] = b.frames(3)
        ta.join(30)
        assert stats(live.base)["viewers"] == 2
    finally:
        a.close()
        b.close()
    assert len(got["a"]) == 3 and len(got["b"]) == 3
    assert_newer_frames(got["a"])
    assert_newer_frames(got["b"])
    wait_for(lambda: stats(live.base)["viewers"] == 0, what="viewers gone")  # disconnects cost nothing


# ---------------------------------------------------------------------------------------------
# In a real browser


def _chromium_or_skip():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}: sudo apt-get install -y chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed: pip install -e '.[dev]'")
    return sync_playwright


def test_browser_shows_changing_frames_and_live_numbers(live, tmp_path):
    sync_playwright = _chromium_or_skip()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 900, "height": 560})
            page.goto(live.base)
            page.wait_for_function("document.getElementById('video').naturalWidth > 0", timeout=20000)
            assert page.evaluate("document.getElementById('video').naturalWidth") == W
            page.wait_for_function("document.getElementById('frame').textContent.startsWith('#')",
                                   timeout=20000)
            shot1 = page.locator("#video").screenshot()
            text1 = page.inner_text("#frame")
            page.wait_for_function(
                f"document.getElementById('frame').textContent !== {json.dumps(text1)}", timeout=20000)
            page.wait_for_timeout(600)
            shot2 = page.locator("#video").screenshot()
            text2 = page.inner_text("#frame")
            img1 = cv2.imdecode(np.frombuffer(shot1, np.uint8), cv2.IMREAD_COLOR)
            img2 = cv2.imdecode(np.frombuffer(shot2, np.uint8), cv2.IMREAD_COLOR)
            assert img1.shape == img2.shape
            assert np.abs(img1.astype(int) - img2.astype(int)).sum() > 0  # the picture moved
            assert text1 != text2  # and the numbers did
            assert page.inner_text("#state") == "live"
            assert page.inner_text("#device") == "CPU"
            assert "on CPU" in page.inner_text("#note")
            assert page.inner_text("#fps") not in ("", "–")
            assert page.inner_text("#inference").startswith("p50 ")
            assert page.inner_text("#results li").split()[0] in CLASSES
            page.screenshot(path=str(tmp_path / "live_view.png"))
        finally:
            browser.close()
    assert (tmp_path / "live_view.png").stat().st_size > 10000


# ---------------------------------------------------------------------------------------------
# A viewer that stops reading, then the stop: keep this test last (it stops the camera)


def test_stalled_viewer_costs_others_nothing_and_stop_is_clean(live):
    u = urlsplit(live.base)
    stalled = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect((u.hostname, u.port))
    stalled.sendall(b"GET /stream.mjpg HTTP/1.0\r\n\r\n")  # and never reads
    try:
        before = stats(live.base)["frames_processed"]
        reader = MjpegReader(live.base)
        try:
            images = reader.frames(6)
        finally:
            reader.close()
        assert_newer_frames(images)
        assert stats(live.base)["frames_processed"] > before  # inference went on
        t0 = time.monotonic()
        rc = live.stop(signal.SIGTERM, timeout=30)  # with the stalled viewer still connected
    finally:
        stalled.close()
    assert rc == 0, live.stderr
    s = live.summary()
    assert s["stop"] == "stopped" and s["frames_processed"] > 0
    lv = s["live_view"]
    assert lv["viewers_total"] >= 5 and lv["frames_encoded"] > 0
    assert lv["frames_encoded"] <= SERVE_FPS * s["seconds"] + 2  # never above --serve-fps
    assert live.stdout == ""  # with --serve, records go to stdout only when asked
    print(f"stop took {time.monotonic() - t0:.2f} s")


# ---------------------------------------------------------------------------------------------
# Nobody watching, bad flags


def test_nothing_encoded_without_viewers(tiny_model, tmp_path):
    rng = np.random.default_rng(4)
    video = write_video(tmp_path / "short.avi", [color_frame("green", i, rng) for i in range(20)], 30)
    with CameraProc(tiny_model, "--source", video, "--serve", "127.0.0.1:0", "--format", "jsonl",
                    "--summary", "json") as cam:
        assert cam.wait() == 0, cam.stderr
    s = cam.summary()
    assert s["frames_processed"] == 20 and s["live_view"]["frames_encoded"] == 0
    assert len(cam.stdout.splitlines()) == 20  # --format asked for the records
    assert "live view on http://127.0.0.1:" in cam.stderr and "warning" not in cam.stderr


def test_serve_errors_are_usage_errors(cli, tiny_model, tmp_path):
    rng = np.random.default_rng(5)
    video = write_video(tmp_path / "v.avi", [color_frame("red", i, rng) for i in range(3)], 30)
    r = cli("camera", tiny_model, "--source", video, "--serve", "host:port")
    assert r.exit_code == ExitCode.USAGE and "port must be a number" in r.stderr
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        port = busy.getsockname()[1]
        r = cli("camera", tiny_model, "--source", video, "--serve", f"127.0.0.1:{port}")
        assert r.exit_code == ExitCode.USAGE and "in use" in r.stderr, r.stderr
    finally:
        busy.close()


@pytest.mark.parametrize("text, host, port", [
    ("8080", "127.0.0.1", 8080), ("0", "127.0.0.1", 0), ("localhost", "localhost", 8080),
    ("0.0.0.0:9000", "0.0.0.0", 9000), (":7000", "127.0.0.1", 7000), ("[::1]:8081", "::1", 8081),
    ("[::]", "::", 8080), ("192.168.1.5:", "192.168.1.5", 8080),
])
def test_parse_serve(text, host, port):
    assert parse_serve(text) == ServeAddress(host, port)


@pytest.mark.parametrize("text", ["host:port", "70000", "[::1", "a b:80", "1.2.3.4:5:6:x"])
def test_parse_serve_rejects(text):
    from edgeapp.errors import UsageError

    with pytest.raises(UsageError):
        parse_serve(text)


def test_exposure_warning_only_beyond_loopback():
    assert exposure_warning(parse_serve("8080")) is None
    assert exposure_warning(parse_serve("[::1]:80")) is None
    assert "every network interface" in exposure_warning(parse_serve("0.0.0.0:8080"))
    assert "192.168.1.5" in exposure_warning(parse_serve("192.168.1.5"))
