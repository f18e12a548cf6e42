"""Live view for a headless camera (`edgeapp camera --serve`): the annotated frames and the
numbers in a browser, from a small web server in the camera process.

Routes: `/` a page (live_view.html, no build step) that shows `/stream.mjpg` and polls
`/stats`; `/stream.mjpg` the annotated frames as MJPEG (multipart/x-mixed-replace);
`/stats` JSON; `/snapshot.jpg` the newest annotated frame. The HTTP side (routes, streaming,
the Host check and the token) is live_http.py; this module is the server's life cycle and the
hand-off from the inference loop.

Why the standard library's ThreadingHTTPServer: nothing to install on a Pi or a Dev Board
(Python 3.7), one thread per connection suits a handful of viewers and an MJPEG stream, which
is a blocking loop of writes, and the inference loop is plain threads already. See docs/camera.md.

The hand-off never slows inference: the loop's `on_frame` keeps a reference to the newest frame
(no copy, no drawing, no encoding) and returns. An encoder thread draws the overlay if the loop
did not and encodes JPEG only while someone watches, at most `fps` times a second, always the
newest frame. Each viewer's thread sends the newest JPEG whenever it is ready for one: a slow
viewer skips frames, nothing queues, and a stalled one times out on its own.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

import numpy as np

from edgeapp.core.stats import p50_p99
from edgeapp.core.vision.frames import mosaic
from edgeapp.errors import UsageError
from edgeapp.hw.netif import local_addresses
from edgeapp.sinks.live_http import MAX_VIEWERS, Guard, LiveStats, LiveSummary, make_handler, token_required
from edgeapp.tasks.base import Result, annotate_frame

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

    from edgeapp.sinks.frame_stats import StreamStats
    from edgeapp.tasks.base import TaskKind

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
STATS_WINDOW = 300  # frames behind the live percentiles
ALERTS = 20  # the latest alerts /stats shows


# ---------------------------------------------------------------------------------------------
# --serve [HOST:]PORT


@dataclass(frozen=True)
class ServeAddress:
    host: str
    port: int  # 0: any free port (the URL printed at start says which)

    @property
    def all_interfaces(self) -> bool:
        return self.host in ("0.0.0.0", "::", "")

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_serve(text: str, flag: str = "--serve") -> ServeAddress:
    """`8080`, `HOST`, `HOST:PORT`, `:PORT`, `[::1]:8080`; the host defaults to 127.0.0.1 and
    the port to 8080. Binding beyond loopback is only ever what the user typed."""
    t = text.strip()
    host, port = DEFAULT_HOST, str(DEFAULT_PORT)
    if t.startswith("["):
        end = t.find("]")
        if end < 0 or (len(t) > end + 1 and t[end + 1] != ":"):
            raise UsageError(f"{flag} {text}: expected [IPv6]:PORT, e.g. [::1]:8080")
        host, port = t[1:end], t[end + 2:] or port
    elif t.isdigit():
        port = t
    elif t.count(":") == 1:
        h, p = t.split(":")
        host, port = h or host, p or port
    elif t.count(":") > 1:  # a bare IPv6 address
        try:
            host = str(ipaddress.IPv6Address(t))
        except ValueError:
            raise UsageError(f"{flag} {text}: write an IPv6 address with a port as [ADDR]:PORT") from None
    elif t:
        host = t
    if not port.isdigit() or int(port) > 65535:
        raise UsageError(f"{flag} {text}: the port must be a number from 0 to 65535")
    if not host or any(c.isspace() or c in "/?#@" for c in host):
        raise UsageError(f"{flag} {text}: not a host name or address")
    return ServeAddress(host, int(port))


def check_exposure(addr: ServeAddress, token: Optional[str], declined: bool,
                   flag: str = "--serve") -> None:
    """Beyond loopback, a token or an explicit `--serve-token none`: UsageError otherwise."""
    if not addr.loopback and token is None and not declined:
        raise token_required(str(addr), flag)


def exposure_warning(addr: ServeAddress, port: int, token: Optional[str]) -> Optional[str]:
    """One line when other machines can see the camera without a token (the user declined it);
    `port`: the port bound (the real one for port 0)."""
    if addr.loopback or token is not None:
        return None
    where = "every network interface" if addr.all_interfaces else addr.host
    return (f"warning: the live view listens on {where} (port {port}) without a token "
            "(--serve-token none): anyone who can reach this machine sees the camera")


def announcement(live: "LiveView", addr: ServeAddress, token: Optional[str],
                 show_token: bool) -> List[str]:
    """The lines that tell the user where to look: the exposure warning, then each URL, with the
    token only when `show_token` (a terminal: never a log or a pipe, where under systemd stderr
    is the journal)."""
    lines = []
    warning = exposure_warning(addr, live.port, token)
    if warning:
        lines.append(warning)
    for n, url in enumerate(live.urls):
        line = f"live view {'also on' if n else 'on'} {url}"
        if token is not None and show_token:
            line += f"?token={token}"
        elif token is not None and n == 0:
            line += f" (with its token: open {url}?token=YOUR-TOKEN once; the page keeps it)"
        lines.append(line)
    return lines


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def open_urls(addr: ServeAddress, port: int, dual_stack: bool = True) -> List[str]:
    """The URLs to print: the address given, or for every interface the addresses other
    machines can open (the default route's first), else loopback's."""
    if not addr.all_interfaces:
        return [f"http://{_bracket(addr.host)}:{port}/"]
    versions = {4} if addr.host in ("0.0.0.0", "") else ({4, 6} if dual_stack else {6})
    found = [a.address for a in local_addresses() if a.openable and a.ip.version in versions]
    loopback = "127.0.0.1" if 4 in versions else "::1"
    return [f"http://{_bracket(h)}:{port}/" for h in (found or [loopback])]


# ---------------------------------------------------------------------------------------------
# The hand-off



class _Latest:
    """The newest processed frame, as the loop left it."""

    __slots__ = ("seq", "image", "record", "annotated", "fps", "extras", "counting")

    def __init__(self, seq: int, image: np.ndarray, record: dict, annotated: bool,
                 fps: Optional[float], extras: dict, counting: Optional[tuple]) -> None:
        self.seq, self.image, self.record = seq, image, record
        self.annotated, self.fps, self.extras, self.counting = annotated, fps, extras, counting


def bind_server(address: ServeAddress, handler: type, flag: str = "--serve") -> ThreadingHTTPServer:
    """A threading HTTP server bound to `address` (both IP families for `::`); a port in use or
    an address not on this machine is a UsageError naming `flag`. The live view's and the
    metrics server's (sinks/metrics.py)."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    dual = address.host == "::"

    class Server(ThreadingHTTPServer):
        address_family = family
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 16

        def server_bind(self) -> None:
            if dual:  # IPv4 clients too, whatever the system's default
                try:
                    self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                except (AttributeError, OSError):
                    pass
            super().server_bind()

        def handle_error(self, request, client_address) -> None:  # no tracebacks on stderr
            pass

    try:
        return Server((address.host, address.port), handler)
    except socket.gaierror as e:
        raise UsageError(f"{flag} {address}: cannot resolve {address.host!r} ({e.strerror})") from None
    except OSError as e:
        why = {98: "the port is in use (choose another, or stop the other program)",
               13: "permission denied (ports below 1024 need root; use 8080)",
               99: "this machine has no such address"}.get(e.errno, e.strerror or str(e))
        raise UsageError(f"{flag} {address}: cannot listen: {why}") from None


class LiveView:
    """The web server and its newest-frame hand-off; `on_frame` is the inference loop's side.

    `kind`: the task (tasks/), which draws the overlay and words the results.
    `info`: fixed facts for the page (source, model, task, device, device_note).
    `extra`: called per /stats request for more numbers (the MQTT counters).
    `token`: required of every request when given (live_http.py); None beyond loopback only
    after check_exposure. `metrics`: what /metrics serves (camera --metrics-port).
    """

    def __init__(self, address: ServeAddress, *, fps: float = 10.0, quality: int = 80,
                 kind: Optional[TaskKind] = None, info: Optional[dict] = None,
                 extra: Optional[Callable[[], dict]] = None, token: Optional[str] = None,
                 metrics: Optional[Callable[[], tuple]] = None) -> None:
        self.address = address
        self.metrics = metrics  # /metrics: () -> (body, content type), sinks/metrics.py
        self.guard = Guard.from_env(address.host, token)
        self.kind = kind
        self.interval = 1.0 / fps if fps > 0 else 0.0
        self.quality = int(quality)
        self.info = dict(info or {})
        self.extra = extra
        self.frames_encoded = 0
        self.snapshots = 0
        self.viewers = 0
        self.viewers_max = 0
        self.viewers_total = 0
        self.refused = 0  # streams refused beyond MAX_VIEWERS
        self._lock = threading.Lock()
        self._frame_ready = threading.Condition(self._lock)  # the encoder waits here
        self._jpeg_ready = threading.Condition(self._lock)  # viewers wait here
        self._latest: Optional[_Latest] = None
        self._by_source: Dict[str, _Latest] = {}  # several sources: each one's newest, a tile each
        self._frame_seq = 0
        self._jpeg: Optional[bytes] = None
        self._jpeg_seq = 0  # counts encodes; viewers remember the last one they sent
        self._jpeg_from = 0  # the frame seq the current JPEG shows
        self._encode_lock = threading.Lock()
        self._closed = threading.Event()
        self._done_times: deque[float] = deque(maxlen=120)
        self._alerts: deque[dict] = deque(maxlen=ALERTS)  # the latest, newest last
        self._stats_ref: Any = None  # the loop's CameraStats, updated by the loop
        self._started = time.monotonic()
        self._conns: dict[int, socket.socket] = {}
        self._handlers: set[threading.Thread] = set()
        self._server: Optional[ThreadingHTTPServer] = None
        self._threads: list[threading.Thread] = []
        self.url = ""
        self.urls: List[str] = []
        self.port = 0

    # -- life cycle -----------------------------------------------------------------------------

    def start(self) -> "LiveView":
        """Bind and serve in background threads; a port in use or an address not on this
        machine is a UsageError."""
        self._server = bind_server(self.address, make_handler(self, self.guard))
        self.port = self.guard.port = int(self._server.server_address[1])
        self.urls = open_urls(self.address, self.port)
        self.url = self.urls[0]
        self._started = time.monotonic()
        for target, name in ((self._serve, "edgeapp-http"), (self._encode_loop, "edgeapp-jpeg")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _serve(self) -> None:
        assert self._server is not None
        self._server.serve_forever(poll_interval=0.2)

    def close(self, timeout: float = 3.0) -> None:
        """Stop serving: end every stream (stalled ones too), join the threads."""
        if self._closed.is_set():
            return
        self._closed.set()
        with self._lock:
            self._frame_ready.notify_all()
            self._jpeg_ready.notify_all()
        if self._server is not None:
            self._server.shutdown()
            with self._lock:
                conns = list(self._conns.values())
            for c in conns:  # a viewer blocked in a write gets an error at once
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._server.server_close()
        end = time.monotonic() + timeout
        with self._lock:
            handlers = list(self._handlers)
        for t in self._threads + handlers:
            if t is not threading.current_thread():
                t.join(max(0.0, end - time.monotonic()))

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __enter__(self) -> "LiveView":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the inference loop's side ----------------------------------------------------------------

    def on_frame(self, image: np.ndarray, record: dict, *, annotated: bool = False,
                 fps: Optional[float] = None, stats: Optional[StreamStats] = None,
                 extras: Optional[dict] = None, counting: Optional[tuple] = None) -> None:
        """Keep the newest frame (a reference: the loop is done with it) and return at once."""
        now = time.monotonic()
        with self._lock:
            self._frame_seq += 1
            self._latest = _Latest(self._frame_seq, image, record, annotated, fps, extras or {}, counting)
            if record.get("source") is not None:
                self._by_source[record["source"]] = self._latest
            self._done_times.append(now)
            if stats is not None:
                self._stats_ref = stats
            if self.viewers:
                self._frame_ready.notify()

    # -- encoding ---------------------------------------------------------------------------------

    def _encode_loop(self) -> None:
        last = float("-inf")
        while True:
            with self._lock:
                while not self._closed.is_set() and not (self.viewers and self._frame_seq > self._jpeg_from):
                    self._frame_ready.wait(1.0)
            if self._closed.is_set():
                return
            wait = last + self.interval - time.monotonic()
            if wait > 0 and self._closed.wait(wait):
                return
            last = time.monotonic()
            self._encode_newest()

    def _encode_newest(self) -> Optional[bytes]:
        """The JPEG of the newest frame (encoded now unless it already is)."""
        with self._encode_lock:
            with self._lock:
                latest = self._latest
                if latest is None:
                    return None
                if latest.seq == self._jpeg_from and self._jpeg is not None:
                    return self._jpeg
                tiles = list(self._by_source.values()) if len(self._by_source) > 1 else [latest]
            from edgeapp.hw.capture import cv2_module

            cv2 = cv2_module()
            for tile in tiles:
                self._annotate(tile)
            image = latest.image if len(tiles) == 1 else mosaic([t.image for t in tiles])
            ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, self.quality])
            if not ok:
                return None
            jpeg = buf.tobytes()
            with self._lock:
                self._jpeg, self._jpeg_from = jpeg, latest.seq
                self._jpeg_seq += 1
                self.frames_encoded += 1
                self._jpeg_ready.notify_all()
            return jpeg

    def _annotate(self, latest: _Latest) -> None:
        """The overlay, drawn here (off the inference loop) and only once."""
        if not latest.annotated:
            rec = latest.record
            annotate_frame(self.kind, latest.image, Result(rec, latest.extras, latest.counting),
                           rec.get("latency_ms"), latest.fps,
                           str(rec.get("device", self.info.get("device", ""))))
            latest.annotated = True

    def wait_jpeg(self, after: int, timeout: float) -> tuple[Optional[bytes], int]:
        """The newest JPEG once it is newer than encode number `after`; (None, after) on
        timeout or close."""
        end = time.monotonic() + timeout
        with self._lock:
            while self._jpeg_seq <= after and not self._closed.is_set():
                left = end - time.monotonic()
                if left <= 0:
                    return None, after
                self._jpeg_ready.wait(left)
            if self._closed.is_set():
                return None, after
            return self._jpeg, self._jpeg_seq

    def snapshot(self) -> Optional[bytes]:
        self.snapshots += 1
        return self._encode_newest()

    def track(self, handler: BaseHTTPRequestHandler, conn: socket.socket) -> None:
        """A connection opened (so `close` can end it even in a blocked write)."""
        with self._lock:
            self._conns[id(handler)] = conn
            self._handlers.add(threading.current_thread())

    def untrack(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self._conns.pop(id(handler), None)
            self._handlers.discard(threading.current_thread())

    def add_viewer(self) -> bool:
        with self._lock:
            if self.viewers >= MAX_VIEWERS:
                self.refused += 1
                return False
            self.viewers += 1
            self.viewers_total += 1
            self.viewers_max = max(self.viewers_max, self.viewers)
            self._frame_ready.notify()
            return True

    def remove_viewer(self) -> None:
        with self._lock:
            self.viewers -= 1

    # -- numbers ----------------------------------------------------------------------------------

    def fps(self) -> float:
        """Processed frames per second over the frames of the last 3 seconds before the newest
        (at least the newest two: a loop slower than one frame in 3 s still has a rate)."""
        with self._lock:
            times = list(self._done_times)
        if len(times) < 2:
            return 0.0
        recent = [t for t in times if t >= times[-1] - 3.0]
        if len(recent) < 2:
            recent = times[-2:]
        if recent[-1] <= recent[0]:
            return 0.0
        return (len(recent) - 1) / (recent[-1] - recent[0])

    def stats(self) -> LiveStats:
        """What /stats serves and the page shows."""
        with self._lock:
            latest, stats, viewers = self._latest, self._stats_ref, self.viewers
        out: LiveStats = {"running": not self._closed.is_set() and not (stats is not None and stats.stop),
                     **self.info, "fps": round(self.fps(), 2),
                     "uptime_s": round(time.monotonic() - self._started, 1), "viewers": viewers,
                     "frames_encoded": self.frames_encoded}
        with self._lock:
            several = {name: t.record for name, t in self._by_source.items()} if len(self._by_source) > 1 else {}
        if several:  # each source's newest frame index (the tiles)
            out["sources"] = {name: rec.get("frame") for name, rec in several.items()}
        if stats is not None:
            out.update({"source": stats.source, "frames_captured": stats.captured,
                        "frames_processed": stats.processed, "frames_dropped": stats.dropped,
                        "inference_ms": p50_p99(stats.inference_ms[-STATS_WINDOW:]),
                        "frame_ms": p50_p99(stats.frame_ms[-STATS_WINDOW:]),
                        "stop": stats.stop or None})
        if latest is not None:
            rec = latest.record
            out["frame"] = rec.get("frame")
            out["latency_ms"] = rec.get("latency_ms")
            if self.kind is not None:  # the task's own field, and its results as lines of text
                out[self.kind.field] = rec.get(self.kind.field)
                out["results"] = [self.kind.item_text(it) for it in self.kind.items(rec)]
                out["results_title"] = self.kind.field
        if self.extra is not None:
            out.update(self.extra())
        with self._lock:
            if self._alerts:
                out["alerts"] = list(self._alerts)
        return out

    def on_events(self, events: list, counts: dict) -> None:
        """camera --alert: the latest alerts, for /stats."""
        alerts = [e for e in events if e.get("event") == "alert"]
        if alerts:
            with self._lock:
                self._alerts.extend(alerts)

    def summary(self) -> LiveSummary:
        return {"url": self.url, "viewers_max": self.viewers_max, "viewers_total": self.viewers_total,
                "frames_encoded": self.frames_encoded, "snapshots": self.snapshots,
                "refused": self.refused}
