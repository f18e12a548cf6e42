"""Adding a task is adding one module to edgeapp/tasks/ (CONTRIBUTING.md, "How to add a task").

A copy of the package with `tasks/classify.py` saved again as `tasks/zzz.py`, only its name and
guess rank changed, is run as a user runs edgeapp (subprocesses, the copy first on
PYTHONPATH): `edgeapp zzz` is a command with the task's options and defaults, `camera --task
zzz` runs it with the live view and MQTT events, `--device all` on stand-in Edge TPUs and
`--cluster local:2` run it, and the Python API opens models for it with `model.zzz()`. Nothing
outside the new file was edited.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from camera_proc import CameraProc
from conftest import make_edgetpu_stand_in
from media import CLASSES, make_images, make_video

PKG = Path(__file__).resolve().parent.parent / "edgeapp"


@pytest.fixture(scope="module")
def plugged(tmp_path_factory) -> Path:
    """A copy of edgeapp whose tasks/ has one more module, zzz.py, a renamed classify.py."""
    root = tmp_path_factory.mktemp("plugged")
    shutil.copytree(PKG, root / "edgeapp", ignore=shutil.ignore_patterns("__pycache__"))
    source = (PKG / "tasks" / "classify.py").read_text()
    assert 'name = "classify"' in source and "guess_rank = 9" in source
    (root / "edgeapp" / "tasks" / "zzz.py").write_text(
        source.replace('name = "classify"', 'name = "zzz"').replace("guess_rank = 9", "guess_rank = 8"))
    return root


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> list:
    paths = make_images(tmp_path_factory.mktemp("zzz_images"), CLASSES, size=32, seed=9, name="c{i}")
    return [str(p) for p in paths]


@pytest.fixture(scope="module")
def video(images, tmp_path_factory) -> Path:
    import cv2

    path = tmp_path_factory.mktemp("zzz_video") / "v.avi"
    bgr = cv2.resize(cv2.imread(images[0]), (320, 240), interpolation=cv2.INTER_NEAREST)
    return make_video(path, [bgr] * 12, fps=15)


def env_for(plugged: Path, **more: str) -> dict:
    path = os.pathsep.join(p for p in (str(plugged), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "EDGEAPP_NO_PROGRESS": "1", **more}


def edgeapp(plugged: Path, *args: object, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeapp", *[str(a) for a in args]], cwd=plugged,
                          env=env_for(plugged), capture_output=True, text=True, timeout=timeout)


def records(text: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def comparable(recs: list) -> list:
    return [{k: v for k, v in r.items() if k not in ("device", "model", "latency_ms")} for r in recs]


def test_the_copy_runs_from_the_copy(plugged):
    r = subprocess.run([sys.executable, "-c", "import edgeapp, edgeapp.tasks as t; "
                        "print(edgeapp.__file__); print(t.names())"],
                       cwd=plugged, env=env_for(plugged), capture_output=True, text=True)
    assert r.stdout.splitlines()[0].startswith(str(plugged)), r.stdout + r.stderr
    assert "'zzz'" in r.stdout.splitlines()[1]


def test_a_new_task_module_is_a_command_with_its_options(plugged, tiny_model, images):
    top = edgeapp(plugged, "--help")
    assert top.returncode == 0 and "\n  zzz " in top.stdout, top.stdout
    own = edgeapp(plugged, "zzz", "--help")
    assert own.returncode == 0 and "--top-k" in own.stdout and "--threshold" in own.stdout
    camera = edgeapp(plugged, "camera", "--help")
    assert "zzz" in camera.stdout.split("--task", 1)[1].split("\n")[0] + camera.stdout
    ran = edgeapp(plugged, "zzz", tiny_model, *images, "-f", "jsonl", "--device", "cpu", "-k", "2")
    assert ran.returncode == 0, ran.stderr
    classify = edgeapp(plugged, "classify", tiny_model, *images, "-f", "jsonl", "--device", "cpu",
                       "-k", "2")
    assert comparable(records(ran.stdout)) == comparable(records(classify.stdout))
    assert all(len(r["classes"]) == 2 for r in records(ran.stdout))


def test_a_new_task_runs_on_every_edge_tpu_and_on_the_cluster(plugged, tiny_model, images, tpus,
                                                               tmp_path):
    plain = comparable(records(edgeapp(plugged, "zzz", tiny_model, *images, "-f", "jsonl",
                                       "--device", "cpu").stdout))
    assert len(plain) == len(images) and all(r["error"] is None for r in plain)
    cluster = edgeapp(plugged, "zzz", tiny_model, *images, "-f", "jsonl", "--device", "cpu",
                      "--cluster", "local:2", "--chunk-size", "1")
    assert cluster.returncode == 0, cluster.stderr
    assert comparable(records(cluster.stdout)) == plain
    tpus("usb,usb")
    twin = tmp_path / "zzz.tflite"
    twin.write_bytes(Path(tiny_model).read_bytes())
    twin.with_suffix(".json").write_bytes(Path(tiny_model).with_suffix(".json").read_bytes())
    compiled = make_edgetpu_stand_in(twin, tmp_path / "zzz_edgetpu.tflite")
    every = edgeapp(plugged, "zzz", compiled, *images, "-f", "jsonl", "--device", "all")
    assert every.returncode == 0, every.stderr
    assert {r["device"] for r in records(every.stdout)} <= {"usb:0", "usb:1"}
    assert all(r["classes"] and r["error"] is None for r in records(every.stdout))


def test_a_new_task_in_the_python_api(plugged, tiny_model, images):
    code = f"""
import json, edgeapp
with edgeapp.open_model({str(tiny_model)!r}, "cpu", task="zzz", top_k=1) as model:
    print(json.dumps({{"task": model.task, "one": model.zzz({images[0]!r}),
                      "batch": list(model.zzz_batch({images!r})),
                      "classify": model.classify({images[0]!r}, top_k=1)}}))
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=plugged, env=env_for(plugged),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["task"] == "zzz" and out["one"] == out["classify"] and len(out["one"]) == 1
    assert [b["classes"] for b in out["batch"]][0] == out["one"]


def test_a_new_task_on_the_camera_with_mqtt_events_and_the_live_view(plugged, tiny_model, video,
                                                                      tmp_path):
    from mqtt_broker import Broker, Subscriber

    broker = Broker(tmp_path).start()
    sub = Subscriber(broker.port, "zzz/#")
    try:
        r = edgeapp(plugged, "camera", tiny_model, "--task", "zzz", "--source", video, "--no-display",
                    "--mqtt", broker.url("zzz"), "--mqtt-mode", "events", "--mqtt-debounce", "0",
                    "--summary", "json")
        assert r.returncode == 0, r.stderr
        summary = json.loads(r.stderr.strip().splitlines()[-1])
        assert summary["task"] == "zzz" and summary["mqtt"]["events"] >= 1
        sub.wait(lambda: sub.on("zzz/events"), 20, "an event")
        assert sub.json_on("zzz/events")[0]["label"] is not None
    finally:
        sub.close()
        broker.kill()
    with CameraProc(tiny_model, "--task", "zzz", "--source", video, "--drop-frames", "--no-display",
                    "--serve", "127.0.0.1:0", "--duration", "60", env=env_for(plugged),
                    cwd=plugged) as cam:
        url, stats = cam.url(), {}
        end = time.monotonic() + 30
        while not stats.get("results") and time.monotonic() < end:
            try:
                stats = json.loads(urllib.request.urlopen(url + "stats", timeout=10).read())
            except OSError:
                time.sleep(0.1)
        cam.stop()
    assert stats.get("task") == "zzz" and stats["results"], cam.stderr
