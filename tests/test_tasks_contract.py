"""Every task through every path, parametrized over the task registry (edgeapp/tasks/).

A task added to the registry is run here through batch and camera records (the same keys),
its results files, its wording and drawing on empty and full results, the live view, MQTT
frames and events, `--device all` on stand-in Edge TPUs, `--cluster local:2` and the Python
API, on the tiny models of the suite's pool (`pool`) that the task's own `plan` accepts: the
parameters come from the registry, not from a list of task names. The KeyErrors a task once
met when taken down a path by hand (segment in the live view, events of pose and segment)
are what this catches.
"""

from __future__ import annotations

import csv
import io
import json
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import detection_models
import numpy as np
import posesegment_models as pm
import pytest
from camera_proc import CameraProc
from conftest import make_edgetpu_stand_in
from media import CLASSES, make_images, make_video

from edgeapp import tasks
from edgeapp.sinks.records import BATCH_FIELDS, FRAME_FIELDS, Layout
from edgeapp.tasks.base import Result

TASKS = tasks.names()
YOLO = Path(__file__).resolve().parent / "fixtures" / "yolo"
BATCH_KEYS = set(BATCH_FIELDS[0] + BATCH_FIELDS[1])
FRAME_KEYS = set(FRAME_FIELDS[0] + FRAME_FIELDS[1])


@dataclass
class Case:
    model: Path  # the CPU model
    options: list  # CLI options it needs (labels)
    images: list  # image files the model finds something in
    video: Path  # those images as a video, for the camera


def _save(folder: Path, name: str, pixels: np.ndarray) -> Path:
    from PIL import Image

    path = folder / name
    Image.fromarray(pixels).save(path)
    return path


def _square(channel: int, cell: int, size: int = 64) -> np.ndarray:
    """The detection models' world: black, with one pure-colour cell of their 4x4 grid."""
    a = np.zeros((size, size, 3), np.uint8)
    r, c = divmod(cell, 4)
    step = size // 4
    a[r * step:(r + 1) * step, c * step:(c + 1) * step, channel] = 255
    return a


def _video(path: Path, image: Path, frames: int = 12) -> Path:
    import cv2

    bgr = cv2.resize(cv2.imread(str(image)), (320, 240), interpolation=cv2.INTER_NEAREST)
    return make_video(path, [bgr] * frames, fps=15)


@pytest.fixture(scope="module")
def pool(tiny_model, tmp_path_factory) -> dict:
    """The suite's tiny models, each with images it finds something in, its CLI options (labels)
    and a video of its first image: a classifier, an SSD detector, a YOLO export (detect's second
    family, tests/fixtures/yolo), MoveNet-shaped pose and DeepLab-shaped segmentation models."""
    folder = tmp_path_factory.mktemp("contract")
    det = detection_models.build(tmp_path_factory)
    ps = pm.build(tmp_path_factory)
    # plain_tf2 ends in plain TF ops (static output shapes), so its stand-in build keeps them
    entries = {
        "classifier": (tiny_model, [], make_images(folder, CLASSES, size=32, seed=5, name="c{i}")),
        "ssd": (det["plain_tf2"], ["--labels", det["labels"]],
                [_save(folder, f"d{i}.png", _square(i % 3, 5 + i)) for i in range(3)]),
        "yolo": (YOLO / "yolov8_256_full_integer_quant.tflite", [],
                 sorted((YOLO / "images").glob("*.png"))[:3]),
        "pose": (ps["pose"], [], [_save(folder, f"p{i}.png", pm.uniform_image(rgb, (96, 64)))
                                  for i, rgb in enumerate([(200, 60, 230), (120, 200, 250),
                                                           (30, 90, 240)])]),
        "segmenter": (ps["seg"], [], [_save(folder, f"s{i}.png", pm.quadrants((120 + 8 * i, 90)))
                                      for i in range(3)]),
    }
    return {name: Case(Path(model), [str(o) for o in options], images,
                       _video(folder / f"{name}.avi", images[0]))
            for name, (model, options, images) in entries.items()}


@pytest.fixture(scope="module")
def cases(pool) -> dict:
    """task -> the pool's models its `plan` takes (at least one each)."""
    import edgeapp
    from edgeapp.errors import InvalidModel

    found: dict = {}
    for name in TASKS:
        for case in pool.values():
            try:
                edgeapp.open_model(case.model, "cpu", task=name).close()
            except InvalidModel:
                continue
            found.setdefault(name, []).append(case)
        assert found.get(name), f"no model of the suite's pool is for task {name}: add one to `pool`"
    return found


def records(text: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def comparable(recs: list) -> list:
    """Records without what legitimately differs between runs: where and how fast."""
    return [{k: v for k, v in r.items() if k not in ("device", "model", "latency_ms")} for r in recs]


def test_the_registry_knows_every_task_module():
    on_disk = {p.stem for p in Path(tasks.__file__).parent.glob("*.py")} - {"__init__", "base", "model"}
    assert set(TASKS) == on_disk
    internal = {p.stem for p in (Path(tasks.__file__).parent / "internal").glob("*.py")} - {"__init__"}
    assert set(tasks.internal_names()) == internal
    for name in TASKS:
        kind = tasks.kind(name)
        assert kind.name == name and kind.field and kind.columns and kind.events in ("top", "presence")
        assert set(kind.defaults) == set(kind.settle())


@pytest.mark.parametrize("task", TASKS)
def test_results_are_worded_counted_and_drawn_empty_or_full(task, cases):
    for case in cases[task]:
        _results_are_worded_counted_and_drawn_empty_or_full(task, case)


def _results_are_worded_counted_and_drawn_empty_or_full(task, case):
    import edgeapp

    with edgeapp.open_model(case.model, "cpu", task=task) as model:
        full = model.result(case.images[0])  # a real result, with its extras
    kind = tasks.kind(task)
    empty = Result(kind.empty())
    assert set(empty.fields) == set(full.fields) and kind.items(full.fields)
    layout = Layout(kind)
    for result in (empty, full, Result(full.fields)):  # full without its extras: another process's
        record = {"path": "x.png", "device": "cpu", "model": "m", **result.fields, "latency_ms": 1.0,
                  "error": None}
        assert isinstance(kind.summary_text(result.fields), str)
        for row in layout.rows(record):
            assert set(row) <= set(layout.columns)
        assert layout.table_line(record).startswith("x.png  ")
        img = np.zeros((90, 120, 3), np.uint8)
        kind.draw(img, result.fields, result.extras)
        assert img.any() or not kind.items(result.fields), "a result is drawn"
        kind.top(result.fields) if kind.events == "top" else kind.presence(result.fields)
    if kind.events == "presence":
        assert kind.presence(full.fields) and not kind.presence(empty.fields)
    else:
        assert kind.top(full.fields) is not None and kind.top(empty.fields) is None


@pytest.mark.parametrize("task", TASKS)
def test_batch_and_camera_records_have_the_same_fields(task, cases, cli):
    for case in cases[task]:
        _batch_and_camera_records_have_the_same_fields(task, case, cli)


def _batch_and_camera_records_have_the_same_fields(task, case, cli):
    batch = cli(task, case.model, case.images[0], "-f", "jsonl", *case.options)
    assert batch.exit_code == 0, batch.stderr
    cam = cli("camera", case.model, "--source", case.video, "--no-display", "--max-frames", "2",
              "-f", "jsonl", *case.options)
    assert cam.exit_code == 0, cam.stderr
    (b,), c = records(batch.stdout), records(cam.stdout)
    assert len(c) == 2
    assert set(b) - BATCH_KEYS == set(c[0]) - FRAME_KEYS == set(tasks.kind(task).empty())
    batch_csv = cli(task, case.model, case.images[0], "-f", "csv", *case.options)
    cam_csv = cli("camera", case.model, "--source", case.video, "--no-display", "--max-frames", "1",
                  "-f", "csv", *case.options)
    b_cols = next(csv.reader(io.StringIO(batch_csv.stdout)))
    c_cols = next(csv.reader(io.StringIO(cam_csv.stdout)))
    assert [x for x in b_cols if x not in BATCH_KEYS] == [x for x in c_cols if x not in FRAME_KEYS]


@pytest.mark.parametrize("task", TASKS)
def test_live_view_serves_each_tasks_overlay(task, cases):
    for case in cases[task]:
        _live_view_serves_each_tasks_overlay(task, case)


def _live_view_serves_each_tasks_overlay(task, case):
    with CameraProc(case.model, "--source", case.video, "--drop-frames", "--no-display",
                    "--serve", "127.0.0.1:0", "--duration", "60", *case.options) as cam:
        url = cam.url()
        end, jpeg = time.monotonic() + 30, b""
        while not jpeg.startswith(b"\xff\xd8") and time.monotonic() < end:
            try:
                jpeg = urllib.request.urlopen(url + "snapshot.jpg", timeout=10).read()
            except OSError:  # 503 until the first frame
                time.sleep(0.1)
        stats = json.loads(urllib.request.urlopen(url + "stats", timeout=10).read())
        cam.stop()
    assert jpeg.startswith(b"\xff\xd8"), cam.stderr
    assert stats["task"] == task and stats["results"] and "Traceback" not in cam.stderr
    assert "Exception in thread" not in cam.stderr


@pytest.mark.parametrize("task", TASKS)
def test_mqtt_events_mean_something_for_each_task(task, cases, cli, tmp_path):
    for case in cases[task]:
        _mqtt_events_mean_something_for_each_task(task, case, cli, tmp_path)


def _mqtt_events_mean_something_for_each_task(task, case, cli, tmp_path):
    from mqtt_broker import Broker, Subscriber

    (tmp_path / case.model.stem).mkdir()
    broker = Broker(tmp_path / case.model.stem).start()
    sub = Subscriber(broker.port, f"{task}/#")
    try:
        r = cli("camera", case.model, "--source", case.video, "--no-display", "--mqtt",
                broker.url(task), "--mqtt-mode", "events", "--mqtt-debounce", "0", "--summary",
                "json", *case.options)
        assert r.exit_code == 0, r.stderr
        summary = json.loads(r.stderr.strip().splitlines()[-1])
        assert summary["mqtt"]["events"] >= 1  # a constant scene: its content appears once
        sub.wait(lambda: sub.on(f"{task}/events"), 20, "an event")
        event = sub.json_on(f"{task}/events")[0]
        assert event["event"] in ("change", "appear") and event["label"] is not None
    finally:
        sub.close()
        broker.kill()


@pytest.mark.parametrize("task", TASKS)
def test_every_way_of_running_gives_the_same_records(task, cases, cli, tpus, tmp_path):
    for case in cases[task]:
        _every_way_of_running_gives_the_same_records(task, case, cli, tpus, tmp_path)


def _every_way_of_running_gives_the_same_records(task, case, cli, tpus, tmp_path):
    import edgeapp

    paths = [str(p) for p in case.images]
    plain = cli(task, case.model, *paths, "-f", "jsonl", "--device", "cpu", *case.options)
    assert plain.exit_code == 0, plain.stderr
    expected = comparable(records(plain.stdout))
    assert len(expected) == len(paths) and all(r["error"] is None for r in expected)
    labels = {"labels": case.options[1]} if case.options else {}
    with edgeapp.open_model(case.model, "cpu", task=task, **labels) as model:
        assert comparable(list(model.batch(paths))) == expected
    cluster = cli(task, case.model, *paths, "-f", "jsonl", "--device", "cpu", "--cluster", "local:2",
                  "--chunk-size", "1", *case.options)
    assert cluster.exit_code == 0, cluster.stderr
    assert comparable(records(cluster.stdout)) == expected

    # on stand-in Edge TPUs: one, every one, and through the API
    tpus("usb,usb")
    twin = tmp_path / f"{case.model.stem}.tflite"
    twin.write_bytes(Path(case.model).read_bytes())
    sidecar = Path(case.model).with_suffix(".json")
    if sidecar.is_file():
        twin.with_suffix(".json").write_bytes(sidecar.read_bytes())
    compiled = make_edgetpu_stand_in(twin, tmp_path / f"{case.model.stem}_edgetpu.tflite")
    one = cli(task, compiled, *paths, "-f", "jsonl", "--device", "usb:0", *case.options)
    assert one.exit_code == 0, one.stderr
    on_one = comparable(records(one.stdout))
    every = cli(task, compiled, *paths, "-f", "jsonl", "--device", "all", *case.options)
    assert every.exit_code == 0, every.stderr
    assert comparable(records(every.stdout)) == on_one
    assert {r["device"] for r in records(every.stdout)} <= {"usb:0", "usb:1"}
    with edgeapp.open_model(compiled, "all", task=task, **labels) as model:
        assert model.where == "usb:0, usb:1"
        assert comparable(list(model.batch(paths))) == on_one


@pytest.mark.parametrize("task", TASKS)
def test_decode_for_every_task(task, cases, cli, tmp_path):
    for case in cases[task]:
        _decode_for_every_task(task, case, cli, tmp_path)


def _decode_for_every_task(task, case, cli, tmp_path):
    """--decode (scaled: JPEGs at the smallest DCT scale the input needs, or full) is one of the
    shared options: every task takes it, finds the same things in a large photo of
    the same scene either way, and places them on the whole photo (boxes in its pixels)."""
    from PIL import Image

    small = Image.open(case.images[0]).convert("RGB")
    big = tmp_path / f"big_{case.model.stem}.jpg"
    small.resize((small.width * 8, small.height * 8), Image.NEAREST).save(big, quality=95)
    full = cli(task, case.model, big, "-f", "jsonl", "--decode", "full", *case.options)
    scaled = cli(task, case.model, big, "-f", "jsonl", "--decode", "scaled", *case.options)
    assert full.exit_code == 0 and scaled.exit_code == 0, full.stderr + scaled.stderr
    (a,), (b,) = records(full.stdout), records(scaled.stdout)
    kind = tasks.kind(task)
    if kind.events == "top":
        assert kind.top(a)[0] == kind.top(b)[0]
    else:
        assert set(kind.presence(a)) == set(kind.presence(b)) != set()
    def best(record):  # each class's best object: the order of close scores may differ
        found = {}
        for it in kind.items(record):
            if "bbox" in it and it["score"] > found.get(it["id"], {"score": -1})["score"]:
                found[it["id"]] = it
        return found

    for cls, x in best(a).items():  # the same box on the photo, give or take the decode
        assert np.allclose(x["bbox"], best(b)[cls]["bbox"], atol=0.05 * max(small.size) * 8)


@pytest.mark.parametrize("task", TASKS)
def test_the_api_gives_the_commands_results_at_their_defaults(task, cases, cli):
    """The API takes each task's defaults from the task, as the command does: the same fields
    for one image (`run`, `model.<task>()`) and for a batch, for every decoder (SSD and YOLO)."""
    for case in cases[task]:
        _api_gives_the_commands_results(task, case, cli)


def _api_gives_the_commands_results(task, case, cli):
    import edgeapp

    paths = [str(p) for p in case.images]
    r = cli(task, case.model, *paths, "-f", "jsonl", "--device", "cpu", *case.options)
    assert r.exit_code == 0, r.stderr
    expected = comparable(records(r.stdout))
    kind = tasks.kind(task)
    fields = [{k: rec[k] for k in kind.empty()} for rec in expected]
    labels = {"labels": case.options[1]} if case.options else {}
    with edgeapp.open_model(case.model, "cpu", task=task, **labels) as model:
        assert [model.run(p) for p in paths] == fields
        np.testing.assert_equal([getattr(model, task)(p) for p in paths],
                                [kind.api_value(model.result(p)) for p in paths])
        assert comparable(list(getattr(model, f"{task}_batch")(paths))) == expected
    with edgeapp.open_model(case.model, "cpu", **labels) as model:  # the task guessed
        assert model.task == task or kind.guess_rank > tasks.kind(model.task).guess_rank
