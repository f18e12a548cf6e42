"""One-thread CPU workers (a batch's replicas on the CPU with --isolate) are each kept on a
core of their own, and a worker that replaces one is kept on the same core: left to the
scheduler, their wake-ups often share a core while the other idles."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from worker_procs import set_aside_earlier_workers, workers_of_this_process

from edgeapp.execution.placement import open_runner
from edgeapp.hw.runtime import EngineOptions, open_engine
from edgeapp.hw.worker.engine import IsolatedEngine

MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models",
                     "digits_int8.tflite")

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="needs Linux and at least 2 usable cores")


@pytest.fixture(autouse=True)
def _only_this_tests_workers():
    set_aside_earlier_workers()


def cores_of(pid: int) -> set:
    return os.sched_getaffinity(pid)


def test_cpu_replicas_are_each_kept_on_their_own_core():
    runner = open_runner(MODEL, "cpu", EngineOptions(isolate=True), cpu_replicas=2)
    try:
        pids = workers_of_this_process()
        assert len(pids) == 2, pids
        pinned = [cores_of(pid) for pid in pids]
        assert all(len(c) == 1 for c in pinned), pinned
        assert pinned[0] != pinned[1]
        assert pinned[0] | pinned[1] <= os.sched_getaffinity(0)
    finally:
        runner.close()


def test_a_replaced_worker_is_kept_on_the_same_core():
    engine = open_engine(MODEL, "cpu", EngineOptions(isolate=True), threads=1)
    assert isinstance(engine, IsolatedEngine)
    try:
        first = engine.pid
        core = cores_of(first)
        assert len(core) == 1
        zeros = np.zeros(engine.input_shape, engine.input_dtype)
        engine.run(zeros)
        os.kill(first, signal.SIGKILL)
        engine.run(zeros)  # the lost invoke runs again on a new worker
        assert engine.pid != first
        assert cores_of(engine.pid) == core
    finally:
        engine.close()


def test_a_worker_of_several_threads_floats():
    engine = open_engine(MODEL, "cpu", EngineOptions(isolate=True), threads=2)
    try:
        assert cores_of(engine.pid) == os.sched_getaffinity(0)
    finally:
        engine.close()
