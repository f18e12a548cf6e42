"""A worker killed or stopped while it starts (before its first model is open) is replaced
once, as a worker lost later is: the run goes on, and the outage is told, in the run's summary
too (the run listens only once the model is open)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from media import CLASSES, make_images
from worker_procs import set_aside_earlier_workers, workers_of_this_process

from edgeapp.flows.batch import run_batch
from edgeapp.flows.open_task import Placement, open_task
from edgeapp.hw.runtime import EngineOptions, open_engine
from edgeapp.hw.worker import events
from edgeapp.hw.worker.events import LOST, RECOVERED, Tally
from edgeapp.sinks.records import Format, Layout

MODEL = Path(__file__).resolve().parent.parent / "models" / "digits_int8.tflite"


@pytest.fixture(autouse=True)
def _only_this_tests_workers():
    set_aside_earlier_workers()
    yield


def open_hitting_its_start(sig: int, open_it: Callable[[], object]) -> tuple:
    """`open_it()` in a thread, its first worker sent `sig` as soon as it appears (a worker
    starts in ~0.5 s: this lands in its start): what it opened (or raised), and the pid hit."""
    opened: dict = {}

    def run() -> None:
        try:
            opened["it"] = open_it()
        except Exception as e:  # the test's assertion says what happened
            opened["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    hit = None
    until = time.monotonic() + 60
    while hit is None and thread.is_alive() and time.monotonic() < until:
        found = workers_of_this_process()
        if found:
            hit = found[0]
            os.kill(hit, sig)
        time.sleep(0.005)
    thread.join(90)
    assert hit is not None and "error" not in opened, opened
    return opened["it"], hit


@pytest.mark.parametrize("sig, cause", [(signal.SIGKILL, "crash"), (signal.SIGSTOP, "hang")],
                         ids=["killed", "stopped"])
def test_a_worker_lost_while_it_starts_is_replaced_and_told(sig, cause):
    tally = Tally()
    with events.listening(tally):
        engine, hit = open_hitting_its_start(
            sig, lambda: open_engine(MODEL, "cpu", EngineOptions(isolate=True)))
        try:
            assert engine.pid != hit
            # the new worker was started by the opening thread, which has ended: it lives on
            out = engine.run(np.zeros(engine.input_shape, engine.input_dtype))
            assert out and out[0].size == 10
        finally:
            engine.close()
    assert [(e.event, e.cause, e.step) for e in tally.events] == [
        (LOST, cause, None), (RECOVERED, cause, "restart")]


def test_an_outage_while_the_model_opens_is_in_the_batchs_summary(tmp_path):
    images = make_images(tmp_path / "images", [CLASSES[i % 3] for i in range(6)], size=32)
    opened, _ = open_hitting_its_start(signal.SIGKILL, lambda: open_task(
        MODEL, None, Placement("cpu", EngineOptions(isolate=True))))
    out = tmp_path / "records.jsonl"
    with opened:
        assert [(e.event, e.cause) for e in opened.engine_events] == [(LOST, "crash"), (RECOVERED, "crash")]
        with Layout(opened.task.kind).writer(Format.jsonl, out) as writer:
            stats = run_batch([str(p) for p in images], opened.runner, opened.task, writer,
                              opening_events=opened.engine_events)
    assert stats.ok == len(images) and stats.failed == 0
    assert len(out.read_text().splitlines()) == len(images)
    summary = stats.engine.summary()
    assert summary["engine_lost"] == 1 and summary["engine_recovered"] == 1
    assert summary["causes"] == {"crash": 1} and summary["steps"] == {"restart": 1}


SCRIPT = r"""
import os, sys, threading, time
import numpy as np
from edgeapp.hw.runtime import EngineOptions, open_engine
from edgeapp.hw.worker import events
from edgeapp.hw.worker.events import Tally

MODEL = sys.argv[1]

def open_and_run(n=5):
    engine = open_engine(MODEL, "cpu", EngineOptions(isolate=True))
    try:
        for _ in range(n):
            engine.run(np.zeros(engine.input_shape, engine.input_dtype))
            time.sleep(0.05)
    finally:
        engine.close()

# a worker started from a thread (through the thread that starts workers)
t = threading.Thread(target=open_and_run)
t.start(); t.join()

# a forked child starts its own from a thread: it gets its own starting thread
pid = os.fork()
if pid == 0:
    t = threading.Thread(target=open_and_run)
    t.start(); t.join(60)
    os._exit(3 if t.is_alive() else 0)
until = time.monotonic() + 60
while time.monotonic() < until:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    sys.exit("the forked child did not start its worker")
if status != 0:
    sys.exit(f"the forked child ended with {status}")

# the main thread returns while a thread still runs its worker: nothing is lost
tally = Tally()
def last():
    with events.listening(tally):
        open_and_run(20)
    print("outages", len(tally.events), flush=True)
threading.Thread(target=last).start()
"""


def test_workers_started_from_threads_outlive_them_in_forks_and_after_the_main_thread(tmp_path):
    """Workers die with the thread that started them (PR_SET_PDEATHSIG): they are started from a
    thread that lasts as long as the process, a forked child's from its own, and that thread
    still starts and keeps them once the main thread has returned."""
    import subprocess
    import sys

    script = tmp_path / "threads.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(MODEL)], capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["outages", "0"], (done.stdout, done.stderr)
