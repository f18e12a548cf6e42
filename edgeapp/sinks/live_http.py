"""The live view's HTTP side: routes, MJPEG streaming, and who may read them.

Access (see docs/camera.md, "Who can see the camera"):
- Host: a request must name this machine: the address it listens on, `localhost`, the host
  name, `HOSTNAME.local`, an address of this machine, or a name in $EDGEAPP_SERVE_HOSTS. Any
  other Host gets 421 Misdirected Request: a web page the user visits cannot reach the camera
  by pointing its own domain at 127.0.0.1 or the LAN address (DNS rebinding).
- Token: when there is one (required beyond loopback, see `resolve_token`), every request must
  carry it: `?token=...`, `Authorization: Bearer ...`, or the cookie set by the first request
  that had it in its query (so the page's own /stats and /stream.mjpg requests carry it; the
  page also passes its query's token on). Otherwise 401. Compared in constant time, never
  logged (the server logs nothing) and never echoed.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Tuple
from urllib.parse import parse_qs

from typing_extensions import TypedDict

from edgeapp.errors import UsageError
from edgeapp.hw.netif import is_local_ip, local_addresses
from edgeapp.tasks import TaskFields

if TYPE_CHECKING:
    from email.message import Message

    from edgeapp.core.stats import P50P99


class LiveSummary(TypedDict):
    """The live view of a camera run: its address, viewers, frames encoded, snapshots, refusals."""
    url: str
    viewers_max: int
    viewers_total: int
    frames_encoded: int
    snapshots: int
    refused: int


class LiveStats(TaskFields, total=False):
    """What /stats serves and the page shows: the run (the camera's `info`: model, task, device,
    source), its rates and latencies, the last frame's results (the task's own field, and as
    lines of text), the alerts; the camera adds its own figures (`extra`: MQTT, tracking, the
    Edge TPU's health)."""
    running: bool
    model: str
    task: str
    device: str
    device_note: str
    source: str
    fps: float
    uptime_s: float
    viewers: int
    frames_encoded: int
    frames_captured: int
    frames_processed: int
    frames_dropped: int
    inference_ms: P50P99
    frame_ms: P50P99
    stop: Optional[str]
    frame: Optional[int]
    latency_ms: Optional[float]
    results: List[str]
    results_title: str
    alerts: List[dict]
    mqtt: dict  # sinks/mqtt.MqttOut.summary()
    tracking: dict


BOUNDARY = "edgeapp-frame"
MAX_VIEWERS = 8  # streams at once: each is a thread and a socket; more get 503
SEND_TIMEOUT = 10.0  # seconds a viewer may leave a write blocked before it is dropped
PAGE = Path(__file__).with_name("live_view.html")
TOKEN_ENV = "EDGEAPP_SERVE_TOKEN"
HOSTS_ENV = "EDGEAPP_SERVE_HOSTS"  # more names the live view answers to (a DNS name, a proxy's)
DECLINE = "none"  # --serve-token none: no token, on purpose
MIN_TOKEN = 8
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~-]+")  # safe unescaped in a URL and in a cookie
COOKIE_AGE = 30 * 24 * 3600  # seconds: a phone keeps access for a month, then needs ?token= again
_READDRESS = 5.0  # seconds between re-reading this machine's addresses (DHCP may change them)
GENERATE = "python3 -c 'import secrets; print(secrets.token_urlsafe(16))'"


# ---------------------------------------------------------------------------------------------
# The token


def resolve_token(option: Optional[str], file: Optional[Path],
                  environ: Optional[dict] = None) -> Tuple[Optional[str], bool]:
    """(token or None, declined): from --serve-token, else --serve-token-file, else
    $EDGEAPP_SERVE_TOKEN. `--serve-token none` declines (declined=True)."""
    env = os.environ if environ is None else environ
    if option is not None and file is not None:
        raise UsageError("--serve-token and --serve-token-file: give one of them")
    if option is not None and option.strip().lower() == DECLINE:
        return None, True
    where, token = "--serve-token", option
    if file is not None:
        where = f"--serve-token-file {file}"
        try:
            lines = Path(file).read_text().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"{where}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
        token = lines[0].strip() if lines else ""
    elif token is None and env.get(TOKEN_ENV):
        where, token = f"${TOKEN_ENV}", env[TOKEN_ENV].strip()
    if token is None:
        return None, False
    if len(token) < MIN_TOKEN or not _TOKEN_CHARS.fullmatch(token):
        raise UsageError(f"{where}: a token needs at least {MIN_TOKEN} characters among letters, "
                         f"digits and - . _ ~ (make one: {GENERATE})")
    return token, False


def token_required(where: str, flag: str = "--serve") -> UsageError:
    """The refusal to serve beyond loopback without a token or an explicit `none`."""
    return UsageError(f"{flag} {where} lets other machines see the camera: give --serve-token "
                      f"TOKEN (or --serve-token-file FILE, or ${TOKEN_ENV}), or --serve-token none "
                      "to serve it without one")


# ---------------------------------------------------------------------------------------------
# Who may ask


def host_name(header: str) -> str:
    """The name or address in a Host header, lowercase, without port, brackets or final dot."""
    h = header.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        return h[1:end] if end > 0 else ""
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str
    text: str
    headers: Tuple[Tuple[str, str], ...] = ()


class Guard:
    """Decides whether a request may be answered (its Host, its token)."""

    def __init__(self, bound_host: str, token: Optional[str] = None,
                 extra_names: Iterable[str] = ()) -> None:
        self.token = token
        hostname = socket.gethostname().lower()
        names = {"localhost", "localhost.localdomain", hostname, f"{hostname}.local",
                 *(n.strip().lower().rstrip(".") for n in extra_names if n.strip())}
        if bound_host not in ("", "0.0.0.0", "::"):
            names.add(host_name(f"[{bound_host}]" if ":" in bound_host else bound_host))
        self.names = frozenset(n for n in names if n)
        self.port = 0  # set once bound: the cookie is per port (cookies ignore ports)
        self._addresses: Any = None
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, bound_host: str, token: Optional[str]) -> "Guard":
        return cls(bound_host, token, os.environ.get(HOSTS_ENV, "").split(","))

    @property
    def cookie(self) -> str:
        return f"edgeapp_token_{self.port}"

    def host_ok(self, header: Optional[str]) -> bool:
        name = host_name(header or "")
        if not name:
            return False
        if name in self.names:
            return True
        with self._lock:
            stale = time.monotonic() - self._read_at > _READDRESS
            if self._addresses is None or (stale and not is_local_ip(name, self._addresses)):
                self._addresses, self._read_at = local_addresses(), time.monotonic()
            addresses = self._addresses
        return is_local_ip(name, addresses)

    def _offered(self, query: str, headers: Message) -> Tuple[list, list]:
        """(tokens in the query, tokens in the headers and cookie)."""
        in_query = parse_qs(query).get("token", [])
        others = []
        auth = headers.get("Authorization") or ""
        if auth[:7].lower() == "bearer ":
            others.append(auth[7:].strip())
        try:
            jar = SimpleCookie(headers.get("Cookie") or "")
        except CookieError:
            jar = SimpleCookie()
        if self.cookie in jar:
            others.append(jar[self.cookie].value)
        return in_query, others

    def check(self, path: str, headers: Message) -> Tuple[Optional[Refusal], Optional[str]]:
        """(why the request is refused or None, a Set-Cookie value to send or None)."""
        if not self.host_ok(headers.get("Host")):
            return Refusal(421, "Misdirected Request", "this server answers only to this machine's "
                           f"addresses and names (see ${HOSTS_ENV})\n"), None
        if self.token is None:
            return None, None
        in_query, others = self._offered(path.partition("?")[2], headers)
        want = self.token.encode()
        if any(hmac.compare_digest(t.encode(), want) for t in in_query):
            return None, (f"{self.cookie}={self.token}; Path=/; Max-Age={COOKIE_AGE}; HttpOnly; "
                          "SameSite=Strict")
        if any(hmac.compare_digest(t.encode(), want) for t in others):
            return None, None
        return Refusal(401, "Unauthorized", "this live view needs its token: open it as "
                       "/?token=YOUR-TOKEN (the one given to --serve-token)\n",
                       (("WWW-Authenticate", 'Bearer realm="edgeapp"'),)), None


# ---------------------------------------------------------------------------------------------
# The handler


class GuardedHandler(BaseHTTPRequestHandler):
    """A request behind a `Guard` (Host check, token): the live view's and the metrics
    server's (sinks/metrics.py). Subclasses set `guard` and answer in `_route`."""

    server_version = "edgeapp"
    protocol_version = "HTTP/1.0"  # one response per connection; streams end by closing
    timeout = SEND_TIMEOUT
    cookie: Optional[str] = None
    guard: Any = None  # the Guard

    def log_message(self, format: str, *args) -> None:  # nothing logged (tokens in URLs)
        pass

    def do_GET(self) -> None:
        try:
            refusal, self.cookie = self.guard.check(self.path, self.headers)
            if refusal is not None:
                body = refusal.text.encode()
                self._send(refusal.status, "text/plain; charset=utf-8", body,
                           reason=refusal.reason, headers=refusal.headers)
            else:
                self._route(self.path.split("?", 1)[0])
        except (OSError, ValueError):  # the viewer went away (or timed out): costs nothing
            self.close_connection = True

    def _route(self, path: str) -> None:
        self._send(HTTPStatus.NOT_FOUND, "text/plain", b"not found\n")

    def _head(self, status: int, ctype: str, reason: Optional[str] = None,
              headers: Iterable[Tuple[str, str]] = ()) -> None:
        self.send_response(status, reason)
        self.send_header("Content-Type", ctype)
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        if self.cookie:
            self.send_header("Set-Cookie", self.cookie)
        for k, v in headers:
            self.send_header(k, v)

    def _send(self, status: int, ctype: str, body: bytes, reason: Optional[str] = None,
              headers: Iterable[Tuple[str, str]] = ()) -> None:
        self._head(status, ctype, reason, (("Content-Length", str(len(body))), *headers))
        self.end_headers()
        self.wfile.write(body)


class LiveHandler(GuardedHandler):
    """One request to the live view; `make_handler` gives it its view and guard."""

    server_version = "edgeapp-live"
    view: Any = None  # the LiveView

    def setup(self) -> None:
        super().setup()
        self.view.track(self, self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        self.view.untrack(self)

    def _route(self, path: str) -> None:
        if path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, "text/html; charset=utf-8", PAGE.read_bytes())
        elif path == "/stats":
            self._send(HTTPStatus.OK, "application/json", json.dumps(self.view.stats()).encode())
        elif path == "/snapshot.jpg":
            jpeg = self.view.snapshot()
            if jpeg is None:
                self._send(HTTPStatus.SERVICE_UNAVAILABLE, "text/plain", b"no frame yet\n",
                           headers=(("Retry-After", "1"),))
            else:
                self._send(HTTPStatus.OK, "image/jpeg", jpeg)
        elif path == "/stream.mjpg":
            self._stream()
        elif path == "/metrics" and self.view.metrics is not None:  # camera --metrics-port
            body, ctype = self.view.metrics()
            self._send(HTTPStatus.OK, ctype, body)
        else:
            self._send(HTTPStatus.NOT_FOUND, "text/plain", b"not found\n")

    def _stream(self) -> None:
        if not self.view.add_viewer():
            self._send(HTTPStatus.SERVICE_UNAVAILABLE, "text/plain",
                       f"too many viewers (at most {MAX_VIEWERS})\n".encode(),
                       headers=(("Retry-After", "1"),))
            return
        try:
            self._head(HTTPStatus.OK, f"multipart/x-mixed-replace; boundary={BOUNDARY}")
            self.end_headers()
            seq = 0
            while not self.view.closed:
                jpeg, seq = self.view.wait_jpeg(seq, timeout=1.0)
                if jpeg is None:
                    continue
                head = (f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\n"
                        f"Content-Length: {len(jpeg)}\r\n\r\n").encode()
                self.wfile.write(head + jpeg + b"\r\n")
            self.wfile.write(f"--{BOUNDARY}--\r\n".encode())
        finally:
            self.view.remove_viewer()


def make_handler(view: Any, guard: Guard) -> type:
    """A request handler class for `view` (a LiveView), behind `guard`."""
    return type("Handler", (LiveHandler,), {"view": view, "guard": guard})
