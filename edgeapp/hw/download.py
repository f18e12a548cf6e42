"""Downloading one file over HTTP(S) (or file://) into `X.part`, resuming after a cut.

A cut or stalled connection is resumed with an HTTP Range request (restarted when the server
ignores ranges), a few times per file; what arrived is fsynced, so the caller can verify it and
rename it. urllib honours the usual proxy variables (http_proxy, https_proxy, no_proxy). What
to download, and whether the bytes are right, is the caller's (flows/models.py,
hw/compiler_install.py).
"""

from __future__ import annotations

import errno
import http.client
import os
import socket
import time
from pathlib import Path
from typing import Mapping, Optional, Tuple
from urllib.parse import urlsplit

from edgeapp.core.units import format_bytes
from edgeapp.errors import DownloadError, UsageError

URL_ENV = "EDGEAPP_MODELS_URL"  # a URL template with {path}: a mirror, or file:// an offline copy
ATTEMPTS = 3  # per file and command: a cut or stalled connection is resumed this often
RETRY_HTTP = (429, 500, 502, 503, 504)
CHUNK = 64 * 1024
TIMEOUT_ENV = "EDGEAPP_MODELS_TIMEOUT"  # seconds without a byte before a connection counts as dead
DEFAULT_TIMEOUT_S = 30.0


class Reporter:
    """What a pull tells its user; the CLI draws progress bars, the default says nothing."""

    def note(self, message: str) -> None:
        """One line worth telling (pulling, retrying, re-downloading a damaged file)."""

    def start(self, name: str, total: Optional[int], done: int) -> None:
        """A download of `name` begins (or resumes at `done` bytes)."""

    def advance(self, nbytes: int) -> None:
        pass

    def finish(self) -> None:
        pass



def download(url: str, part: Path, name: str, size: Optional[int], rep: Reporter,
             timeout: float, mirror: Tuple[str, str] = (URL_ENV, "docs/models.md")) -> None:
    """Fetch `url` into `part`, resuming what is there; returns when the server has sent all.
    `size`: the published size when known (more is refused, as much is done); `name` for messages;
    `mirror`: the caller's mirror variable and the page saying how to use it, for network errors."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener()  # ProxyHandler: the usual proxy variables
    for attempt in range(1, ATTEMPTS + 1):
        have = part.stat().st_size if part.is_file() else 0
        if size is not None and have > size:
            have = 0  # not a prefix of the published file: start again
        if size is not None and have == size:
            return  # an earlier run got every byte; verification decides
        headers = {"User-Agent": "edgeapp"}
        if have:
            headers["Range"] = f"bytes={have}-"
        try:
            resp = opener.open(urllib.request.Request(url, headers=headers), timeout=timeout)
        except urllib.error.HTTPError as e:
            e.close()
            if e.code == 416 and have:
                return  # nothing after our bytes: we hold the server's whole file
            if e.code in RETRY_HTTP and attempt < ATTEMPTS:
                rep.note(f"HTTP {e.code} from {host_of(url)}: trying again ({attempt + 1}/{ATTEMPTS})")
                time.sleep(0.25 * attempt)
                continue
            raise DownloadError(f"HTTP {e.code} {e.reason} for {url}") from None
        except (OSError, http.client.HTTPException) as e:  # URLError is an OSError
            reason = getattr(e, "reason", e)
            if _transient(reason) and attempt < ATTEMPTS:
                rep.note(f"{_network_reason(url, reason, timeout)}: trying again "
                         f"({attempt + 1}/{ATTEMPTS})")
                continue
            raise DownloadError(_network_message(url, reason, timeout, mirror)) from None
        with resp:
            status = resp.getcode()  # None for file:// URLs
            append = bool(have) and status == 206 and \
                _range_start(resp.headers.get("Content-Range")) == have
            start = have if append else 0
            length = _int(resp.headers.get("Content-Length"))
            total = start + length if length is not None else size
            limit = None if size is None else size - start
            rep.start(name, total, start)
            try:
                complete, got = _copy(resp, part, append, length, limit, rep)
            finally:
                rep.finish()
        if complete:
            return
        now = start + got
        if attempt < ATTEMPTS:
            rep.note(f"connection to {host_of(url)} cut after {format_bytes(now)} of "
                     f"{format_bytes(total)}: resuming ({attempt + 1}/{ATTEMPTS})")
            continue
        raise DownloadError(f"the download of {name} from {host_of(url)} was cut {ATTEMPTS} times "
                            f"(last at {format_bytes(now)} of {format_bytes(total)}); run the "
                            "command again to resume")


def _copy(resp, part: Path, append: bool, length: Optional[int], limit: Optional[int],
          rep: Reporter) -> tuple[bool, int]:
    """Write the response body to `part`: (whether it all arrived, bytes written)."""
    got = 0
    cut = False
    try:
        with open(part, "ab" if append else "wb") as f:
            while True:
                try:
                    chunk = resp.read(CHUNK)
                except (OSError, http.client.HTTPException):  # reset, timeout, incomplete chunk
                    cut = True
                    break
                if not chunk:
                    break
                f.write(chunk)
                got += len(chunk)
                rep.advance(len(chunk))
                if limit is not None and got > limit:
                    break  # more than the published file: verification will refuse it
            f.flush()
            os.fsync(f.fileno())  # what we rename after verifying must be on the disk
    except OSError as e:
        raise write_error(part, e) from None
    if cut or (length is not None and got < length):  # http.client reads a closed socket as EOF
        return False, got
    return True, got


def _transient(reason) -> bool:
    """Worth another attempt: a timeout or a connection dropped mid-way (not refused, not DNS)."""
    if isinstance(reason, (socket.timeout, TimeoutError, http.client.IncompleteRead,
                           http.client.RemoteDisconnected, ConnectionResetError, ConnectionAbortedError,
                           BrokenPipeError)):
        return True
    return isinstance(reason, str) and "timed out" in reason


def _network_reason(url: str, reason, timeout: float) -> str:
    host = host_of(url)
    if isinstance(reason, socket.gaierror):
        return f"cannot resolve {host}"
    if isinstance(reason, ConnectionRefusedError):
        return f"cannot connect to {host} (connection refused)"
    if isinstance(reason, (socket.timeout, TimeoutError)) or "timed out" in str(reason):
        return f"{host} sent nothing for {timeout:g} s"
    if isinstance(reason, FileNotFoundError):
        return f"{urlsplit(url).path} not found"
    text = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
    return f"cannot download from {host}: {text}"


def _network_message(url: str, reason, timeout: float, mirror: Tuple[str, str]) -> str:
    proxy = _proxy_for(url)
    via = f" through the proxy {proxy}" if proxy else ""
    hint = "" if url.startswith("file:") else \
        f"; check the network, or set {mirror[0]} to a mirror or a file:// copy ({mirror[1]})"
    return f"{_network_reason(url, reason, timeout)}{via} ({url}){hint}"


def _proxy_for(url: str) -> Optional[str]:
    import urllib.request

    parts = urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def host_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc or f"{parts.scheme}:"


def _range_start(content_range: Optional[str]) -> Optional[int]:
    """The first byte of `bytes A-B/N`."""
    try:
        unit, _, spec = (content_range or "").partition(" ")
        return int(spec.split("-", 1)[0]) if unit.strip() == "bytes" else None
    except ValueError:
        return None


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def timeout_from_env(env: Mapping[str, str]) -> float:
    text = env.get(TIMEOUT_ENV) or ""
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise UsageError(f"{TIMEOUT_ENV} must be a number of seconds > 0, not {text!r}")
    return value


def write_error(path: Path, e: OSError) -> UsageError:
    if e.errno == errno.ENOSPC:
        return UsageError(f"disk full: cannot write {path}; free some space (or set "
                          "EDGEAPP_CACHE_DIR to another disk) and run again (downloads resume)")
    return UsageError(f"cannot write {path}: {e.strerror or e} (set EDGEAPP_CACHE_DIR to a "
                      "writable folder)")
