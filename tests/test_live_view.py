"""`edgeapp camera --serve`: the live view, served by a real `edgeapp camera` process running the
tiny colour classifier on an endless MJPEG camera stream (camera_proc.StreamServer), read over
HTTP with http.client and in a real headless Chromium.

The module's camera listens on every interface (0.0.0.0, port 0: any free port) with a token
read from a file, as a user exposes it to a phone; the tests open the LAN address it prints.
Access: a foreign Host header gets 421 (DNS rebinding), a missing or wrong token 401, and the
token never appears in anything the camera prints (stderr is not a terminal here).

No test depends on how fast this machine is: the stream never ends (the last test stops the
camera), and every wait is for a condition, with a generous guard.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import signal
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
from camera_proc import CameraProc, StreamServer
from live_view_client import BEARER, TOKEN, get, stats, wait_for
from media import CLASSES, H, W, make_video, marker_index

from edgeapp.errors import ExitCode, UsageError
from edgeapp.sinks.live_http import Guard, host_name, resolve_token
from edgeapp.sinks.live_view import (
    ServeAddress,
    check_exposure,
    exposure_warning,
    open_urls,
    parse_serve,
)

cv2 = pytest.importorskip("cv2")

CHROMIUM = os.environ.get("EDGEAPP_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
SERVE_FPS = 8


@pytest.fixture(scope="module")
def stream():
    with StreamServer(fps=15.0) as server:
        yield server


@pytest.fixture(scope="module")
def live(tiny_model, stream, tmp_path_factory):
    """One camera serving for the module's tests; the last test stops it."""
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN + "\n")
    with CameraProc(tiny_model, "--source", stream.url, "--serve", "0.0.0.0:0", "--serve-token-file",
                    token_file, "--serve-fps", SERVE_FPS, "--summary", "json") as cam:
        cam.base = cam.url()
        yield cam


class MjpegReader:
    """Reads /stream.mjpg part by part, checking the multipart framing of each."""

    def __init__(self, base: str, timeout: float = 15.0, path: str = f"/stream.mjpg?token={TOKEN}") -> None:
        u = urlsplit(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        self.conn.request("GET", path)
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


def lan_ipv4() -> str | None:
    """This machine's address on the default route (a UDP connect sends nothing), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 9))
        except OSError:
            return None
        addr = s.getsockname()[0]
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


def test_printed_url_is_one_to_open_with_the_real_port(live):
    u = urlsplit(live.base)
    assert u.scheme == "http" and u.hostname not in ("0.0.0.0", "::") and u.port > 0
    lan = lan_ipv4()
    if lan is not None:
        assert u.hostname == lan  # the default route's address first
    assert "port 0" not in live.stderr and "http://0.0.0.0" not in live.stderr
    line = live.wait_line(lambda ln: "live view on http://" in ln)
    assert f"{live.base}?token=YOUR-TOKEN" in line  # how to open it, without the token itself
    assert TOKEN not in live.stderr
    assert get(live.base, "/stats", BEARER)[0] == 200  # it answers at that address


def test_page_sets_a_cookie_that_the_page_and_snapshot_use(live):
    status, headers, body = get(live.base, f"/?token={TOKEN}")
    assert status == 200 and headers["content-type"].startswith("text/html")
    page = body.decode()
    assert 'withToken("/stream.mjpg")' in page and 'withToken("/stats")' in page
    cookie = headers["set-cookie"]
    name = f"edgeapp_token_{urlsplit(live.base).port}"
    assert cookie.startswith(f"{name}={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert headers["referrer-policy"] == "no-referrer"
    jar = {"Cookie": f"{name}={TOKEN}"}
    wait_for(lambda: stats(live.base).get("frame") is not None, what="a first frame")
    status, headers, body = get(live.base, "/snapshot.jpg", jar)
    assert status == 200 and headers["content-type"] == "image/jpeg"
    assert "set-cookie" not in headers  # only a token in the query sets it
    img = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
    assert img.shape == (H, W, 3)
    assert img[-22:, :100].mean() < 60  # the status line's dark box: the frame is annotated
    assert get(live.base, "/nothing", jar)[0] == 404


def test_stats_has_the_numbers_and_updates(live, stream):
    first = wait_for(lambda: (lambda s: s if s.get("frames_processed", 0) >= 3 else None)(stats(live.base)),
                     what="3 processed frames")
    assert first["running"] is True and first["device"] == "cpu" and first["task"] == "classify"
    assert "CPU" in first["device_note"] or "cpu" in first["device_note"]
    assert first["model"].endswith(".tflite") and first["source"] == stream.url
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
# Who may see it


PATHS = ("/", "/stats", "/snapshot.jpg", "/stream.mjpg")


def test_without_the_token_nothing_is_served(live):
    port = urlsplit(live.base).port
    wrong = ("y" if TOKEN[0] == "x" else "x") + TOKEN[1:]  # never the token itself (it may begin with x)
    for base in (live.base, f"http://127.0.0.1:{port}/"):  # loopback too: it is the same server
        for path in PATHS:
            for headers, query in [({}, ""), ({}, f"?token={wrong}"), ({"Authorization": f"Bearer {wrong}"}, ""),
                                   ({"Cookie": f"edgeapp_token_{port}={wrong}"}, ""),
                                   ({"Cookie": f"edgeapp_token_{port + 1}={TOKEN}"}, "")]:
                status, got, body = get(base, path + query, headers)
                assert status == 401, (base, path, headers, query)
                assert got["www-authenticate"].startswith("Bearer")
                assert b"?token=YOUR-TOKEN" in body and TOKEN.encode() not in body
                assert "set-cookie" not in got
    for path in PATHS[:3]:  # the right token in each of its three places
        assert get(live.base, f"{path}?token={TOKEN}")[0] in (200, 503)
        assert get(live.base, path, BEARER)[0] in (200, 503)
        assert get(live.base, path, {"Cookie": f"other=1; edgeapp_token_{port}={TOKEN}"})[0] in (200, 503)


def test_foreign_host_headers_are_refused(live):
    """DNS rebinding: a page on evil.example whose name resolves to this machine."""
    port = urlsplit(live.base).port
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.nip.io", "[2001:db8::1]", "8.8.8.8"):
        for path in PATHS:
            status, headers, body = get(live.base, f"{path}?token={TOKEN}", {"Host": host})
            assert status == 421, (host, path, status)
            assert "set-cookie" not in headers and b"\xff\xd8" not in body
    name = socket.gethostname()
    lan = urlsplit(live.base).hostname
    for host in ("localhost", f"localhost:{port}", f"127.0.0.1:{port}", "[::1]", f"{name}:{port}",
                 f"{name}.local", f"{name.upper()}.:{port}", f"{lan}:{port}"):
        assert get(live.base, "/stats", {"Host": host, **BEARER})[0] == 200, host
    # no Host at all (HTTP/1.0 allows it; no browser omits it): refused as well
    u = urlsplit(live.base)
    with socket.create_connection((u.hostname, u.port), 10) as s:
        s.sendall(f"GET /stats?token={TOKEN} HTTP/1.0\r\n\r\n".encode())
        assert s.recv(64).startswith(b"HTTP/1.0 421 Misdirected Request")


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
            denied = browser.new_page().goto(live.base)  # a browser without the token
            assert denied.status == 401
            context = browser.new_context(viewport={"width": 900, "height": 560})
            page = context.new_page()
            assert page.goto(f"{live.base}?token={TOKEN}").status == 200
            page.wait_for_function("document.getElementById('video').naturalWidth > 0", timeout=30000)
            assert page.evaluate("document.getElementById('video').naturalWidth") == W
            page.wait_for_function("document.getElementById('frame').textContent.startsWith('#')",
                                   timeout=30000)
            shot1 = page.locator("#video").screenshot()
            text1 = page.inner_text("#frame")
            page.wait_for_function(
                f"document.getElementById('frame').textContent !== {json.dumps(text1)}", timeout=30000)
            page.wait_for_function("(n) => document.getElementById('frame').textContent !== n",
                                   arg=page.inner_text("#frame"), timeout=30000)
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
            # the cookie alone opens it again (a bookmark without the token)
            again = context.new_page()
            assert again.goto(live.base).status == 200
            again.wait_for_function("document.getElementById('video').naturalWidth > 0", timeout=30000)
            again.wait_for_function("document.getElementById('frame').textContent.startsWith('#')",
                                    timeout=30000)
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
    stalled.sendall(f"GET /stream.mjpg?token={TOKEN} HTTP/1.0\r\nHost: {u.netloc}\r\n\r\n".encode())
    try:  # and never reads
        before = stats(live.base)["frames_processed"]
        reader = MjpegReader(live.base)
        try:
            images = reader.frames(6)
        finally:
            reader.close()
        assert_newer_frames(images)
        assert stats(live.base)["frames_processed"] > before  # inference went on
        rc = live.stop(signal.SIGTERM, timeout=30)  # with the stalled viewer still connected
    finally:
        stalled.close()
    assert rc == 0, live.stderr
    s = live.summary()
    assert s["stop"] == "stopped" and s["frames_processed"] > 0
    lv = s["live_view"]
    assert lv["viewers_total"] >= 5 and lv["frames_encoded"] > 0
    # never above --serve-fps: the encoder waits 1/SERVE_FPS between frames (a bound the rate
    # limit's own schedule sets: a loaded machine encodes fewer, never more)
    assert lv["frames_encoded"] <= SERVE_FPS * s["seconds"] + 2
    assert live.stdout == ""  # with --serve, records go to stdout only when asked
    assert TOKEN not in live.stderr  # nor in the summary


# ---------------------------------------------------------------------------------------------
# On loopback: no token needed, the Host check still on


def test_loopback_without_token_still_refuses_foreign_hosts(tiny_model, stream):
    with CameraProc(tiny_model, "--source", stream.url, "--serve", "127.0.0.1:0", "--summary",
                    "json") as cam:
        base = cam.url()
        port = urlsplit(base).port
        assert base == f"http://127.0.0.1:{port}/" and "warning" not in cam.stderr
        wait_for(lambda: json.loads(get(base, "/stats")[2]).get("frame") is not None, what="a frame")
        assert get(base, "/snapshot.jpg")[0] == 200  # no token on loopback
        for host in ("evil.example", f"evil.example:{port}", "attacker.test:80"):
            status, _, body = get(base, "/snapshot.jpg", {"Host": host})
            assert status == 421 and b"\xff\xd8" not in body
        assert cam.stop() == 0, cam.stderr


def test_nothing_encoded_without_viewers(tiny_model, tmp_path):
    video = make_video(tmp_path / "short.avi", ["green"] * 20, seed=4, marked=True)
    with CameraProc(tiny_model, "--source", video, "--serve", "127.0.0.1:0", "--format", "jsonl",
                    "--summary", "json") as cam:
        assert cam.wait() == 0, cam.stderr
    s = cam.summary()
    assert s["frames_processed"] == 20 and s["live_view"]["frames_encoded"] == 0
    assert len(cam.stdout.splitlines()) == 20  # --format asked for the records
    assert "live view on http://127.0.0.1:" in cam.stderr and "warning" not in cam.stderr


# ---------------------------------------------------------------------------------------------
# Serving beyond loopback: a token, or an explicit none


@pytest.fixture()
def short_video(tmp_path) -> Path:
    return make_video(tmp_path / "v.avi", ["red"] * 3, seed=5, marked=True)


def test_beyond_loopback_without_a_token_is_a_usage_error(cli, tiny_model, short_video, monkeypatch):
    monkeypatch.delenv("EDGEAPP_SERVE_TOKEN", raising=False)
    for serve in ("0.0.0.0:0", "[::]:0", "192.0.2.77:8080"):
        r = cli("camera", tiny_model, "--source", short_video, "--serve", serve)
        assert r.exit_code == ExitCode.USAGE, r.stderr
        assert r.stderr.count("\n") == 1 and "--serve-token none" in r.stderr
    r = cli("camera", tiny_model, "--source", short_video, "--serve", "0.0.0.0:0", "--serve-token", "short")
    assert r.exit_code == ExitCode.USAGE and "at least 8 characters" in r.stderr


def test_serve_errors_are_usage_errors(cli, tiny_model, short_video):
    r = cli("camera", tiny_model, "--source", short_video, "--serve", "host:port")
    assert r.exit_code == ExitCode.USAGE and "port must be a number" in r.stderr
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        port = busy.getsockname()[1]
        r = cli("camera", tiny_model, "--source", short_video, "--serve", f"127.0.0.1:{port}")
        assert r.exit_code == ExitCode.USAGE and "in use" in r.stderr, r.stderr
    finally:
        busy.close()


def test_declining_the_token_warns_once_with_the_real_port(cli, tiny_model, short_video):
    r = cli("camera", tiny_model, "--source", short_video, "--serve", "0.0.0.0:0", "--serve-token",
            "none", "--summary", "json")
    assert r.exit_code == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and "without a token" in warnings[0], r.stderr
    url = r.stderr.split("live view on ", 1)[1].split()[0]
    port = urlsplit(url).port
    assert port > 0 and f"(port {port})" in warnings[0] and "port 0" not in r.stderr
    assert urlsplit(url).hostname != "0.0.0.0"


def test_the_token_from_the_environment_and_not_printed(tiny_model, stream):
    token = secrets.token_urlsafe(12)
    with CameraProc(tiny_model, "--source", stream.url, "--serve", "0.0.0.0:0",
                    env={"EDGEAPP_SERVE_TOKEN": token}) as cam:
        base = cam.url()
        assert get(base, "/stats")[0] == 401
        assert get(base, "/stats", {"Authorization": f"Bearer {token}"})[0] == 200
        assert cam.stop() == 0, cam.stderr
    assert token not in cam.stderr and token not in cam.stdout


def test_the_token_is_shown_only_to_a_terminal(tiny_model, stream):
    """On a terminal (the user's own screen) the URL comes whole, token included, once."""
    import pty
    import select
    import subprocess
    import sys

    from conftest import ROOT

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "edgeapp", "camera", str(tiny_model), "--source",
                             stream.url, "--serve", "0.0.0.0:0", "--serve-token", TOKEN],
                            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=slave)
    os.close(slave)
    seen = b""
    try:
        end = time.monotonic() + 120
        while b"live view on" not in seen or not seen.endswith(b"\n"):
            assert time.monotonic() < end and proc.poll() is None, seen
            if select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 4096)
        line = next(ln for ln in seen.decode().splitlines() if "live view on" in ln)
        url = line.split("live view on ", 1)[1].split()[0]
        assert url.endswith(f"/?token={TOKEN}") and seen.decode().count(TOKEN) == 1
        assert get(url, url[url.index("/", 8):])[0] == 200  # the printed URL opens the page
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        os.close(master)


# ---------------------------------------------------------------------------------------------
# Pieces


@pytest.mark.parametrize("text, host, port", [
    ("8080", "127.0.0.1", 8080), ("0", "127.0.0.1", 0), ("localhost", "localhost", 8080),
    ("0.0.0.0:9000", "0.0.0.0", 9000), (":7000", "127.0.0.1", 7000), ("[::1]:8081", "::1", 8081),
    ("[::]", "::", 8080), ("192.168.1.5:", "192.168.1.5", 8080),
])
def test_parse_serve(text, host, port):
    assert parse_serve(text) == ServeAddress(host, port)


@pytest.mark.parametrize("text", ["host:port", "70000", "[::1", "a b:80", "1.2.3.4:5:6:x"])
def test_parse_serve_rejects(text):
    with pytest.raises(UsageError):
        parse_serve(text)


def test_exposure_needs_a_token_beyond_loopback():
    check_exposure(parse_serve("8080"), None, False)
    check_exposure(parse_serve("[::1]:80"), None, False)
    for text in ("0.0.0.0:8080", "192.168.1.5", "camera.lan:80"):
        with pytest.raises(UsageError):
            check_exposure(parse_serve(text), None, False)
        check_exposure(parse_serve(text), "a-token-123", False)
        check_exposure(parse_serve(text), None, True)
    assert exposure_warning(parse_serve("8080"), 8080, None) is None
    assert exposure_warning(parse_serve("0.0.0.0:0"), 4321, "a-token-123") is None
    line = exposure_warning(parse_serve("0.0.0.0:0"), 4321, None)
    assert "every network interface (port 4321)" in line and "port 0" not in line
    assert "192.168.1.5" in exposure_warning(parse_serve("192.168.1.5"), 8080, None)


def test_open_urls_never_the_wildcard():
    assert open_urls(parse_serve("192.168.1.5:0"), 4000) == ["http://192.168.1.5:4000/"]
    assert open_urls(parse_serve("[::1]:0"), 4000) == ["http://[::1]:4000/"]
    for text in ("0.0.0.0:0", "[::]:0"):
        urls = open_urls(parse_serve(text), 4000)
        assert urls and all(u.endswith(":4000/") and "0.0.0.0" not in u and "[::]" not in u for u in urls)


@pytest.mark.parametrize("header, name", [
    ("Example.COM", "example.com"), ("example.com:8080", "example.com"), ("localhost.", "localhost"),
    ("[::1]:8080", "::1"), ("[fe80::1%25eth0]", "fe80::1%25eth0"), ("", ""), ("[::1", ""),
])
def test_host_name(header, name):
    assert host_name(header) == name


def test_guard_host_names():
    g = Guard("0.0.0.0", None, ["camera.lan", " "])
    assert g.host_ok("camera.lan:8080") and g.host_ok("CAMERA.LAN.") and g.host_ok("localhost")
    assert g.host_ok("127.0.0.2") and g.host_ok("[::1]:80") and g.host_ok(socket.gethostname())
    assert not g.host_ok("evil.example") and not g.host_ok(None) and not g.host_ok("")
    assert not g.host_ok("8.8.8.8") and not g.host_ok("camera.lan.evil.example")
    assert Guard("cam.example", None).host_ok("cam.example:80")


def test_resolve_token(tmp_path):
    f = tmp_path / "token"
    f.write_text("from-the-file-123\nignored\n")
    assert resolve_token(None, None, {}) == (None, False)
    assert resolve_token("none", None, {"EDGEAPP_SERVE_TOKEN": "from-env-12345"}) == (None, True)
    assert resolve_token("given-token-1", None, {}) == ("given-token-1", False)
    assert resolve_token(None, f, {"EDGEAPP_SERVE_TOKEN": "from-env-12345"}) == ("from-the-file-123", False)
    assert resolve_token(None, None, {"EDGEAPP_SERVE_TOKEN": "from-env-12345"}) == ("from-env-12345", False)
    for bad in ("short", "has space 1234", "semi;colon1234", "é-accent-1234"):
        with pytest.raises(UsageError):
            resolve_token(bad, None, {})
    with pytest.raises(UsageError):
        resolve_token("given-token-1", f, {})
    with pytest.raises(UsageError):
        resolve_token(None, tmp_path / "missing", {})
