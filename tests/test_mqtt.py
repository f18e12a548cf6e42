"""`edgeapp camera --mqtt`: against a real Mosquitto broker on 127.0.0.1 started by the tests
(Debian's `mosquitto` package), with a real paho-mqtt subscriber, the tiny colour classifier
and real OpenCV videos. The broker is killed and restarted mid-run; TLS uses a CA and a server
certificate made here with openssl.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from camera_proc import CameraProc, color_frame, write_video
from conftest import CLASSES, ROOT

from edgeapp.errors import ExitCode, UsageError
from edgeapp.sinks.mqtt import ChangeDetector, MqttTarget, parse_mqtt_url
from edgeapp.tasks import kind

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


@pytest.fixture()
def broker(tmp_path):
    b = Broker(tmp_path).start()
    yield b
    b.kill()


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


@pytest.fixture(scope="module")
def short_video(tmp_path_factory) -> tuple[Path, list[str]]:
    rng = np.random.default_rng(7)
    expected = [CLASSES[(i // 4) % 3] for i in range(24)]
    path = tmp_path_factory.mktemp("mqtt") / "short.avi"
    return write_video(path, [color_frame(c, i, rng) for i, c in enumerate(expected)], 30), expected


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# Payloads


def test_frames_mode_publishes_every_record_and_status(cli, tiny_model, short_video, broker, tmp_path):
    video, expected = short_video
    sub = Subscriber(broker.port, "cam1/#")
    try:
        out = tmp_path / "records.jsonl"
        r = cli("camera", tiny_model, "--source", video, "--mqtt", broker.url("cam1"),
                "--output", out, "--summary", "json")
        assert r.exit_code == 0, r.stderr
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert [rec["classes"][0]["label"] for rec in records] == expected
        sub.wait(lambda: len(sub.on("cam1/frames")) >= len(records) and
                 sub.on("cam1/status")[-1:] == [b"offline"], what="every frame, then offline")
        assert sub.json_on("cam1/frames") == records  # the JSONL records, field for field, in order
        assert sub.on("cam1/status") == [b"online", b"offline"]
        m = last_json(r.stderr)["mqtt"]
        assert (m["published"], m["dropped"], m["reconnects"]) == (len(records), 0, 0)
        assert m["mode"] == "frames" and m["url"] == f"mqtt://127.0.0.1:{broker.port}/cam1"
    finally:
        sub.close()
    assert retained(broker.port, "cam1/status") == (b"offline", True)


def test_events_mode_sends_debounced_changes_and_retained_state(cli, tiny_model, broker, tmp_path):
    # 10 FPS: blue 0-5, green 6-17 with one red frame at 7 (a flicker), red 18-23, blue 24-25
    labels = ["blue"] * 6 + ["green", "red"] + ["green"] * 10 + ["red"] * 6 + ["blue"] * 2
    rng = np.random.default_rng(8)
    video = write_video(tmp_path / "events.avi", [color_frame(c, i, rng) for i, c in enumerate(labels)], 10)
    sub = Subscriber(broker.port, "cam2/#")
    try:
        out = tmp_path / "records.jsonl"
        r = cli("camera", tiny_model, "--source", video, "--mqtt", broker.url("cam2"),
                "--mqtt-mode", "events", "--mqtt-debounce", "0.35", "--output", out,
                "--summary", "json")
        assert r.exit_code == 0, r.stderr
        records = {rec["frame"]: rec for rec in map(json.loads, out.read_text().splitlines())}
        assert [records[i]["classes"][0]["label"] for i in range(len(labels))] == labels
        sub.wait(lambda: sub.on("cam2/status")[-1:] == [b"offline"], what="offline")
        events = sub.json_on("cam2/events")
        # a change holds 0.35 s of video time: confirmed on its 5th frame; the flicker resets
        # green's clock (green since frame 8 -> 12); the 2 blue frames at the end are too short
        assert [(e["event"], e["label"], e["previous"], e["frame"]) for e in events] == [
            ("change", "blue", None, 4), ("change", "green", "blue", 12), ("change", "red", "green", 22)]
        for e in events:
            assert {k: e[k] for k in records[e["frame"]]} == records[e["frame"]]  # + the record
        assert sub.json_on("cam2/state") == [{"label": "blue"}, {"label": "green"}, {"label": "red"}]
        assert sub.on("cam2/frames") == []
        assert last_json(r.stderr)["mqtt"]["events"] == 3
    finally:
        sub.close()
    assert retained(broker.port, "cam2/state") == (b'{"label": "red"}', True)


def test_change_detector_on_detections():
    det = ChangeDetector(kind("detect"), debounce=0.5)

    def frame(t: float, *labels: str) -> list[dict]:
        objs = [{"id": i, "label": lb, "score": 0.9, "bbox": [0, 0, 1, 1]} for i, lb in enumerate(labels)]
        return det.update({"frame": int(t * 10), "timestamp": 1000.0 + t, "source_ms": None,
                           "objects": objs})

    assert frame(0.0, "cat") == [] and frame(0.3, "cat") == []
    assert frame(0.5, "cat", "cat") == [{"event": "appear", "label": "cat", "count": 2, "score": 0.9}]
    assert frame(0.6, "cat", "dog") == []  # dog not yet
    assert frame(0.7, "cat") == []  # dog flickered: forgotten
    assert frame(1.0, "cat") == [] and det.state() == {"labels": ["cat"]}
    assert frame(1.1) == [] and frame(1.3, "cat") == []  # cat missing for 0.2 s only
    assert frame(1.4) == [] and frame(1.8) == []
    assert frame(1.9) == [{"event": "leave", "label": "cat", "count": 0}]
    assert det.state() == {"labels": []}


# ---------------------------------------------------------------------------------------------
# Availability: retained status and last will


def test_status_is_retained_and_last_will_says_offline(tiny_model, broker, tmp_path):
    rng = np.random.default_rng(9)
    video = write_video(tmp_path / "long.avi", [color_frame("red", i, rng) for i in range(300)], 15)
    sub = Subscriber(broker.port, "cam3/status")
    with CameraProc(tiny_model, "--source", video, "--drop-frames", "--mqtt", broker.url("cam3"),
                    "--serve", "127.0.0.1:0", "--duration", "60") as cam:
        sub.wait(lambda: sub.on("cam3/status") == [b"online"], what="online")
        assert retained(broker.port, "cam3/status") == (b"online", True)
        with urllib.request.urlopen(cam.url() + "stats", timeout=10) as r:  # the page's numbers
            m = json.loads(r.read())["mqtt"]
        assert m["connected"] is True and m["mode"] == "frames" and m["dropped"] == 0
        cam.proc.kill()  # no clean disconnect: the broker publishes the will
        cam.wait()
        sub.wait(lambda: sub.on("cam3/status") == [b"online", b"offline"], what="the last will")
    sub.close()
    assert retained(broker.port, "cam3/status") == (b"offline", True)


# ---------------------------------------------------------------------------------------------
# The broker goes away and comes back


def test_broker_killed_and_restarted_mid_run(tiny_model, broker, tmp_path):
    rng = np.random.default_rng(10)
    video = write_video(tmp_path / "long.avi",
                        [color_frame(CLASSES[(i // 15) % 3], i, rng) for i in range(165)], 15)
    out = tmp_path / "records.jsonl"
    sub = Subscriber(broker.port, "cam4/#")
    with CameraProc(tiny_model, "--source", video, "--drop-frames", "--mqtt", broker.url("cam4"),
                    "--mqtt-queue", "5", "--output", out, "--summary", "json",
                    "--duration", "60") as cam:
        sub.wait(lambda: len(sub.on("cam4/frames")) >= 10, what="10 frames")
        t_kill = time.time()
        broker.kill()
        cam.wait_line(lambda ln: "lost the connection" in ln, 20)
        time.sleep(1.5)  # the camera runs on without the broker
        broker.start()
        t_back = time.time()
        n_before = len(sub.on("cam4/frames"))
        sub.wait(lambda: len(sub.on("cam4/frames")) >= n_before + 10, what="frames after the restart")
        cam.wait_line(lambda ln: "reconnected" in ln, 20)
        assert cam.wait(60) == 0, cam.stderr
    sub.close()
    s = cam.summary()
    m = s["mqtt"]
    assert m["reconnects"] >= 1 and m["dropped"] >= 1 and m["published"] > 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == s["frames_processed"]
    during = [r["frame"] for r in records if t_kill < r["timestamp"] < t_back]
    assert len(during) >= 5  # inference went on while the broker was away: nothing blocked
    delivered = {f["frame"] for f in sub.json_on("cam4/frames")}
    kept = [f for f in during if f in delivered]
    assert len(kept) <= 5  # at most the queue (the newest) survived the outage
    assert m["published"] + m["dropped"] <= s["frames_processed"]
    assert retained(broker.port, "cam4/status") == (b"offline", True)  # clean stop at the end


# ---------------------------------------------------------------------------------------------
# TLS


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl to make test certificates: sudo apt-get install -y openssl")
    d = tmp_path_factory.mktemp("tls")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=edgeapp test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "san.ext")
    return {"ca": d / "ca.crt", "cert": d / "server.crt", "key": d / "server.key"}


def test_mqtts_verifies_the_broker(cli, tiny_model, short_video, certs, tmp_path):
    video, expected = short_video
    b = Broker(tmp_path, tls=certs).start()
    sub = Subscriber(b.port, "cam5/#")
    try:
        url = f"mqtts://127.0.0.1:{b.tls_port}/cam5"
        r = cli("camera", tiny_model, "--source", video, "--mqtt", f"{url}?ca={certs['ca']}",
                "--summary", "json")
        assert r.exit_code == 0, r.stderr
        sub.wait(lambda: len(sub.on("cam5/frames")) == len(expected), what="frames over TLS")
        assert last_json(r.stderr)["mqtt"]["published"] == len(expected)
        # without our CA the broker's certificate is refused: nothing sent, the run unharmed
        r = cli("camera", tiny_model, "--source", video, "--mqtt", url, "--summary", "json")
        assert r.exit_code == 0, r.stderr
        m = last_json(r.stderr)["mqtt"]
        assert m["published"] == 0 and m["dropped"] == len(expected) and not m["connected"]
        assert last_json(r.stderr)["frames_processed"] == len(expected)
        assert "cannot reach" in r.stderr
    finally:
        sub.close()
        b.kill()


# ---------------------------------------------------------------------------------------------
# Flags and the optional dependency


def test_without_paho_exit_7_with_the_install_line(tiny_model, short_video):
    video, _ = short_video
    code = f"""
import sys
class NoPaho:
    def find_spec(self, name, path=None, target=None):
        if name == "paho" or name.startswith("paho."):
            raise ImportError("no paho here")
sys.meta_path.insert(0, NoPaho())
from edgeapp.cli.app import main
sys.argv = ["edgeapp", "camera", {str(tiny_model)!r}, "--source", {str(video)!r},
            "--mqtt", "mqtt://127.0.0.1:1/x"]
main()
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == ExitCode.MISSING_DEPENDENCY, proc.stderr
    assert proc.stderr.strip() == "edgeapp: error: --mqtt needs paho-mqtt: pip install 'edgeapp[mqtt]'"


def test_bad_mqtt_urls_are_usage_errors(cli, tiny_model, short_video):
    video, _ = short_video
    for url, why in [("http://broker/x", "expected mqtt://"), ("mqtt:///x", "no broker host"),
                     ("mqtt://b/a/#", "may not contain"), ("mqtt://b:99999/x", "out of range"),
                     ("mqtt://b/x?ca=/nonexistent", "ca= is for mqtts")]:
        r = cli("camera", tiny_model, "--source", video, "--mqtt", url)
        assert r.exit_code == ExitCode.USAGE and why in r.stderr, (url, r.stderr)


@pytest.mark.parametrize("url, target", [
    ("mqtt://broker/edgeapp", MqttTarget("broker", 1883, "edgeapp")),
    ("mqtt://broker", MqttTarget("broker", 1883, "edgeapp")),
    ("mqtt://u:p%40ss@10.0.0.2:1884/home/cam/", MqttTarget("10.0.0.2", 1884, "home/cam", False, "u", "p@ss")),
    ("mqtts://broker/x", MqttTarget("broker", 8883, "x", True)),
    ("MQTT://[::1]:1999/x", MqttTarget("::1", 1999, "x")),
])
def test_parse_mqtt_url(url, target, monkeypatch):
    monkeypatch.delenv("EDGEAPP_MQTT_PASSWORD", raising=False)
    assert parse_mqtt_url(url) == target
    assert "p@ss" not in str(parse_mqtt_url(url))  # the password never shows


def test_password_from_the_environment(monkeypatch):
    monkeypatch.setenv("EDGEAPP_MQTT_PASSWORD", "s3cret")
    t = parse_mqtt_url("mqtt://ha@broker/x")
    assert (t.username, t.password) == ("ha", "s3cret")
    with pytest.raises(UsageError):
        parse_mqtt_url("mqtts://broker/x?ca=/nonexistent/ca.pem")
