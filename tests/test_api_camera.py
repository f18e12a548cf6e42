"""The camera run from the Python API: `Model.camera` is the flow `edgeapp camera` runs, with the
same records, the same sinks (a results file, MQTT) and an outcome instead of an exit code."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from media import CLASSES, make_video

import edgeapp
from edgeapp.errors import DeviceUnavailable, UsageError


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    """9 frames of the tiny classifier's colours in turn."""
    return make_video(tmp_path_factory.mktemp("api_camera") / "v.avi", [CLASSES[i % 3] for i in range(9)],
                      fps=15, seed=4, marked=True)


def comparable(records: list) -> list:
    return [{k: v for k, v in r.items() if k not in ("latency_ms", "frame_ms", "timestamp", "device")}
            for r in records]


def test_model_camera_gives_the_commands_records(cli, tiny_model, video, tmp_path):
    r = cli("camera", tiny_model, "--source", video, "--no-display", "-f", "jsonl", "-k", "2")
    assert r.exit_code == 0, r.stderr
    expected = comparable([json.loads(ln) for ln in r.stdout.splitlines()])
    got, out = [], tmp_path / "frames.jsonl"
    with edgeapp.open_model(tiny_model, "cpu") as model:
        outcome = model.camera(video, on_record=got.append, output=out, top_k=2)
    assert outcome.error is None and outcome.stats.processed == 9 and outcome.task == "classify"
    assert comparable(got) == expected
    assert comparable([json.loads(ln) for ln in out.read_text().splitlines()]) == expected


def test_model_camera_reports_failures_as_an_outcome(tiny_model, tmp_path):
    with edgeapp.open_model(tiny_model, "cpu") as model:
        with pytest.raises(UsageError, match="unknown option"):
            model.camera(tmp_path / "none.avi", decoder="ssd")  # not a classify option
        empty = tmp_path / "empty.avi"
        empty.write_bytes(b"")
        with pytest.raises(DeviceUnavailable):
            model.camera(empty)


def test_model_camera_stops_when_told(tiny_model, video):
    stop = threading.Event()
    seen = []

    def on_record(record: dict) -> None:
        seen.append(record)
        stop.set()

    with edgeapp.open_model(tiny_model, "cpu") as model:
        outcome = model.camera(video, on_record=on_record, stop=stop)
    assert outcome.stats.stop == "stopped" and 1 <= len(seen) < 9 and outcome.error is None
