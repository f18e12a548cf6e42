"""The runners' common face (`Runner`), one device in the caller's thread (`SingleRunner`), and
a result (`Done`).

Every runner takes (key, payload) items and hands back (key, Done) in input order; a payload of
None (an input that failed before inference) passes through as (key, None) in its place.
`run_all(items, prepare)` is a batch's whole feed: inputs prepared ahead on threads, then
invoked, one result per input in input order; a runner changes only its policy for it
(execution/parallel.CpuPool: the thread that prepared an input also invokes it).
Several Edge TPUs side by side are execution/parallel.py, segment pipelines
execution/pipeline.py; execution/placement.py opens the right one for a model and --device.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Tuple

from edgeapp.errors import DeviceFailed, InputError
from edgeapp.execution.prefetch import prefetch
from edgeapp.execution.reconnect import Reconnect

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


def invoke(engine, payload):
    return engine.run(payload)


def engine_of(member):
    """Members are engines, or per-device objects holding one (camera tasks)."""
    return member if hasattr(member, "interpreter") else member.engine


def member_name(member) -> str:
    return engine_of(member).name


class Runner:
    """The common face of the runners: `engine` describes the model's inputs and outputs.

    Three ways to feed one: `run_all(items, prepare)` for a batch (preparing ahead included),
    `imap(items)` for a stream of payloads, or `submit` while `has_room` and `next_done` for a
    loop that must stay in control between results (the camera).
    """

    engine: Any
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

    def __init__(self, member, *, work: Callable = invoke, fallback: Optional[Callable] = None,
                 on_notice: Optional[Notice] = None, meta_path: Optional[str] = None,
                 reconnect: Optional[Reconnect] = None) -> None:
        super().__init__()
        self.member, self._work, self._fallback, self._say = member, work, fallback, on_notice
        self._reconnect = reconnect
        self.engine = engine = engine_of(member)
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
                    self.member, self.engine = back, engine_of(back)
                    continue
                if self._fallback is None:
                    raise
                self.failures.append((e.device, str(e)))
                self.member, self._fallback = self._fallback(), None
                self.engine = engine_of(self.member)
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
