"""A real Mosquitto broker on 127.0.0.1 (Debian's `mosquitto` package) and a real paho-mqtt
subscriber, for the tests of `camera --mqtt`. Importing this module skips the test (or the
module) when paho-mqtt is missing; starting a broker skips it without Mosquitto."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Optional

import pytest

mqtt = pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[dev]' (paho-mqtt)")


def _mosquitto() -> str:
    exe = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None)
    if exe is None:
        pytest.skip("no MQTT broker: sudo apt-get install -y mosquitto")
    return exe


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Broker:
    """A Mosquitto on 127.0.0.1 (a plain listener, and a TLS one when given certificates)."""

    def __init__(self, workdir: Path, tls: Optional[dict] = None) -> None:
        self.exe, self.dir, self.tls = _mosquitto(), workdir, tls
        self.port = free_port()
        self.tls_port = free_port() if tls else None
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "Broker":
        conf = [f"listener {self.port} 127.0.0.1", "allow_anonymous true", "user root"]
        if self.tls:
            conf += [f"listener {self.tls_port} 127.0.0.1", f"cafile {self.tls['ca']}",
                     f"certfile {self.tls['cert']}", f"keyfile {self.tls['key']}"]
        path = self.dir / "mosquitto.conf"
        path.write_text("\n".join(conf) + "\n")
        log = open(self.dir / "mosquitto.log", "ab")
        self.proc = subprocess.Popen([self.exe, "-c", str(path)], stdout=log, stderr=log)
        end = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return self
            except OSError:
                assert self.proc.poll() is None, (self.dir / "mosquitto.log").read_text()
                assert time.monotonic() < end, "mosquitto did not start listening"
                time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def url(self, prefix: str) -> str:
        return f"mqtt://127.0.0.1:{self.port}/{prefix}"


class Subscriber:
    """A paho client on the broker's plain port recording every message under `topic`; it
    resubscribes when it reconnects (a restarted broker has forgotten it)."""

    def __init__(self, port: int, topic: str) -> None:
        self.messages: list[tuple[str, bytes, bool]] = []
        self.cond = threading.Condition()
        self.subscribed = threading.Event()
        kwargs = {"callback_api_version": mqtt.CallbackAPIVersion.VERSION2} \
            if hasattr(mqtt, "CallbackAPIVersion") else {}
        self.client = mqtt.Client(**kwargs)
        self.client.reconnect_delay_set(1, 2)
        self.client.on_connect = lambda c, *a: c.subscribe(topic, qos=1)
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.subscribed.wait(10), "subscriber could not subscribe"

    def _on_message(self, client, userdata, msg) -> None:
        with self.cond:
            self.messages.append((msg.topic, msg.payload, bool(msg.retain)))
            self.cond.notify_all()

    def on(self, topic: str) -> list[bytes]:
        with self.cond:
            return [p for t, p, _ in self.messages if t == topic]

    def json_on(self, topic: str) -> list[dict]:
        return [json.loads(p) for p in self.on(topic)]

    def wait(self, pred, timeout: float = 30.0, what: str = "messages"):
        end = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = end - time.monotonic()
                assert left > 0, f"timed out waiting for {what}: {self.messages[-5:]}"
                self.cond.wait(min(left, 0.2))

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def retained(port: int, topic: str) -> tuple[bytes, bool]:
    """What a new subscriber gets first on `topic`: (payload, retain flag)."""
    sub = Subscriber(port, topic)
    try:
        sub.wait(lambda: sub.messages, 10, f"a retained message on {topic}")
        _, payload, flag = sub.messages[0]
        return payload, flag
    finally:
        sub.close()
