"""The runners' common face (`Runner`), one device in the caller's thread (`SingleRunner`), and
a result (`Done`).

Every runner takes (key, payload) items and hands back (key, Done) in input order; a payload of
None (an input that failed before inference) passes through as (key, None) in its place.
`run_all(items, prepare)` is a batch's whole feed: inputs prepared ahead on threads (`prefetch`,
below), then invoked, one result per input in input order; a runner changes only its policy for
it (execution/parallel.CpuPool: the thread that prepared an input also invokes it).
Several Edge TPUs side by side are execution/parallel.py, segment pipelines
execution/pipeline.py; execution/placement.py opens the right one for a model and --device.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, Optional, Tuple, TypeVar, Union

from edgeapp.errors import DeviceFailed, InputError
from edgeapp.execution.reconnect import Reconnect
from edgeapp.hw.runtime import run_payload

if TYPE_CHECKING:
    import numpy as np

    from edgeapp.core.vision.tiles import Tiles
    from edgeapp.hw.runtime import Engine

Notice = Callable[[str], None]
# prepare(item) -> (payload for the device, what interpreting the result needs besides it)
Prepare = Callable[[Any], Tuple[Any, Any]]


@dataclass
class Done:
    """One result: what the work returned (raw outputs), the device that ran it, and how long
    the device took (ms)."""

    outputs: Any
    device: str
    latency_ms: float
    model: Optional[str] = None  # the model file that ran, when not the runner's (a CPU twin)


class Raised:
    """An exception travelling from a worker thread to the caller's thread."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def invoke(engine: Engine, payload: Union[np.ndarray, Tiles]) -> Any:
    """The model run on one payload: one input tensor, or the windows of one image (Tiles), each
    in turn on the same engine, their outputs handed back as a list."""
    return run_payload(engine, payload)


class Runner:
    """The common face of the runners: `engine` describes the model's inputs and outputs.

    Three ways to feed one: `run_all(items, prepare)` for a batch (preparing ahead included),
    `imap(items)` for a stream of payloads, or `submit` while `has_room` and `next_done` for a
    loop that must stay in control between results (the camera).
    """

    engine: Engine  # a pipeline's: its segments seen as one model (execution/pipeline.PipelineView)
    label: str  # where it runs, for summaries: "cpu", "usb:0, usb:1", ...
    model_path: str  # what records name as the model
    meta_path: str  # where labels and normalization are looked up (the sidecar's model)
    window: int = 1  # items in flight at most

    def __init__(self) -> None:
        self.counts: collections.Counter = collections.Counter()  # results per device
        self.failures: list[tuple[str, str]] = []  # (device, reason), once per device

    @property
    def pending(self) -> int:
        raise NotImplementedError

    @property
    def has_room(self) -> bool:
        return self.pending < self.window

    def submit(self, key, payload) -> None:
        raise NotImplementedError

    def next_done(self, timeout: Optional[float] = None) -> Optional[Tuple[Any, Done]]:
        """The oldest submitted item's (key, Done), or None if it is not done within `timeout`."""
        raise NotImplementedError

    def run_all(self, items: Iterable, prepare: Prepare, workers: int = 2
                ) -> Iterator[Tuple[Any, Any, Optional[Done]]]:
        """(item, context, Done) per item, in input order: `prepare(item)` gives (payload,
        context) and runs `workers` items ahead on threads while the device works; an item whose
        `prepare` raised InputError comes back as (item, that error, None) and the rest go on.
        """
        def payloads() -> Iterator[Tuple[Tuple[Any, Any], Any]]:
            for item, got in prefetch(items, prepare, workers):
                if isinstance(got, InputError):
                    yield (item, got), None
                else:
                    yield (item, got[1]), got[0]

        for (item, context), done in self.imap(payloads()):
            yield item, context, done

    def imap(self, items: Iterable[Tuple[Any, Any]]) -> Iterator[Tuple[Any, Optional[Done]]]:
        """(key, Done) per (key, payload), in order; a None payload comes back as (key, None)."""
        order: collections.deque = collections.deque()  # keys; _SKIP marks a None payload
        it = iter(items)
        exhausted = False
        while True:
            while not exhausted and self.has_room and len(order) < 4 * self.window:
                nxt = next(it, _END)
                if nxt is _END:
                    exhausted = True
                    break
                key, payload = nxt
                if payload is None:
                    order.append((_SKIP, key))
                else:
                    self.submit(key, payload)
                    order.append((None, key))
            if not order:
                return
            mark, key = order.popleft()
            if mark is _SKIP:
                yield key, None
                continue
            result = None
            while result is None:
                result = self.next_done(timeout=0.2)  # a timeout keeps Ctrl-C responsive
            yield result

    def close(self) -> None:
        pass

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_END, _SKIP = object(), object()


class SingleRunner(Runner):
    """One engine in the caller's thread (today's path). With a fallback (`auto`), an Edge TPU
    that fails hands the rest of the run, the failed item first, to the CPU twin."""

    def __init__(self, member: Engine, *, work: Callable = invoke, fallback: Optional[Callable] = None,
                 on_notice: Optional[Notice] = None, meta_path: Optional[str] = None,
                 reconnect: Optional[Reconnect] = None) -> None:
        super().__init__()
        self.member, self._work, self._fallback, self._say = member, work, fallback, on_notice
        self._reconnect = reconnect
        self.engine: Engine = member
        engine = member
        self.label = engine.name
        self.model_path = engine.model_path
        self.meta_path = meta_path or engine.requested_model
        self._queued: collections.deque = collections.deque()

    def run(self, payload) -> Done:
        while True:
            t0 = time.perf_counter()
            try:
                out = self._work(self.member, payload)
            except DeviceFailed as e:
                back = self._reconnect.wait(self.engine.name, e, self.member) if self._reconnect else None
                if back is not None:
                    self.member = self.engine = back
                    continue
                if self._fallback is None:
                    raise
                self.failures.append((e.device, str(e)))
                self.member, self._fallback = self._fallback(), None
                self.engine = self.member
                self.label = f"{self.label}, then {self.engine.name}"
                if self._say:
                    self._say(f"{e}; no Edge TPU left: {self.engine.notice or 'running on CPU'} "
                              "for the rest")
                continue
            done = Done(out, self.engine.name, (time.perf_counter() - t0) * 1000.0,
                        self.engine.model_path)
            self.counts[done.device] += 1
            if self._reconnect is not None:
                self._reconnect.succeeded(done.device)
            return done

    @property
    def pending(self) -> int:
        return len(self._queued)

    def submit(self, key, payload) -> None:
        self._queued.append((key, payload))

    def next_done(self, timeout=None):
        if not self._queued:
            return None
        key, payload = self._queued.popleft()
        return key, self.run(payload)

# --- preparing ahead ----------------------------------------------------------------------------
# Pillow releases the GIL while decoding and resizing, so a few threads prepare the next inputs
# while the one interpreter runs on the current one; results come back in input order. Where
# preparing is the whole job of a core (on the CPU, the thread that decodes an image also invokes
# it: execution/parallel.CpuPool.run_all), the consuming thread prepares too (`caller_helps`):
# instead of sleeping until the next result is ready it takes the next input itself, so N cores
# need N threads, not N + 1 handing work to each other (scripts/bench_host.py measures it).

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
            if isinstance(result, Raised):
                raise result.error
            yield item, result
    finally:
        feed.stop()
        for t in threads:
            t.join(timeout=5.0)  # each finishes the input it holds; a hung one cannot block us


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
            result = Raised(e)
        except BaseException as e:  # Ctrl-C in the caller's own input: at once
            if caller:
                raise
            result = Raised(e)
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
