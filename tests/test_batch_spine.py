"""The batch's one spine (execution/runner.Runner.run_all, flows/batch.py): every input comes
back once, in input order, whatever the runner; a CPU pool invokes an input on the thread
that prepared it. Real one-thread interpreters of the suite's tiny model, fed through the
runners' own extension points (`work`, the members)."""

import threading

import numpy as np
import pytest

from edgeapp.errors import InputError
from edgeapp.execution.parallel import CpuPool, DevicePool
from edgeapp.execution.runner import SingleRunner, invoke
from edgeapp.hw.runtime import open_engine


@pytest.fixture(scope="module")
def engines(tiny_model):
    return [open_engine(tiny_model, "cpu", threads=1) for _ in range(2)]


def _tensor(engine, i):
    shape = tuple(int(d) for d in engine.input_shape)
    return np.full(shape, i % 200, dtype=engine.input_dtype)


def _runners(engines, work):
    return {"single": lambda: SingleRunner(engines[0], work=work),
            "devices": lambda: DevicePool(engines, work=work),
            "cpu pool": lambda: CpuPool(engines, work=work)}


@pytest.mark.parametrize("name", ["single", "devices", "cpu pool"])
@pytest.mark.parametrize("workers", [0, 1, 2, 4])
def test_every_input_once_in_order_bad_ones_in_their_place(engines, name, workers):
    def prepare(i):
        if i % 7 == 3:
            raise InputError(f"input {i} is bad")
        return _tensor(engines[0], i), ("context", i)

    runner = _runners(engines, invoke)[name]()
    with runner:
        got = list(runner.run_all(range(50), prepare, workers))
    assert [item for item, _, _ in got] == list(range(50))
    for item, context, done in got:
        if item % 7 == 3:
            assert isinstance(context, InputError) and str(item) in str(context) and done is None
        else:
            assert context == ("context", item)
            # the interpreter really ran this input: the same output as a direct invoke
            expected = engines[0].run(_tensor(engines[0], item))
            assert np.array_equal(done.outputs[0], expected[0])
    assert sum(runner.counts.values()) == len([i for i in range(50) if i % 7 != 3])


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_cpu_pool_invokes_on_the_thread_that_prepared(engines, workers):
    """CpuPool's policy: no hand-off; the caller's thread is one of the preparing threads."""
    def work(member, payload):
        invoke(member, payload)
        return threading.get_ident()

    def prepare(i):
        return _tensor(engines[0], i), threading.get_ident()

    with CpuPool(engines, work=work) as pool:
        got = list(pool.run_all(range(40), prepare, workers))
    assert [item for item, _, _ in got] == list(range(40))
    assert all(done.outputs == prepared_on for _, prepared_on, done in got)
    threads = {prepared_on for _, prepared_on, _ in got}
    assert len(threads) <= workers  # workers - 1 helpers and the caller, no more
    if workers == 1:
        assert threads == {threading.get_ident()}


def test_other_runners_invoke_off_the_preparing_threads(engines):
    """A DevicePool's own threads invoke (one per device): the policy CpuPool overrides."""
    def work(member, payload):
        invoke(member, payload)
        return threading.current_thread().name

    with DevicePool(engines, work=work) as pool:
        got = list(pool.run_all(range(20), lambda i: (_tensor(engines[0], i), i), 2))
    assert {done.outputs for _, _, done in got} <= {f"edgeapp-{e.name}" for e in engines}


def test_records_in_order_once_each_through_a_pool(engines, tiny_model, tmp_path):
    """flows/batch: records of a folder with bad files among good ones, through a CPU pool,
    each path once, in input order, and the same records as one interpreter gives."""
    from PIL import Image

    from edgeapp.flows.batch import iter_records
    from edgeapp.tasks.base import bind
    from edgeapp.tasks.model import image_model

    paths = []
    rng = np.random.default_rng(0)
    for i in range(30):
        p = tmp_path / f"{i:02d}.{'jpg' if i % 2 else 'png'}"
        if i % 9 == 4:
            p.write_bytes(b"not an image")
        else:
            Image.fromarray(rng.integers(0, 255, (40, 60, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))
    task = bind("classify", image_model(engines[0], tiny_model))

    def records(runner):
        with runner:
            return [{k: v for k, v in r.items() if k not in ("latency_ms", "device")}
                    for r in iter_records(paths, runner, task, 3)]

    pooled = records(CpuPool(engines))
    single = records(SingleRunner(engines[0]))
    assert [r["path"] for r in pooled] == paths
    assert pooled == single
    assert [r["error"] is not None for r in pooled] == [i % 9 == 4 for i in range(30)]
