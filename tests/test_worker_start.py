"""A worker killed while it starts (before its first model is open) is replaced once, as a
worker killed later is: the run goes on and the outage is told."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from worker_procs import set_aside_earlier_workers, workers_of_this_process

from edgeapp.hw.runtime import EngineOptions, open_engine
from edgeapp.hw.worker import events
from edgeapp.hw.worker.events import LOST, RECOVERED, Tally

MODEL = Path(__file__).resolve().parent.parent / "models" / "digits_int8.tflite"


@pytest.fixture(autouse=True)
def _only_this_tests_workers():
    set_aside_earlier_workers()
    yield


def test_a_worker_killed_while_it_starts_is_replaced_and_told():
    opened: dict = {}

    def open_it() -> None:
        try:
            opened["engine"] = open_engine(MODEL, "cpu", EngineOptions(isolate=True))
        except Exception as e:  # the test's assertion below says what happened
            opened["error"] = e

    tally = Tally()
    with events.listening(tally):
        thread = threading.Thread(target=open_it)
        thread.start()
        killed = None
        until = time.monotonic() + 60
        while killed is None and thread.is_alive() and time.monotonic() < until:
            found = workers_of_this_process()
            if found:
                killed = found[0]
                os.kill(killed, signal.SIGKILL)  # a worker starts in ~0.5 s: this lands in its start
            time.sleep(0.005)
        thread.join(60)
    assert killed is not None and "error" not in opened, opened
    engine = opened["engine"]
    try:
        assert engine.pid != killed
        out = engine.run(np.zeros(engine.input_shape, engine.input_dtype))
        assert out and out[0].size == 10
    finally:
        engine.close()
    assert [(e.event, e.cause, e.step) for e in tally.events] == [
        (LOST, "crash", None), (RECOVERED, "crash", "restart")]
