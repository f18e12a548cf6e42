"""A client of the camera's live view: GET with its token, /stats, and waiting for a condition."""

from __future__ import annotations

import http.client
import json
import secrets
import time
from urllib.parse import urlsplit

TOKEN = secrets.token_urlsafe(16)


BEARER = {"Authorization": f"Bearer {TOKEN}"}


def get(base: str, path: str, headers: dict | None = None, timeout: float = 10.0) -> tuple[int, dict, bytes]:
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def stats(base: str) -> dict:
    status, headers, body = get(base, "/stats", BEARER)
    assert status == 200 and headers["content-type"] == "application/json"
    return json.loads(body)


def wait_for(pred, timeout: float = 30.0, what: str = "condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
