"""Several Edge TPUs side by side: data parallelism over devices (`DevicePool`).

Data parallelism (`DevicePool`): one interpreter per TPU, each driven by its own thread, all
taking work from one queue, so a faster TPU simply takes more. The TFLite runtime releases the
GIL while it invokes, so N TPUs really work at once. A TPU that fails mid-run (unplugged,
delegate error) puts the item it held back at the head of the queue, is reported once, and
takes nothing with it. When no TPU is left, the CPU twin takes the rest if the user allowed it
(`auto`); otherwise the run stops with DeviceUnavailable once every result before the lost
items has been handed back, so `--resume` finishes the job. With a `Reconnect`
(execution/reconnect.py, `--reconnect SECONDS`), a failed TPU is first waited for: the others
go on meanwhile, and only when it does not come back is it lost as above.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, List, Optional, Tuple

from edgeapp.errors import DeviceFailed, DeviceUnavailable, EdgeappError, InputError
from edgeapp.execution.reconnect import Reconnect
from edgeapp.execution.runner import (
    Done,
    Notice,
    Prepare,
    Raised,
    Runner,
    invoke,
    prefetch,
)

if TYPE_CHECKING:
    from edgeapp.hw.runtime import TfliteEngine


class _Jobs:
    """The shared work queue: FIFO, except that a failed TPU's item goes back to the head."""

    def __init__(self) -> None:
        self._items: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._closed = False

    def put(self, job, front: bool = False) -> None:
        with self._cond:
            (self._items.appendleft if front else self._items.append)(job)
            self._cond.notify()

    def get(self):
        """The next job, or None once closed."""
        with self._cond:
            while not self._items and not self._closed:
                self._cond.wait()
            return None if self._closed else self._items.popleft()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class DevicePool(Runner):
    """Data-parallel inference over several engines (one thread each), results in input order."""

    def __init__(self, members: List[TfliteEngine], *, work: Callable = invoke, fallback: Optional[Callable] = None,
                 on_notice: Optional[Notice] = None, depth: int = 2,
                 meta_path: Optional[str] = None, label: Optional[str] = None,
                 reconnect: Optional[Reconnect] = None) -> None:
        super().__init__()
        self._reconnect = reconnect
        if not members:
            raise ValueError("DevicePool needs at least one member")
        self.engine: TfliteEngine = members[0]
        self.model_path = self.engine.model_path
        self.meta_path = meta_path or self.engine.requested_model
        self.label = label or ", ".join(m.name for m in members)
        self._work, self._fallback, self._say = work, fallback, on_notice
        self._jobs = _Jobs()
        self._results: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._alive = 0
        self._threads: list[threading.Thread] = []
        self._order: collections.deque = collections.deque()  # (seq, key) submitted, not yet handed back
        self._ready: dict = {}
        self._seq = 0
        self.window = max(1, depth * len(members))
        for m in members:
            self._start(m)

    def _start(self, member: TfliteEngine) -> None:
        with self._lock:
            self._alive += 1
        t = threading.Thread(target=self._worker, args=(member,), daemon=True,
                             name=f"edgeapp-{member.name}")
        self._threads.append(t)
        t.start()

    def _worker(self, member: TfliteEngine) -> None:
        name, model = member.name, member.model_path
        while True:
            job = self._jobs.get()
            if job is None:
                return
            seq, payload = job
            t0 = time.perf_counter()
            try:
                out = self._work(member, payload)
            except DeviceFailed as e:
                self._jobs.put(job, front=True)  # the others take it: nothing lost
                back = self._reconnect.wait(name, e, member) if self._reconnect else None
                if back is not None:  # the same device, opened again: this thread goes on with it
                    member = back
                    continue
                self._lost(name, e)
                return
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                self._results.put((seq, Raised(e)))
                continue
            if self._reconnect is not None:
                self._reconnect.succeeded(name)
            self._results.put((seq, Done(out, name, (time.perf_counter() - t0) * 1000.0, model)))

    def _lost(self, name: str, error: DeviceFailed) -> None:
        with self._lock:
            self._alive -= 1
            self.failures.append((name, str(error)))
            left, fallback = self._alive, self._fallback
            if not left:
                self._fallback = None
        if left:
            self._notice(f"{error}; its work goes to the {left} other Edge TPU(s)")
            return
        if fallback is not None:
            try:
                member = fallback()
            except EdgeappError as e:
                self._results.put((None, Raised(DeviceUnavailable(
                    f"every Edge TPU failed ({self._reasons()}) and the CPU twin cannot run: {e}"))))
                return
            engine = member
            self._notice(f"{error}; no Edge TPU left: {engine.notice or 'running on CPU'} for the rest")
            self.label += f", then {engine.name}"
            self._start(member)
            return
        self._notice(str(error))
        self._results.put((None, Raised(DeviceUnavailable(
            f"every Edge TPU failed ({', '.join(name for name, _ in self.failures)}); the run stopped "
            "after the last result in input order (add auto to the device list to let the CPU "
            "twin finish)"))))

    def _reasons(self) -> str:
        return "; ".join(reason for _, reason in self.failures)

    def _notice(self, text: str) -> None:
        if self._say:
            self._say(text)

    @property
    def pending(self) -> int:
        return len(self._order)

    def submit(self, key, payload) -> None:
        self._jobs.put((self._seq, payload))
        self._order.append((self._seq, key))
        self._seq += 1

    def next_done(self, timeout=None):
        if not self._order:
            return None
        head, key = self._order[0]
        deadline = None if timeout is None else time.monotonic() + timeout
        while head not in self._ready:
            wait = 0.2 if deadline is None else deadline - time.monotonic()
            if wait <= 0:
                return None
            try:
                seq, result = self._results.get(timeout=min(wait, 0.2))
            except queue.Empty:
                continue
            if isinstance(result, Raised):
                raise result.error
            self._ready[seq] = result
        self._order.popleft()
        done = self._ready.pop(head)
        self.counts[done.device] += 1
        return key, done

    def close(self) -> None:
        if self._reconnect is not None:
            self._reconnect.cancel()
        self._jobs.close()
        for t in self._threads:
            t.join(timeout=5.0)  # a worker inside a hung invoke is a daemon: it cannot block exit


class CpuPool(DevicePool):
    """One-thread CPU interpreters side by side (execution/placement.cpu_runner).

    Its own policy for a batch (`run_all`): the thread that prepares an input also invokes it,
    on a free interpreter, with no hand-off to another thread and back; the caller's thread is
    one of those threads (scripts/bench_host.py measures the difference). Fed payloads
    (`imap`, `submit`), the pool's own threads invoke, as in any DevicePool.
    """

    def __init__(self, members: List[TfliteEngine], **kw: Any) -> None:
        super().__init__(members, **kw)
        self._free: queue.Queue = queue.Queue()
        for member in members:
            self._free.put(member)

    def run_all(self, items: Iterable, prepare: Prepare, workers: int = 2
                ) -> Iterator[Tuple[Any, Any, Optional[Done]]]:
        if workers <= 0:
            yield from super().run_all(items, prepare, workers)
            return

        def prepare_and_run(item: Any) -> Tuple[Any, Done]:
            payload, context = prepare(item)
            return context, self._run_here(payload)

        for item, got in prefetch(items, prepare_and_run, workers - 1, caller_helps=True):
            if isinstance(got, InputError):
                yield item, got, None
            else:
                yield item, got[0], got[1]

    def _run_here(self, payload) -> Done:
        """Invoke `payload` on a free interpreter in this thread (waiting for one if all are
        busy); counted as the pool's own results are."""
        member = self._free.get()
        try:
            t0 = time.perf_counter()
            out = self._work(member, payload)
            done = Done(out, member.name, (time.perf_counter() - t0) * 1000.0,
                        member.model_path)
        finally:
            self._free.put(member)
        with self._lock:
            self.counts[done.device] += 1
        return done
