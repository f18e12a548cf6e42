"""`edgeapp camera --mqtt`: against a real Mosquitto broker on 127.0.0.1 started by the tests
(Debian's `mosquitto` package), with a real paho-mqtt subscriber, the tiny colour classifier
and real OpenCV videos. The broker is killed and restarted mid-run; TLS uses a CA and a server
certificate made here with openssl. Home Assistant discovery configs are read back from the
broker and their value templates rendered with Jinja (Home Assistant's template language)
against the records the camera published.

Runs that must last while a test acts read an endless camera stream (camera_proc.StreamServer)
and are stopped by the test: nothing depends on how fast this machine is.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from camera_proc import CameraProc, StreamServer
from conftest import ROOT
from media import CLASSES, make_video
from mqtt_broker import Broker, Subscriber, retained

from edgeapp.errors import ExitCode, UsageError
from edgeapp.sinks.mqtt import ChangeDetector, MqttTarget, parse_mqtt_url
from edgeapp.tasks import kind


@pytest.fixture()
def broker(tmp_path):
    b = Broker(tmp_path).start()
    yield b
    b.kill()


@pytest.fixture(scope="module")
def short_video(tmp_path_factory) -> tuple[Path, list[str]]:
    """24 frames: blocks of 4 frames of one colour, cycling blue, green, red."""
    expected = [CLASSES[(i // 4) % 3] for i in range(24)]
    return make_video(tmp_path_factory.mktemp("mqtt") / "short.avi", expected, seed=7, marked=True), expected


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
    video = make_video(tmp_path / "events.avi", labels, fps=10, seed=8, marked=True)
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


@pytest.fixture()
def stream():
    with StreamServer(fps=15.0) as server:
        yield server


def test_status_is_retained_and_last_will_says_offline(tiny_model, broker, stream):
    sub = Subscriber(broker.port, "cam3/status")
    with CameraProc(tiny_model, "--source", stream.url, "--mqtt", broker.url("cam3"),
                    "--serve", "127.0.0.1:0") as cam:
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


def records_after(path: Path, t: float) -> list[dict]:
    """The records written so far (one flushed line each) captured after wall-clock time t."""
    if not path.exists():
        return []
    whole = path.read_text().split("\n")[:-1]  # the last piece: empty, or a line being written
    return [r for r in map(json.loads, whole) if r["timestamp"] > t]


def test_broker_killed_and_restarted_mid_run(tiny_model, broker, stream, tmp_path):
    out = tmp_path / "records.jsonl"
    sub = Subscriber(broker.port, "cam4/#")
    with CameraProc(tiny_model, "--source", stream.url, "--mqtt", broker.url("cam4"),
                    "--mqtt-queue", "5", "--output", out, "--summary", "json") as cam:
        sub.wait(lambda: len(sub.on("cam4/frames")) >= 10, what="10 frames")
        t_kill = time.time()
        broker.kill()
        cam.wait_line(lambda ln: "lost the connection" in ln, 30)
        t_lost = time.time()
        # the camera runs on without the broker: 10 frames captured after it noticed
        end = time.monotonic() + 60
        while len(records_after(out, t_lost)) < 10:
            assert time.monotonic() < end and cam.proc.poll() is None, cam.stderr
            time.sleep(0.05)
        broker.start()
        t_back = time.time()
        n_before = len(sub.on("cam4/frames"))
        sub.wait(lambda: len(sub.on("cam4/frames")) >= n_before + 10, 60, "frames after the restart")
        cam.wait_line(lambda ln: "reconnected" in ln, 30)
        assert cam.stop() == 0, cam.stderr
    sub.close()
    s = cam.summary()
    m = s["mqtt"]
    # 10 frames went to a queue of 5 while disconnected: at least 5 dropped (the oldest)
    assert m["reconnects"] >= 1 and m["dropped"] >= 5 and m["published"] > 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == s["frames_processed"]
    during = [r["frame"] for r in records if t_kill < r["timestamp"] < t_back]
    assert len(during) >= 10  # inference went on while the broker was away: nothing blocked
    delivered = {f["frame"] for f in sub.json_on("cam4/frames")}
    kept = [f for f in during if f in delivered]
    assert len(kept) <= 5  # at most the queue (the newest) survived the outage
    assert m["published"] + m["dropped"] <= s["frames_processed"]
    assert retained(broker.port, "cam4/status") == (b"offline", True)  # clean stop at the end


# ---------------------------------------------------------------------------------------------
# Home Assistant discovery


def retained_under(port: int, prefix: str) -> dict[str, dict]:
    """Every retained message under `prefix`/ now, as JSON: a marker published after subscribing
    arrives after them (one connection, in order), so none is missed and no waiting is guessed."""
    sub = Subscriber(port, f"{prefix}/#")
    try:
        marker = f"{prefix}/zz-end-of-retained"
        sub.client.publish(marker, "end", qos=1)
        sub.wait(lambda: sub.on(marker), 10, "the marker")
        with sub.cond:
            return {t: json.loads(p) for t, p, r in sub.messages if r and t != marker}
    finally:
        sub.close()


def render(template: str, value: dict) -> str:
    """A value template as Home Assistant renders it (Jinja, `value_json` the payload)."""
    jinja2 = pytest.importorskip("jinja2")
    return jinja2.Environment().from_string(template).render(value_json=value).strip()


def check_configs(configs: dict, prefix: str, state: str) -> None:
    node = f"edgeapp_{prefix}"
    for topic, c in configs.items():
        component, _, key = topic.split("/")[1:4]
        assert topic == f"homeassistant/{component}/{node}/{key}/config"
        assert c["unique_id"] == f"{node}_{key}" and c["device"]["identifiers"] == [node]
        assert (c["availability_topic"], c["payload_available"], c["payload_not_available"]) == (
            f"{prefix}/status", "online", "offline")
        assert c["state_topic"] == f"{prefix}/{state}"


def node_topics(node: str, *entities: str) -> set:
    return {f"homeassistant/{e.split(':')[0]}/{node}/{e.split(':')[1]}/config" for e in entities}


def test_discovery_for_a_classifier_follows_the_mode_and_is_removed(cli, tiny_model, broker, tmp_path):
    labels = ["blue"] * 6 + ["green"] * 6 + ["red"] * 6
    video = make_video(tmp_path / "d.avi", labels, fps=10, seed=12, marked=True)
    out = tmp_path / "records.jsonl"
    r = cli("camera", tiny_model, "--source", video, "--mqtt", broker.url("ha1"), "--output", out)
    assert r.exit_code == 0, r.stderr
    configs = retained_under(broker.port, "homeassistant")
    assert set(configs) == node_topics("edgeapp_ha1", "sensor:top_class", "sensor:top_score")
    check_configs(configs, "ha1", "frames")
    top = configs["homeassistant/sensor/edgeapp_ha1/top_class/config"]
    score = configs["homeassistant/sensor/edgeapp_ha1/top_score/config"]
    assert score["state_class"] == "measurement" and top["name"] == "top class"
    assert retained(broker.port, "ha1/status") == (b"offline", True)  # availability: the will too
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [render(top["value_template"], rec) for rec in records] == labels
    assert [float(render(score["value_template"], rec)) for rec in records] == [
        rec["classes"][0]["score"] for rec in records]
    assert render(top["value_template"], {"classes": []}) == "none"  # nothing above --threshold

    # events mode: the retained state topic; the per-frame score is not there: its entity goes
    r = cli("camera", tiny_model, "--source", video, "--mqtt", broker.url("ha1"), "--mqtt-mode",
            "events", "--mqtt-debounce", "0.2")
    assert r.exit_code == 0, r.stderr
    configs = retained_under(broker.port, "homeassistant")
    assert set(configs) == node_topics("edgeapp_ha1", "sensor:top_class")
    check_configs(configs, "ha1", "state")
    state, _ = retained(broker.port, "ha1/state")
    assert render(configs["homeassistant/sensor/edgeapp_ha1/top_class/config"]["value_template"],
                  json.loads(state)) == "red"

    r = cli("camera", tiny_model, "--source", video, "--mqtt", broker.url("ha1"), "--no-mqtt-discovery")
    assert r.exit_code == 0, r.stderr
    assert retained_under(broker.port, "homeassistant") == {}  # removed: empty retained configs


def two_squares(cells: dict, index: int) -> np.ndarray:
    """Black, with a pure colour square in each given cell of the detection models' 4x4 grid
    (not in the last column: the index marker is there)."""
    from media import BGR, H, W, mark

    f = np.zeros((H, W, 3), np.uint8)
    for cell, name in cells.items():
        r, c = divmod(cell, 4)
        f[r * 60:(r + 1) * 60, c * 80:(c + 1) * 80, BGR[name]] = 255
    return mark(f, index)


def test_discovery_for_a_detector_counts_each_label(cli, broker, tmp_path, tmp_path_factory):
    import detection_models as dm

    det = dm.build(tmp_path_factory)
    scenes = [{0: "red"}, {0: "red", 5: "red"}, {0: "red", 10: "blue"}, {}, {14: "green"}] * 2
    video = make_video(tmp_path / "sq.avi", [two_squares(c, i) for i, c in enumerate(scenes)], fps=10)
    out = tmp_path / "records.jsonl"
    r = cli("camera", det["det_tf1"], "--source", video, "--labels", det["labels"], "--mqtt",
            broker.url("ha2"), "--output", out)
    assert r.exit_code == 0, r.stderr
    configs = retained_under(broker.port, "homeassistant")
    node = "edgeapp_ha2"
    assert set(configs) == node_topics(node, "sensor:objects", "sensor:count_0", "sensor:count_1",
                                       "sensor:count_2")
    check_configs(configs, "ha2", "frames")
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == len(scenes)
    for rec, scene in zip(records, scenes):
        assert render(configs[f"homeassistant/sensor/{node}/objects/config"]["value_template"],
                      rec) == str(len(scene))
        for i, label in enumerate(dm.LABELS):
            config = configs[f"homeassistant/sensor/{node}/count_{i}/config"]
            assert config["name"] == f"{label} count"
            assert render(config["value_template"], rec) == str(list(scene.values()).count(label))
    # events: whether each label is present, from the retained state (binary sensors)
    r = cli("camera", det["det_tf1"], "--source", video, "--labels", det["labels"], "--mqtt",
            broker.url("ha2"), "--mqtt-mode", "events", "--mqtt-debounce", "0")
    assert r.exit_code == 0, r.stderr
    configs = retained_under(broker.port, "homeassistant")
    assert set(configs) == node_topics(node, *(f"binary_sensor:present_{i}" for i in range(3)))
    check_configs(configs, "ha2", "state")
    state = json.loads(retained(broker.port, "ha2/state")[0])
    assert state == {"labels": ["green"]}  # the last scene
    got = {configs[f"homeassistant/binary_sensor/{node}/present_{i}/config"]["name"]:
           render(configs[f"homeassistant/binary_sensor/{node}/present_{i}/config"]["value_template"], state)
           for i in range(3)}
    assert got == {"red": "OFF", "green": "ON", "blue": "OFF"}


def test_discovery_for_pose_and_segmentation(cli, broker, tmp_path, tmp_path_factory):
    import posesegment_models as pm

    models = pm.build(tmp_path_factory)
    from media import H, W

    frames = [pm.quadrants((W, H)), pm.quadrants((W, H), colors=((0, 0, 0),) * 4)] * 2
    video = make_video(tmp_path / "q.avi", frames, fps=10, rgb=True)
    for name, prefix in (("pose", "ha3"), ("seg", "ha4")):
        out = tmp_path / f"{name}.jsonl"
        r = cli("camera", models[name], "--source", video, "--mqtt", broker.url(prefix), "--output", out)
        assert r.exit_code == 0, r.stderr
        records = [json.loads(line) for line in out.read_text().splitlines()]
        configs = {t: c for t, c in retained_under(broker.port, "homeassistant").items()
                   if f"/edgeapp_{prefix}/" in t}
        check_configs(configs, prefix, "frames")
        (config,) = configs.values()
        shown = [render(config["value_template"], rec) for rec in records]
        if name == "pose":
            assert config["payload_on"] == "ON" and "/binary_sensor/" in next(iter(configs))
            assert shown == ["ON" if rec["poses"] else "OFF" for rec in records] and "ON" in shown
            assert render(config["value_template"], {"poses": []}) == "OFF"
        else:
            assert shown == [", ".join(c["label"] for c in rec["classes"] if c["share"] >= 0.05) or "none"
                             for rec in records]
            assert set(shown[0].split(", ")) == set(pm.SEG_LABELS)
            assert shown[1] == "background"


def test_discovery_templates_quote_any_label():
    from edgeapp.sinks.ha_discovery import discovery_messages, node_id

    odd = {0: 'a "quoted" label', 1: "it's {{ x }}", 2: "back\\slash"}
    entities = {e.key: e for e in kind("detect").discovery(odd)}
    for i, label in odd.items():
        assert render(entities[f"present_{i}"].state, {"labels": [label]}) == "ON"
        assert render(entities[f"present_{i}"].state, {"labels": ["other"]}) == "OFF"
    assert node_id("Home/Cam 1") == "edgeapp_home_cam_1"
    assert kind("classify").discovery(None)[0].state  # every task has an entity for events too
    messages = dict(discovery_messages(kind("pose"), None, "p", "frames", remove=True))
    assert messages == {"homeassistant/binary_sensor/edgeapp_p/person/config": ""}


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
        # without our CA the broker's certificate is refused: nothing sent, every frame still
        # processed; a file's results that never reached the broker make the run a failure
        r = cli("camera", tiny_model, "--source", video, "--mqtt", url, "--summary", "json")
        assert r.exit_code == ExitCode.INPUTS_FAILED, r.stderr
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


def test_tracking_events_counts_and_counter_entities(cli, broker, tmp_path):
    """camera --track --mqtt: each event on PREFIX/tracks (the same as --events writes), the
    counts retained on PREFIX/counts, and a Home Assistant counter per line direction and zone
    whose template reads those counts."""
    pytest.importorskip("scipy")
    from conftest import ROOT
    from shapes_video import crossing_scene

    video = crossing_scene().write(tmp_path / "crossing.avi")
    detector = ROOT / "models" / "shapes_yolov8_int8.tflite"
    sub = Subscriber(broker.port, "door/#")
    try:
        r = cli("camera", detector, "--source", video, "--mqtt", broker.url("door"), "--track",
                "--count-line", "door:160,0,160,240",
                "--zone", "right:0.5,0,1,0,1,1,0.5,1", "--events", tmp_path / "ev.jsonl",
                "--summary", "json")
        assert r.exit_code == 0, r.stderr
        written = [json.loads(x) for x in (tmp_path / "ev.jsonl").read_text().splitlines()]
        sub.wait(lambda: sub.on("door/status")[-1:] == [b"offline"], what="offline")
        assert sub.json_on("door/tracks") == written and len(written) >= 8
        counts = sub.json_on("door/counts")[-1]
        assert counts == last_json(r.stderr)["tracking"]
        assert (counts["lines"]["door"]["in"], counts["lines"]["door"]["out"]) == (1, 1)
    finally:
        sub.close()
    configs = retained_under(broker.port, "homeassistant/sensor/edgeapp_door")
    keys = {topic.split("/")[-2] for topic in configs}
    assert {"line_door_in", "line_door_out", "zone_right"} <= keys
    line_in = next(c for t, c in configs.items() if "/line_door_in/" in t)
    assert line_in["state_topic"] == "door/counts"
    assert render(line_in["value_template"], counts) == "1"
