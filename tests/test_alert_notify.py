"""camera --notify: alerts through Apprise's json:// to a real HTTP server on loopback. A server
that is down (refusing connections, then answering 503) and then up gets every alert, once, in
order, with the snapshot attached; the hold-off holds repeats; without Apprise, exit 7 with the
install line; a URL Apprise does not know, exit 2."""

from __future__ import annotations

import base64
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cli_run import edgeapp, error_lines
from conftest import ROOT
from shapes_video import crossing_scene

pytest.importorskip("apprise")
pytest.importorskip("scipy")
pytest.importorskip("cv2")
DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"


class Receiver:
    """A JSON notification endpoint on 127.0.0.1: bound at once, listening only after
    `up()` (connections are refused before), answering 503 to its first `fail` requests."""

    def __init__(self, fail: int = 0) -> None:
        self.received, self.statuses = [], []
        self.fail = fail
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if outer.fail > 0:
                    outer.fail -= 1
                    outer.statuses.append(503)
                    self.send_response(503)
                else:
                    outer.received.append(json.loads(body))
                    outer.statuses.append(200)
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
        self.server.server_bind()
        self.port = self.server.server_address[1]
        self.url = f"json://127.0.0.1:{self.port}/hook"
        self.thread = None

    def up(self) -> None:
        self.server.server_activate()
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.thread is not None:
            self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    return crossing_scene().write(tmp_path_factory.mktemp("notify") / "crossing.avi")


def test_a_receiver_that_is_down_then_up_gets_every_alert_once(video, tmp_path):
    from edgeapp import open_model

    receiver = Receiver(fail=2)
    probe = socket.create_connection  # down: nothing listens on the bound port yet
    with pytest.raises(ConnectionRefusedError):
        probe(("127.0.0.1", receiver.port), timeout=2).close()
    records = []

    def on_record(record: dict) -> None:
        records.append(record)
        if record["frame"] == 70:  # the crossings (frames 40-47) were alerted while it was down
            receiver.up()
    try:
        with open_model(DETECTOR) as model:
            outcome = model.camera(str(video), on_record=on_record, track=True,
                                   count_lines=["door:160,0,160,240"], alerts=["cross:line=door"],
                                   events=tmp_path / "e.jsonl", clips=tmp_path / "clips", pre=0.5,
                                   post=0.2, notify=[receiver.url], notify_holdoff=0)
    finally:
        receiver.close()
    assert outcome.error is None and len(records) == 90
    alerts = [json.loads(x) for x in (tmp_path / "e.jsonl").read_text().splitlines()
              if json.loads(x)["event"] == "alert"]
    assert len(alerts) == 2
    sent = outcome.outputs["notify"]
    assert sent["sent"] == 2 and sent["undelivered"] == 0 and sent["failed_attempts"] >= 2
    assert receiver.statuses[:2] == [503, 503]
    got = receiver.received
    assert [m["title"] for m in got] == ["edgeapp: cross", "edgeapp: cross"]
    # the default message names the rule, label, source and time, in the alerts' order
    assert [m["message"].split(" on ")[0] for m in got] == [f"cross: {a['label']}" for a in alerts]
    assert all(str(video) in m["message"] for m in got)
    for m, a in zip(got, alerts):
        (attached,) = m["attachments"]
        assert base64.b64decode(attached["base64"]) == (tmp_path / "clips" / a["snapshot"]).read_bytes()


def test_the_holdoff_holds_repeats_of_a_rule_on_a_track():
    from edgeapp.sinks.notify import Notifier, NotifySettings

    receiver = Receiver()
    receiver.up()
    try:
        notifier = Notifier(NotifySettings([receiver.url], holdoff=10, template="{rule} {track_id} {frame}"))
        for frame, track, t in ((1, 1, 0.0), (2, 1, 5.0), (3, 2, 5.0), (4, 1, 10.5)):
            notifier.send({"event": "alert", "rule": "z", "track_id": track, "frame": frame,
                           "media_time": t}, None)
        notifier.close()
    finally:
        receiver.close()
    assert [m["message"] for m in receiver.received] == ["z 1 1", "z 2 3", "z 1 4"]
    assert notifier.summary()["held"] == 1


def test_without_apprise_notify_is_exit_7(video, tmp_path):
    blocker = tmp_path / "noapprise" / "apprise"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('apprise hidden by the test')\n")
    r = edgeapp("camera", DETECTOR, "--source", video, "--no-display", "--track", "--alert", "a:appear",
                "--notify", "json://127.0.0.1:9/x", env={"PYTHONPATH": str(blocker.parent)})
    assert r.returncode == 7, r.stderr
    assert "pip install 'edgeapp[notify]'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args, words", [
    (("--alert", "a:appear", "--notify", "nosuch://x"), "not a notification URL"),
    (("--alert", "a:appear", "--notify", "json://127.0.0.1:9/x", "--notify-template", "{nope}"),
     "not a field"),
    (("--notify", "json://127.0.0.1:9/x"), "add --alert"),
])
def test_bad_notify_settings_exit_2(video, args, words):
    r = edgeapp("camera", DETECTOR, "--source", video, "--no-display", "--track", *args)
    assert r.returncode == 2, r.stderr
    assert len(error_lines(r.stderr)) == 1 and words in r.stderr
