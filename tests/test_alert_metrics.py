"""camera --metrics-port: Prometheus metrics of a live run (a camera stream of the rendered
crossing scene, through the shipped detector), read by prometheus_client's own parser, on their
own loopback port and at the live view's /metrics; the live view's Host check and token rules;
exit 7 without prometheus-client."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from camera_proc import CameraProc, StreamServer
from cli_run import edgeapp, error_lines
from conftest import ROOT
from shapes_video import crossing_scene

parser = pytest.importorskip("prometheus_client.parser")
pytest.importorskip("scipy")
pytest.importorskip("cv2")
DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"
# Prometheus' naming rules: snake_case with the unit last, counters ending in _total
NAME = __import__("re").compile(r"^edgeapp_[a-z][a-z0-9_]*$")


def _get(url: str, host: str = None, token: str = None) -> tuple:
    req = urllib.request.Request(url)
    if host:
        req.add_header("Host", host)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _families(text: str) -> dict:
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def _value(family, **labels) -> float:
    return sum(s.value for s in family.samples
               if all(s.labels.get(k) == v for k, v in labels.items()) and not s.name.endswith("_created"))


@pytest.fixture(scope="module")
def scraped(tmp_path_factory) -> dict:
    """A live run with an alert rule, scraped until the alert shows, then stopped."""
    scene = crossing_scene()
    out = tmp_path_factory.mktemp("metrics")
    with StreamServer(fps=15, frame=lambda i: scene.render(i % scene.frames)) as stream:
        with CameraProc(DETECTOR, "--source", stream.url, "--no-display", "--track",
                        "--count-line", "door:160,0,160,240", "--alert", "cross:line=door",
                        "--metrics-port", "127.0.0.1:0", "--serve", "127.0.0.1:0",
                        "-o", out / "records.jsonl", "--summary", "json") as cam:
            line = cam.wait_line(lambda ln: "metrics on http://" in ln)
            url = line.split("metrics on ", 1)[1].split()[0]
            live = cam.url()
            families: dict = {}
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # until both crossings were alerted
                status, text = _get(url)
                assert status == 200, text
                families = _families(text)
                if "edgeapp_alerts" in families and _value(families["edgeapp_alerts"], rule="cross") >= 2:
                    break
                time.sleep(0.3)
            live_status, live_text = _get(live.rstrip("/") + "/metrics")
            stats = json.loads(_get(live.rstrip("/") + "/stats")[1])
            refused = _get(url, host="evil.example")
            missing = _get(live.rstrip("/") + "/nothing")
            assert cam.stop() == 0, cam.stderr
    return {"families": families, "url": url, "live": (live_status, live_text), "refused": refused,
            "missing": missing, "stats": stats}


def test_metrics_parse_and_follow_prometheus_names(scraped):
    fams = scraped["families"]
    for name, fam in fams.items():
        assert NAME.match(name), name
        if fam.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in fam.samples)
    assert fams["edgeapp_inference_seconds"].type == "histogram"
    count = [s for s in fams["edgeapp_inference_seconds"].samples if s.name.endswith("_count")]
    assert count and count[0].labels["device"] == "cpu" and count[0].value > 0
    frames = fams["edgeapp_frames"]
    assert frames.type == "counter"
    assert _value(frames, state="processed") >= count[0].value > 0
    assert _value(frames, state="captured") >= _value(frames, state="processed")
    assert fams["edgeapp_fps"].samples[0].value > 0
    assert 0 < fams["edgeapp_device_busy_ratio"].samples[0].value <= 1
    events = fams["edgeapp_events"]
    assert _value(events, kind="line_crossed") >= 2 and _value(events, kind="track_started") >= 2
    assert _value(fams["edgeapp_alerts"], rule="cross") >= 2
    assert _value(fams["edgeapp_engine_recoveries"]) == 0 and _value(fams["edgeapp_engine_lost"]) == 0


def test_the_live_view_serves_them_too_behind_the_same_checks(scraped):
    status, text = scraped["live"]
    assert status == 200 and "edgeapp_inference_seconds_bucket" in text
    assert _families(text)["edgeapp_frames"].type == "counter"
    assert scraped["refused"][0] == 421  # a Host that is not this machine's
    assert scraped["missing"][0] == 404
    # the live view lists the latest alerts
    assert [a["rule"] for a in scraped["stats"]["alerts"]][:2] == ["cross", "cross"]


def test_beyond_loopback_metrics_need_a_token(tmp_path):
    video = crossing_scene(frames=3).write(tmp_path / "v.avi")
    r = edgeapp("camera", DETECTOR, "--source", video, "--no-display", "--metrics-port", "0.0.0.0:0")
    assert r.returncode == 2 and len(error_lines(r.stderr)) == 1, r.stderr
    assert "--metrics-port 0.0.0.0:0 lets other machines" in r.stderr and "--serve-token" in r.stderr


def test_a_token_is_asked_of_every_scrape():
    scene = crossing_scene()
    with StreamServer(fps=15, frame=lambda i: scene.render(i % scene.frames)) as stream:
        with CameraProc(DETECTOR, "--source", stream.url, "--no-display", "--metrics-port", "127.0.0.1:0",
                        "--serve-token", "s3cret-token", "-o", "/dev/null") as cam:
            line = cam.wait_line(lambda ln: "metrics on http://" in ln)
            url = line.split("metrics on ", 1)[1].split()[0]
            assert _get(url)[0] == 401
            assert _get(url, token="wrong-token")[0] == 401
            assert _get(url, token="s3cret-token")[0] == 200
            assert _get(url + "?token=s3cret-token")[0] == 200
            assert cam.stop() == 0, cam.stderr


def test_without_prometheus_client_it_is_exit_7(tmp_path):
    blocker = tmp_path / "noprom" / "prometheus_client"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    video = crossing_scene(frames=3).write(tmp_path / "v.avi")
    r = edgeapp("camera", DETECTOR, "--source", video, "--no-display", "--metrics-port", "0",
                env={"PYTHONPATH": str(blocker.parent)})
    assert r.returncode == 7 and "pip install 'edgeapp[metrics]'" in r.stderr, r.stderr
