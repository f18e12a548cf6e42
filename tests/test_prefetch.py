"""Preparing inputs ahead on threads (execution/runner.prefetch): input order, errors in their turn,
a bounded window, the caller's own help, and no thread left behind."""

import random
import threading
import time

import pytest

from edgeapp.errors import InputError
from edgeapp.execution.runner import prefetch

MODES = [(0, False), (0, True), (1, False), (1, True), (3, False), (3, True)]


def slow_square(i):
    time.sleep(random.random() * 0.002)
    if i == 5:
        raise InputError("image 5 is bad")
    return i * i


@pytest.mark.parametrize("workers,caller_helps", MODES)
@pytest.mark.parametrize("count", [0, 1, 2, 40])
def test_results_come_back_in_input_order(workers, caller_helps, count):
    out = list(prefetch(range(count), slow_square, workers, caller_helps=caller_helps))
    assert [item for item, _ in out] == list(range(count))
    for item, result in out:
        assert isinstance(result, InputError) if item == 5 else result == item * item


@pytest.mark.parametrize("workers,caller_helps", MODES)
def test_an_error_is_raised_at_its_turn_after_the_results_before_it(workers, caller_helps):
    def fails_at_seven(i):
        time.sleep(random.random() * 0.001)
        if i == 7:
            raise ValueError("seven")
        return i

    seen = []
    with pytest.raises(ValueError, match="seven"):
        for item, _ in prefetch(range(30), fails_at_seven, workers, caller_helps=caller_helps):
            seen.append(item)
    assert seen == list(range(7))


def test_an_error_reading_the_inputs_reaches_the_caller():
    def inputs():
        yield 1
        yield 2
        raise OSError("stdin went away")

    got = []
    with pytest.raises(OSError, match="stdin went away"):
        for item, _ in prefetch(inputs(), lambda x: x, 2):
            got.append(item)
    assert got == [1, 2]


@pytest.mark.parametrize("workers,caller_helps", [(2, False), (1, True), (3, True)])
def test_no_more_than_depth_inputs_are_taken_ahead(workers, caller_helps):
    lock, state = threading.Lock(), {"started": 0, "handed": 0, "ahead": 0}

    def prepare(i):
        with lock:
            state["started"] += 1
            state["ahead"] = max(state["ahead"], state["started"] - state["handed"])
        time.sleep(0.001)
        return i

    for _ in prefetch(range(60), prepare, workers, depth=3, caller_helps=caller_helps):
        with lock:
            state["handed"] += 1
        time.sleep(0.002)  # a slow consumer: the workers run into the window
    assert 1 <= state["ahead"] <= 3


def test_the_caller_prepares_while_it_would_wait():
    names = set()

    def prepare(i):
        names.add(threading.current_thread().name)
        time.sleep(0.002)
        return i

    assert [i for i, _ in prefetch(range(20), prepare, 1, caller_helps=True)] == list(range(20))
    assert threading.current_thread().name in names and "edgeapp-prep" in names
    names.clear()
    assert [i for i, _ in prefetch(range(20), prepare, 1)] == list(range(20))
    assert names == {"edgeapp-prep"}


@pytest.mark.parametrize("workers,caller_helps", [(2, False), (1, True)])
def test_stopping_early_leaves_no_thread(workers, caller_helps):
    before = set(threading.enumerate())
    feed = prefetch(range(1000), slow_square, workers, caller_helps=caller_helps)
    next(feed)
    next(feed)
    feed.close()
    assert not [t for t in set(threading.enumerate()) - before if t.name == "edgeapp-prep"]
