"""Several models in one worker (hw/worker/), through the real worker process on the CPU
(--isolate) and on the stand-in Edge TPU: a cascade's detector and classifier share one worker
and give the records of the in-process cascade, also when that worker is killed in the middle of
the run (the new worker reopens both models); a model closed leaves the other running; the CPU
twin of each model takes over when the Edge TPU does not come back.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, make_edgetpu_stand_in
from eval_sets import shapes_set
from worker_procs import only_worker, set_aside_earlier_workers, without_timing, workers_of_this_process

from edgeapp.flows.batch import iter_records
from edgeapp.flows.open_task import Placement, open_task
from edgeapp.hw.runtime import EngineOptions, open_engine
from edgeapp.hw.worker import events
from edgeapp.hw.worker.events import LOST, RECOVERED, Tally

DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"
CLASSIFIER = ROOT / "models" / "digits_int8.tflite"  # any classifier: the crops' classes are compared


@pytest.fixture(autouse=True)
def _only_this_tests_workers():
    set_aside_earlier_workers()


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> list:
    found = shapes_set(tmp_path_factory.mktemp("worker_cascade"), count=16, sizes=((160, 128),))
    return sorted(str(p) for p in found["images"].iterdir())


def isolated() -> Placement:
    return Placement("cpu", EngineOptions(isolate=True, invoke_timeout=5.0))


def cascade_records(images: list, place: Placement, after_detector=None) -> list:
    """The cascade's records (detect, then classify each box's crop); `after_detector(i)` runs
    between the detector and the classifier of the i-th image."""
    out = []
    with open_task(DETECTOR, "detect", place, options={"then": f"classify:{CLASSIFIER}"}) as opened:
        cascade = opened.with_cascade()
        assert cascade is not None
        count = [0]

        def hook(path, prepared, result):
            if after_detector is not None:
                after_detector(count[0])
            count[0] += 1
            return cascade(path, prepared, result)

        for record in iter_records(images, opened.runner, opened.task, workers=0, on_result=hook):
            out.append(record)
        if place.engine.isolate:
            pids = {opened.engine.pid, opened.cascade.opened.engine.pid}
            assert pids == set(workers_of_this_process()) and len(pids) == 1  # both models, one worker
    return out


def test_a_cascade_in_a_worker_has_one_worker_and_the_records_of_the_in_process_one(shapes):
    clean = cascade_records(shapes, Placement("cpu", EngineOptions(isolate=False)))
    assert sum(len(r["objects"]) for r in clean) >= 8
    assert all(o.get("classes") for r in clean for o in r["objects"])  # every box was classified
    got = cascade_records(shapes, isolated())
    assert [without_timing(r) for r in got] == [without_timing(r) for r in clean]
    assert not workers_of_this_process()  # closing the run ended its worker


def test_a_worker_killed_during_a_cascade_is_replaced_with_both_models(shapes):
    clean = cascade_records(shapes, Placement("cpu", EngineOptions(isolate=False)))
    killed: list = []

    def kill(i: int) -> None:
        if i in (3, 9):  # the detector's input ran; the classifier's crops are lost and run again
            killed.append(only_worker())
            os.kill(killed[-1], signal.SIGKILL)

    tally = Tally()
    with events.listening(tally):
        got = cascade_records(shapes, isolated(), kill)
    assert [r["path"] for r in got] == shapes  # one record per input, in order
    assert [without_timing(r) for r in got] == [without_timing(r) for r in clean]
    assert len(set(killed)) == 2
    # once per worker, not once per model in it
    assert [(e.event, e.cause, e.step) for e in tally.events] == [
        (LOST, "crash", None), (RECOVERED, "crash", "restart")] * 2


def test_a_model_closed_leaves_the_other_running_in_the_same_worker():
    options = EngineOptions(isolate=True, invoke_timeout=5.0)
    first = open_engine(DETECTOR, "cpu", options)
    second = open_engine(CLASSIFIER, "cpu", options)
    replica = open_engine(CLASSIFIER, "cpu", options)  # the same model again: side by side
    try:
        assert first.pid == second.pid != replica.pid
        assert sorted(workers_of_this_process()) == sorted({first.pid, replica.pid})
        x = np.zeros(second.input_shape, second.input_dtype)
        before = second.run(x)
        first.close()
        after = second.run(x)
        assert all((a == b).all() for a, b in zip(before, after))
        assert second.pid in workers_of_this_process()
        os.kill(second.pid, signal.SIGKILL)  # the new worker opens only the model still open
        assert all((a == b).all() for a, b in zip(before, second.run(x)))
    finally:
        for engine in (first, second, replica):
            engine.close()
    assert not workers_of_this_process()


@pytest.fixture(scope="module")
def two_compiled(tmp_path_factory) -> list:
    """Two compiled-looking models, each with its own CPU twin beside it."""
    out = []
    for name in ("first", "second"):
        folder = tmp_path_factory.mktemp(name)
        twin = folder / f"{name}.tflite"
        twin.write_bytes(CLASSIFIER.read_bytes())
        out.append(make_edgetpu_stand_in(twin, folder / f"{name}_edgetpu.tflite"))
    return out


class NothingBringsItBack:
    def __init__(self) -> None:
        self.done: list = []

    def apply(self, step: str, device: str) -> str:
        self.done.append((step, device))
        return step


def test_each_model_of_a_lost_edge_tpu_gets_its_own_cpu_twin(two_compiled, tpus, monkeypatch):
    tpus("usb")
    options = EngineOptions(isolate=True, retry_tpu=600.0)
    engines = [open_engine(path, "auto", options) for path in two_compiled]
    engines[0].supervisor.ops = ops = NothingBringsItBack()  # the extension point: the ladder's operations
    tally = Tally()
    try:
        assert engines[0].pid == engines[1].pid and len(workers_of_this_process()) == 1
        assert [e.name for e in engines] == ["edgetpu", "edgetpu"]
        x = np.zeros(engines[0].input_shape, engines[0].input_dtype)
        monkeypatch.setenv("FAKE_EDGETPU_DEVICES", "none")  # gone, and no worker finds it again
        with events.listening(tally):
            os.kill(engines[0].pid, signal.SIGKILL)
            for engine in engines:
                assert engine.run(x)
        assert [e.name for e in engines] == ["cpu", "cpu"]
        assert [Path(e.model_path).name for e in engines] == ["first.tflite", "second.tflite"]
    finally:
        for engine in engines:
            engine.close()
    assert ops.done == [("reset", "edgetpu")]
    assert [e.step for e in tally.events if e.event == RECOVERED] == ["cpu twin"]
    assert not workers_of_this_process()


def test_a_model_on_the_cpu_beside_the_edge_tpu_is_reopened_on_the_cpu(two_compiled, tpus):
    """`auto`: a compiled model runs on the Edge TPU, a plain one beside it on the CPU, in the
    same worker; the new worker after a crash opens each where it ran."""
    tpus("usb")
    options = EngineOptions(isolate=True)
    engines = [open_engine(two_compiled[0], "auto", options), open_engine(CLASSIFIER, "auto", options)]
    tally = Tally()
    try:
        assert engines[0].pid == engines[1].pid
        assert [e.name for e in engines] == ["edgetpu", "cpu"]
        x = np.zeros(engines[1].input_shape, engines[1].input_dtype)
        before = engines[1].run(x)
        with events.listening(tally):
            os.kill(engines[0].pid, signal.SIGKILL)
            after = engines[1].run(x)
        assert all((a == b).all() for a, b in zip(before, after))
        assert [e.name for e in engines] == ["edgetpu", "cpu"]
        assert [e.step for e in tally.events if e.event == RECOVERED] == ["restart"]
    finally:
        for engine in engines:
            engine.close()


def test_pipelines_sharing_a_worker_take_turns_in_the_order_they_asked():
    import threading
    import time

    from edgeapp.hw.worker.supervisor import FifoLock

    lock, order, threads = FifoLock(), [], []

    def pipeline(name: str) -> None:
        with lock:
            order.append(name)

    with lock:
        with lock:  # the holder may take it again (an engine collected while it runs)
            pass
        for name in "abcd":
            threads.append(threading.Thread(target=pipeline, args=(name,)))
            threads[-1].start()
            end = time.monotonic() + 60
            while len(lock._waiting) < len(threads) and time.monotonic() < end:
                time.sleep(0.001)  # queued before the next one asks
        assert not order
    for t in threads:
        t.join(60)
    assert order == list("abcd")
