"""The engine in a worker process (hw/worker/), through the real worker on the CPU (--isolate)
and on the stand-in Edge TPU: a worker killed (SIGKILL) or stopped (SIGSTOP, a hung invoke)
during a batch and during a camera video is replaced, every input gets exactly one record, equal
to a clean run's; the recovery ladder's hardware steps (injected operations) and the CPU twin
taking over and handing back.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import make_edgetpu_stand_in
from media import CLASSES, make_images, make_video
from worker_procs import only_worker, set_aside_earlier_workers, without_timing, workers_of, workers_of_this_process

from edgeapp.flows.batch import iter_records
from edgeapp.flows.camera.loop import run_camera
from edgeapp.flows.open_task import Placement, open_task
from edgeapp.hw.capture import OpenCVSource
from edgeapp.hw.recovery import HardwareOps, NotApplicable, ladder, usb_place
from edgeapp.hw.runtime import EngineOptions
from edgeapp.hw.worker import events
from edgeapp.hw.worker.engine import IsolatedEngine
from edgeapp.hw.worker.events import LOST, RECOVERED, Tally

MODEL = Path(__file__).resolve().parent.parent / "models" / "digits_int8.tflite"
GUARD = 120.0  # seconds: a generous bound on waiting for something that must happen


@pytest.fixture(autouse=True)
def _only_this_tests_workers():
    set_aside_earlier_workers()


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> list:
    folder = tmp_path_factory.mktemp("photos")
    return [str(p) for p in make_images(folder, [CLASSES[i % 3] for i in range(60)], size=32, seed=3)]


def isolated(**more) -> Placement:
    return Placement("cpu", EngineOptions(isolate=True, invoke_timeout=more.pop("timeout", 3.0), **more))


def records(paths: list, place: Placement, at: dict = None) -> list:
    """The batch's records; `at` {record number: what to do before taking it}."""
    out = []
    with open_task(MODEL, "classify", place) as opened:
        for i, record in enumerate(iter_records(paths, opened.runner, opened.task, workers=0)):
            out.append(record)
            if at and i + 1 in at:
                at[i + 1]()
    return out


def test_a_killed_and_a_stopped_worker_lose_no_record(photos):
    clean = records(photos, Placement("cpu", EngineOptions(isolate=False)))
    tally, seen = Tally(), []
    with events.listening(tally):
        got = records(photos, isolated(), {
            10: lambda: (seen.append(only_worker()), os.kill(seen[-1], signal.SIGKILL)),
            30: lambda: (seen.append(only_worker()), os.kill(seen[-1], signal.SIGSTOP)),
            45: lambda: seen.append(only_worker())})
    assert [r["path"] for r in got] == photos  # one record per input, in order
    assert [without_timing(r) for r in got] == [without_timing(r) for r in clean]
    assert len(set(seen)) == 3  # each fault ended the worker and a new one took over
    lost = [e for e in tally.events if e.event == LOST]
    assert [e.cause for e in lost] == ["crash", "hang"]
    assert [e.step for e in tally.events if e.event == RECOVERED] == ["restart", "restart"]
    assert not workers_of_this_process()  # closing the run ended its worker


def test_camera_video_keeps_going_through_a_killed_and_a_stopped_worker(tmp_path):
    video = make_video(tmp_path / "digits.avi", [CLASSES[(i // 5) % 3] for i in range(40)],
                       size=(64, 48), seed=2)

    def run(place: Placement, faults: dict) -> list:
        got: list = []

        def on_record(record: dict) -> None:
            got.append(record)
            if len(got) in faults:
                os.kill(only_worker(), faults[len(got)])

        with open_task(MODEL, "classify", place, frames=True) as opened:
            stats = run_camera(OpenCVSource(str(video)), opened.runner, drop=False,
                               on_record=on_record, kind=opened.task.kind)
        assert stats.stop == "end of stream"
        return got

    clean = run(Placement("cpu", EngineOptions(isolate=False)), {})
    tally = Tally()
    with events.listening(tally):
        got = run(isolated(), {8: signal.SIGKILL, 20: signal.SIGSTOP})
    assert [r["frame"] for r in got] == list(range(40))
    assert [without_timing(r) for r in got] == [without_timing(r) for r in clean]
    assert sorted(e.cause for e in tally.events if e.event == LOST) == ["crash", "hang"]
    assert tally.recovered == 2 and tally.outage_seconds > 0


def test_recover_none_ends_the_worker_and_says_the_device_failed(photos):
    from edgeapp.errors import DeviceFailed

    with pytest.raises(DeviceFailed, match="--recover none"):
        records(photos, isolated(recover="none"), {5: lambda: os.kill(only_worker(), signal.SIGKILL)})
    assert not workers_of_this_process()


def test_engines_of_one_tpu_share_one_worker(standin_model, tpus):
    from edgeapp.hw.runtime import open_engine

    tpus("usb")
    first = open_engine(standin_model, "usb:0")
    second = open_engine(standin_model, "usb:0")
    try:
        assert first.pid == second.pid and len(workers_of_this_process()) == 1
        x = np.zeros(first.input_shape, first.input_dtype)
        assert all((a == b).all() for a, b in zip(first.run(x), second.run(x)))
        first.close()
        assert second.run(x)  # the other engine still has its worker
    finally:
        second.close()
    assert not workers_of_this_process()


def test_a_worker_given_up_is_replaced_by_the_next_open(standin_model, tpus):
    """What --reconnect does after --recover none: the model opened again on the device gets a
    new worker, which the old engine's closing leaves alone."""
    from edgeapp.errors import DeviceFailed
    from edgeapp.hw.runtime import open_engine

    tpus("usb")
    first = open_engine(standin_model, "usb:0", EngineOptions(recover="none"))
    x = np.zeros(first.input_shape, first.input_dtype)
    os.kill(first.pid, signal.SIGKILL)
    with pytest.raises(DeviceFailed, match="--recover none"):
        first.run(x)
    second = open_engine(standin_model, "usb:0", EngineOptions(recover="none"))
    first.close()
    try:
        assert second.run(x) and workers_of_this_process() == [second.pid]
    finally:
        second.close()
    assert not workers_of_this_process()


# -- the ladder and the CPU twin on the stand-in Edge TPU ---------------------------------------

@pytest.fixture(scope="module")
def standin_model(tmp_path_factory) -> Path:
    """A compiled-looking build of the digits model whose CPU twin is the digits model itself."""
    folder = tmp_path_factory.mktemp("compiled")
    twin = folder / "digits_int8.tflite"
    twin.write_bytes(MODEL.read_bytes())
    return make_edgetpu_stand_in(twin, folder / "digits_int8_edgetpu.tflite")


class PluggedBackBy:
    """Hardware operations that record each step and bring the stand-in device back (the next
    worker sees it) when `step` is done."""

    def __init__(self, step: str, monkeypatch, devices: str = "usb") -> None:
        self.step, self.done, self.mp, self.devices = step, [], monkeypatch, devices

    def apply(self, step: str, device: str) -> str:
        self.done.append((step, device))
        if step == self.step:
            self.mp.setenv("FAKE_EDGETPU_DEVICES", self.devices)
            self.mp.delenv("FAKE_EDGETPU_FAIL", raising=False)
        return step


def open_standin(model: Path, device: str, ops, **options):
    from edgeapp.hw.runtime import open_engine
    from edgeapp.hw.worker.engine import open_isolated  # noqa: F401 - the engine open_engine returns

    engine = open_engine(model, device, EngineOptions(isolate=True, **options))
    engine.supervisor.ops = ops  # the extension point: the ladder's hardware operations
    return engine


def test_a_device_gone_is_brought_back_by_a_usb_reset(standin_model, tpus, monkeypatch):
    tpus("usb", fail="usb:0@3")
    ops = PluggedBackBy("reset", monkeypatch)
    engine = open_standin(standin_model, "usb:0", ops)
    monkeypatch.setenv("FAKE_EDGETPU_DEVICES", "none")  # the next worker finds no device
    tally = Tally()
    x = np.arange(int(np.prod(engine.input_shape)), dtype=np.uint8).reshape(engine.input_shape)
    try:
        with events.listening(tally):
            outputs = [engine.run(x) for _ in range(6)]
    finally:
        engine.close()
    assert all((o[0] == outputs[0][0]).all() for o in outputs)  # the same answer after recovery
    assert ops.done == [("reset", "usb:0")]
    assert [(e.event, e.cause, e.step) for e in tally.events] == [
        (LOST, "error", None), (LOST, "gone", "restart"), (RECOVERED, "error", "reset")]


def test_the_cpu_twin_takes_over_and_hands_back(standin_model, tpus, monkeypatch):
    tpus("usb", fail="usb:0@2")
    ops = PluggedBackBy("never", monkeypatch)
    engine = open_standin(standin_model, "auto", ops, recover="reset", retry_tpu=1.0)
    monkeypatch.setenv("FAKE_EDGETPU_DEVICES", "none")
    tally = Tally()
    x = np.zeros(engine.input_shape, engine.input_dtype)
    names = []
    try:
        with events.listening(tally):
            for _ in range(4):
                engine.run(x)
                names.append(engine.name)
            assert names[-1] == "cpu" and engine.model_path.endswith("digits_int8.tflite")
            monkeypatch.setenv("FAKE_EDGETPU_DEVICES", "usb")  # plugged back in
            monkeypatch.delenv("FAKE_EDGETPU_FAIL")
            end = time.monotonic() + GUARD
            while engine.name == "cpu" and time.monotonic() < end:
                engine.run(x)
            names.append(engine.name)
    finally:
        engine.close()
    assert names[:2] == ["edgetpu", "edgetpu"] and names[-1] == "edgetpu"
    assert ops.done == [("reset", "edgetpu")]
    steps = [e.step for e in tally.events if e.event == RECOVERED]
    assert steps == ["cpu twin", "hand-back"]


def test_the_ladder_climbs_as_far_as_recover_allows():
    assert ladder("none", "usb:0") == [] and ladder("restart", "usb:0") == []
    assert ladder("reset", "usb:0") == ["reset"]
    assert ladder("power", "usb:1") == ladder("all", "usb:1") == ["reset", "power"]
    assert ladder("all", "pci:0") == ["rescan"]
    assert ladder("all", "cpu") == []


def test_hardware_steps_act_on_the_device_found_under_the_root(tmp_path):
    usb = tmp_path / "sys/bus/usb/devices/2-1.3"
    usb.mkdir(parents=True)
    for name, value in {"idVendor": "18d1", "idProduct": "9302", "busnum": "2", "devnum": "7"}.items():
        (usb / name).write_text(value + "\n")
    place = usb_place("usb:0", tmp_path)
    assert (place.node, place.hub, place.port) == ("/dev/bus/usb/002/007", "2-1", "3")
    node = tmp_path / "dev/bus/usb/002/007"
    node.parent.mkdir(parents=True)
    node.write_bytes(b"")  # not a USB device node: the ioctl is refused, the step does not apply
    with pytest.raises(NotApplicable, match="USBDEVFS_RESET"):
        HardwareOps(tmp_path).usb_reset("usb:0")
    card = tmp_path / "sys/bus/pci/devices/0000:01:00.0"
    card.mkdir(parents=True)
    (card / "vendor").write_text("0x1ac1\n")
    (card / "device").write_text("0x089a\n")
    assert "0000:01:00.0" in HardwareOps(tmp_path).pci_rescan("pci:0")
    assert (card / "remove").read_text() == "1" and (tmp_path / "sys/bus/pci/rescan").read_text() == "1"
    with pytest.raises(NotApplicable):
        HardwareOps(tmp_path).pci_rescan("pci:1")


def test_engine_of_a_runner_is_the_isolated_engine(photos):
    with open_task(MODEL, "classify", isolated()) as opened:
        assert isinstance(opened.runner.engine, IsolatedEngine)


def test_the_camera_command_tells_the_outage_in_its_events_and_summary(tmp_path):
    """`edgeapp camera --isolate` on an endless stream: its worker killed from outside, the run
    goes on; --events has the outage and the recovery, the summary counts them."""
    from camera_proc import CameraProc, StreamServer

    events_file = tmp_path / "events.jsonl"
    with StreamServer(fps=20) as stream, CameraProc(
            MODEL, "--source", stream.url, "--device", "cpu", "--isolate", "--no-display",
            "--events", events_file, "--summary", "json", "-o", tmp_path / "frames.jsonl") as cam:
        end = time.monotonic() + GUARD
        frames = tmp_path / "frames.jsonl"
        while not (frames.exists() and frames.read_text().count("\n") >= 3) and time.monotonic() < end:
            time.sleep(0.1)  # running: the worker answers
        os.kill(workers_of(cam.proc.pid)[0], signal.SIGKILL)
        while "engine_recovered" not in (events_file.read_text() if events_file.exists() else "") \
                and time.monotonic() < end:
            time.sleep(0.1)
        assert cam.stop() == 0, cam.stderr
        summary = cam.summary()
    told = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert [(e["event"], e["cause"], e["step"]) for e in told] == [
        ("engine_lost", "crash", None), ("engine_recovered", "crash", "restart")]
    assert summary["engine"]["engine_lost"] == 1 and summary["engine"]["engine_recovered"] == 1
    assert summary["frames_processed"] > 0


def test_a_replaced_worker_keeps_the_deadline_its_model_measured(tmp_path):
    """The start-up deadline (watchdog.START_S) is for a model never run on its device: the worker
    that replaces a killed one, and the model opened again later, start from the latencies
    measured already, so a hang right after a restart is noticed as fast as any other."""
    from edgeapp.hw.runtime import open_engine
    from edgeapp.hw.worker.watchdog import START_S, WARM_UP

    model = tmp_path / MODEL.name  # a file of its own: no latencies measured before this test
    model.write_bytes(MODEL.read_bytes())
    options = EngineOptions(isolate=True)  # no --invoke-timeout: the deadline is measured
    engine = open_engine(model, "cpu", options)
    x = np.zeros(engine.input_shape, engine.input_dtype)
    try:
        deadline = engine.supervisor.models[engine.number].deadline
        assert deadline.seconds == START_S
        for _ in range(WARM_UP):
            engine.run(x)
        assert deadline.seconds < START_S
        os.kill(engine.pid, signal.SIGKILL)
        engine.run(x)  # on the new worker
        assert engine.supervisor.models[engine.number].deadline.seconds < START_S
    finally:
        engine.close()
    again = open_engine(model, "cpu", options)
    try:
        assert again.supervisor.models[again.number].deadline.seconds < START_S
    finally:
        again.close()


def test_the_camera_counts_a_worker_stopped_while_the_model_opens(tmp_path):
    """The camera listens to its engine once the model is open: a worker stopped in its start
    (before that) is replaced, and the outage is still in --events and the summary."""
    from camera_proc import CameraProc, StreamServer

    events_file = tmp_path / "events.jsonl"
    with StreamServer(fps=20) as stream, CameraProc(
            MODEL, "--source", stream.url, "--device", "cpu", "--isolate", "--no-display",
            "--events", events_file, "--summary", "json", "-o", tmp_path / "frames.jsonl") as cam:
        end = time.monotonic() + GUARD
        found: list = []
        while not found and time.monotonic() < end:
            found = workers_of(cam.proc.pid)
            time.sleep(0.005)
        os.kill(found[0], signal.SIGSTOP)  # a worker starts in ~0.5 s: this lands in its start
        frames = tmp_path / "frames.jsonl"
        while not (frames.exists() and frames.read_text().count("\n") >= 3) and time.monotonic() < end:
            time.sleep(0.1)
        assert cam.stop() == 0, cam.stderr
        summary = cam.summary()
    told = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert [(e["event"], e["cause"], e["step"]) for e in told] == [
        ("engine_lost", "hang", None), ("engine_recovered", "hang", "restart")]
    first_frame = json.loads(frames.read_text().splitlines()[0])
    assert told[1]["at"] <= first_frame["timestamp"] + 0.01  # while it opened, before any frame ran
    assert summary["engine"]["engine_lost"] == 1 and summary["engine"]["engine_recovered"] == 1
    assert summary["frames_processed"] > 0


def test_bench_counts_a_lost_worker_and_says_its_latencies_include_the_recovery():
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "edgeapp", "bench", str(MODEL), "--device", "cpu", "--isolate",
           "--duration", "3", "--format", "json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + GUARD
        found: list = []
        while not found and proc.poll() is None and time.monotonic() < end:
            found = workers_of(proc.pid)
            time.sleep(0.05)
        time.sleep(1.0)  # in its timed runs
        os.kill(found[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=GUARD)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["engine"]["engine_lost"] == 1 and doc["engine"]["engine_recovered"] == 1, doc.get("engine")
    assert any("latencies include the recovery" in note for note in doc["notes"]), doc["notes"]
    assert doc["results"][0]["available"]
