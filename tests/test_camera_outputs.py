"""What a camera run's outputs decide: a recording's folder is made like every other output's,
and a video file whose results did not all reach the MQTT broker is a failure (exit 3, with the
count), said at the end; a broker that never answered is named."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import pytest
from media import CLASSES, make_video

from edgeapp.errors import ExitCode


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    """6 frames of the tiny classifier's colours in turn."""
    return make_video(tmp_path_factory.mktemp("outputs") / "v.avi", [CLASSES[i % 3] for i in range(6)],
                      fps=15, seed=4, marked=True)


def test_record_makes_its_folder(cli, tiny_model, video, tmp_path):
    out = tmp_path / "rec" / "today" / "run.mp4"
    r = cli("camera", tiny_model, "--source", video, "--no-display", "--record", out, "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    cap = cv2.VideoCapture(str(out))
    assert cap.isOpened() and int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == 6
    cap.release()


def test_record_with_a_name_opencv_cannot_write_says_so_before_the_run(cli, tiny_model, video,
                                                                       tmp_path):
    r = cli("camera", tiny_model, "--source", video, "--no-display", "--record", tmp_path / "r.gif")
    assert r.exit_code == ExitCode.USAGE and "name the video .mp4 or .avi" in r.stderr
    assert r.stdout == "" and "frame(s) captured" not in r.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = cli("camera", tiny_model, "--source", video, "--no-display", "--record", blocker / "r.mp4")
    assert r.exit_code == ExitCode.USAGE and f"{blocker} is a file, not a folder" in r.stderr


def test_a_file_whose_results_never_reached_the_broker_fails(cli, tiny_model, video):
    pytest.importorskip("paho.mqtt")
    r = cli("camera", tiny_model, "--source", video, "--no-display", "--max-frames", "5",
            "--mqtt", "mqtt://127.0.0.1:1/x")
    assert r.exit_code == ExitCode.INPUTS_FAILED, r.stderr
    lines = r.stderr.splitlines()
    assert any("5 of 5 message(s)" in ln and "not delivered" in ln for ln in lines), r.stderr
    assert any("never answered" in ln for ln in lines), r.stderr
    assert "5 processed" in lines[-1] and "mqtt: 0 published, 5 dropped" in lines[-1]


def test_a_file_whose_results_all_reached_the_broker_succeeds(cli, tiny_model, video, tmp_path):
    from mqtt_broker import Broker, Subscriber

    broker = Broker(tmp_path).start()
    sub = Subscriber(broker.port, "ok/#")
    try:
        r = cli("camera", tiny_model, "--source", video, "--no-display", "--mqtt", broker.url("ok"))
        assert r.exit_code == 0, r.stderr
        assert "mqtt: 6 published, 0 dropped" in r.stderr.splitlines()[-1]
        assert "never answered" not in r.stderr
        sub.wait(lambda: len(sub.on("ok/frames")) == 6, 20, "every frame")
    finally:
        sub.close()
        broker.kill()


def test_the_json_summary_goes_to_its_own_file_apart_from_the_notices(cli, tiny_model, video, tmp_path):
    """--summary json on stderr shares it with every notice: --summary-file gives it a file
    that holds the one JSON object and nothing else."""
    out = tmp_path / "runs" / "summary.json"
    r = cli("camera", tiny_model, "--source", video, "--no-display", "-f", "jsonl", "--summary", "json",
            "--summary-file", out)
    assert r.exit_code == 0, r.stderr
    summary = json.loads(out.read_text())
    assert summary["frames_processed"] == 6 and summary["stop"] == "end of stream"
    assert not any(line.startswith("{") for line in r.stderr.splitlines())
    assert len(r.stdout.splitlines()) == 6  # the records stay on stdout
