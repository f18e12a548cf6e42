"""Overlap input preparation (decode, resize) with inference.

Pillow releases the GIL while decoding and resizing, so a few threads prepare the next inputs
while the one interpreter runs on the current one. Results come back in input order.

Where preparing is the whole job of a core (on the CPU, the thread that decodes an image also
invokes it: execution/parallel.CpuPool.run_all), the consuming thread prepares too (`caller_helps`): instead of
sleeping until the next result is ready it takes the next input itself, so N cores need N
threads, not N + 1 handing work to each other (scripts/bench_host.py measures the difference).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple, TypeVar, Union

from edgeapp.errors import InputError

T = TypeVar("T")
R = TypeVar("R")


def prefetch(items: Iterable[T], prepare: Callable[[T], R], workers: int = 2,
             depth: int = 0, caller_helps: bool = False) -> Iterator[tuple[T, Union[R, InputError]]]:
    """Yield (item, prepare(item)) in order, preparing up to `depth` items ahead on `workers`
    threads (and in the caller's thread while it waits, with `caller_helps`).

    An InputError from `prepare` is yielded in place of the result, so one bad input never
    stops the batch; any other error is raised in the caller at its item's turn. With
    workers=0 and no help from the caller, everything runs in the caller's thread, in turn.
    """
    if workers <= 0 and not caller_helps:
        for item in items:
            yield item, _call(prepare, item)
        return
    total = max(0, workers) + (1 if caller_helps else 0)
    feed = _Feed(iter(items), prepare, depth or 2 * total)
    threads = [threading.Thread(target=feed.work, daemon=True, name="edgeapp-prep")
               for _ in range(max(0, workers))]
    for t in threads:
        t.start()
    try:
        while True:
            got = feed.next_ready(caller_helps)
            if got is None:
                return
            item, result = got
            if isinstance(result, _Raised):
                raise result.error
            yield item, result
    finally:
        feed.stop()
        for t in threads:
            t.join(timeout=5.0)  # each finishes the input it holds; a hung one cannot block us


class _Raised:
    """An error of `prepare` (other than InputError), raised in the caller at its item's turn."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Feed:
    """Inputs taken in order by whichever thread is free, results handed back in order; at most
    `depth` inputs are taken beyond the last one handed back."""

    def __init__(self, items: Iterator, prepare: Callable, depth: int) -> None:
        self.items, self.prepare, self.depth = items, prepare, max(1, depth)
        self.cond = threading.Condition()
        self.ready: Dict[int, Tuple[Any, Any]] = {}
        self.taken = self.handed = 0
        self.ended = self.stopped = False
        self.working = 0  # inputs taken whose result is not in `ready` yet
        self.failed: Optional[BaseException] = None  # what reading the inputs raised

    def _take(self) -> Optional[Tuple[int, Any]]:
        """(index, item) of the next input, or None at the end. Holds `cond`."""
        if self.ended or self.stopped or self.taken - self.handed >= self.depth:
            return None
        try:
            item = next(self.items, _END)
        except Exception as e:  # noqa: BLE001 - the inputs' own error, raised in the caller
            item, self.failed = _END, e
        if item is _END:
            self.ended = True
            self.cond.notify_all()
            return None
        self.taken += 1
        self.working += 1
        return self.taken - 1, item

    def _run(self, index: int, item: Any, caller: bool = False) -> None:
        try:
            result: Any = _call(self.prepare, item)
        except Exception as e:  # noqa: BLE001 - raised in the caller, in order
            result = _Raised(e)
        except BaseException as e:  # Ctrl-C in the caller's own input: at once
            if caller:
                raise
            result = _Raised(e)
        with self.cond:
            self.ready[index] = (item, result)
            self.working -= 1
            if index == self.handed:
                self.cond.notify_all()

    def work(self) -> None:
        """A worker thread: take, prepare, hand in, until the inputs end or the caller stops."""
        while True:
            with self.cond:
                got = self._take()
                while got is None and not (self.ended or self.stopped):
                    self.cond.wait()
                    got = self._take()
            if got is None:
                return
            self._run(*got)

    def next_ready(self, help_out: bool) -> Optional[Tuple[Any, Any]]:
        """The next result in order (None at the end); while it is not ready, the caller
        prepares the next input itself (`help_out`) or waits."""
        while True:
            with self.cond:
                if self.handed in self.ready:
                    self.handed += 1
                    self.cond.notify_all()  # room in the window for the workers
                    return self.ready.pop(self.handed - 1)
                if self.ended and self.working == 0 and self.handed == self.taken:
                    if self.failed is not None:
                        raise self.failed
                    return None
                got = self._take() if help_out else None
                if got is None:
                    if not (self.ended and self.working == 0):  # else: the end, seen above
                        self.cond.wait()
                    continue
            self._run(*got, caller=True)

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()


_END = object()


def _call(prepare: Callable[[T], R], item: T) -> Union[R, InputError]:
    try:
        return prepare(item)
    except InputError as e:
        return e
