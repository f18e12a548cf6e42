"""One-thread CPU workers (a batch's replicas on the CPU with --isolate), two or more, are each
kept on a core of their own, every thread of them, and a worker that replaces one is kept on the
same core: left to the scheduler, their wake-ups often share a core while the other idles. A
lone one, and a worker a model of several threads joins, float."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from worker_procs import set_aside_earlier_workers, workers_of_this_process

from edgeapp.execution.placement import open_runner
from edgeapp.hw.runtime import EngineOptions, open_engine

MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models",
                     "digits_int8.tflite")
ISOLATED = EngineOptions(isolate=True)

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="needs Linux and at least 2 usable cores")


@pytest.fixture(autouse=True)
def _only_this_tests_workers():
    set_aside_earlier_workers()


def cores_of(pid: int) -> set:
    """The cores every thread of `pid` may run on (one set when they agree)."""
    found = {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}
    assert len(found) == 1, found
    return set(next(iter(found)))


def test_cpu_replicas_are_each_kept_on_their_own_core():
    runner = open_runner(MODEL, "cpu", ISOLATED, cpu_replicas=2)
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
    engines = [open_engine(MODEL, "cpu", ISOLATED, threads=1) for _ in range(2)]
    try:
        engine = engines[0]
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
        for e in engines:
            e.close()


def test_a_lone_worker_and_one_a_model_of_several_threads_joins_float():
    everywhere = os.sched_getaffinity(0)
    lone = open_engine(MODEL, "cpu", ISOLATED, threads=1)
    try:
        assert cores_of(lone.pid) == everywhere
        second = open_engine(MODEL, "cpu", ISOLATED, threads=1)
        try:
            assert len(cores_of(lone.pid)) == 1 and len(cores_of(second.pid)) == 1
            joining = open_engine(MODEL, "cpu", ISOLATED, threads=2)  # joins the first worker
            try:
                assert joining.pid == lone.pid
                assert cores_of(lone.pid) == everywhere
            finally:
                joining.close()
        finally:
            second.close()
    finally:
        lone.close()
