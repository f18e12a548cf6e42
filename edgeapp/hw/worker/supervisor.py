"""One device's worker, watched: it runs every model the run opens on that device; every invoke
has its model's deadline; a worker that misses it, dies or loses its device is ended and
replaced, climbing the recovery ladder (hw/recovery.py) until the device is back, else the CPU
twin of each model takes over and the Edge TPU is tried again every --retry-tpu seconds. Every
step is an event (events.py), once per worker whatever the number of models in it.

A new worker opens all the models of the one it replaces before it serves; the input whose
invoke was lost is then run again once, so a batch loses and repeats nothing; lost twice, it
raises DeviceFailed and the runner's own policy (--reconnect, the CPU twin of `auto`, or
stopping after the last result in order) decides. The pipelines that share the worker call it
one at a time, in the order they asked (`FifoLock`).
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import time
from dataclasses import astuple, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional

from edgeapp.errors import DeviceFailed, DeviceUnavailable, EdgeappError
from edgeapp.hw.recovery import HardwareOps, NeedsRoot, NotApplicable, ladder
from edgeapp.hw.worker import events
from edgeapp.hw.worker.events import LOST, RECOVERED, EngineEvent
from edgeapp.hw.worker.process import START_TIMEOUT_S, WorkerLost, WorkerProcess
from edgeapp.hw.worker.watchdog import Deadline
from edgeapp.hw.worker.wire import ModelDescription

# hw/runtime.EngineOptions (not imported: hw/runtime opens the worker, not the other way)
Options = Any

if TYPE_CHECKING:
    import numpy as np


# After a step, how long the device may take to come back (USB re-enumeration, a power cycle's
# boot, a rescan), tried every second.
SETTLE_S = {"restart": 2.0, "reset": 6.0, "power": 12.0, "rescan": 6.0}
# A new worker opening its models on a device already checked and opened once (no probe, trusted
# models): longer than that is a worker stuck in its start. Once a new worker was seen to start
# on the device, START_FACTOR times that long, at least START_FLOOR_S, is enough.
RESTART_TIMEOUT_S = 30.0
START_FACTOR, START_FLOOR_S = 10.0, 5.0
TWIN, HAND_BACK = "cpu twin", "hand-back"

Spawn = Callable[[str], WorkerProcess]


class FifoLock:
    """A lock granted in the order it was asked for, so pipelines sharing a worker take turns
    (threading.Lock lets one thread take it again and again). Reentrant: an engine collected
    while its thread holds the lock releases its model from inside."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._waiting: Deque[threading.Lock] = collections.deque()
        self._owner: Optional[int] = None
        self._depth = 0

    def __enter__(self) -> "FifoLock":
        me = threading.get_ident()
        with self._guard:
            if self._owner == me:
                self._depth += 1
                return self
            if self._depth == 0:
                self._owner, self._depth = me, 1
                return self
            turn = threading.Lock()
            turn.acquire()
            self._waiting.append(turn)
        try:
            turn.acquire()  # released by the holder when it is our turn
        except BaseException:
            with self._guard:
                if turn in self._waiting:  # interrupted while waiting: give up our place
                    self._waiting.remove(turn)
                    raise
                self._owner = me  # the turn came as we were interrupted: pass it on
            self.__exit__()
            raise
        with self._guard:
            self._owner = me
        return self

    def __exit__(self, *exc: object) -> None:
        with self._guard:
            self._depth -= 1
            if self._depth > 0:
                return
            self._owner = None
            if self._waiting:
                self._depth = 1  # held on, by the next in line
                self._waiting.popleft().release()


@dataclass
class HostedModel:
    """A model the worker runs: how to open it again, what it runs now, its deadline."""

    number: int
    path: str
    options: Options
    trust_model: bool
    twin: bool  # its CPU twin may take over (`auto` and a compiled model)
    device: str  # where it is opened again: the Edge TPU it ran on, or the CPU
    describe: ModelDescription = field(default_factory=dict)  # type: ignore[assignment]  # opened() fills it
    deadline: Optional[Deadline] = None
    users: int = 1  # engines sharing it (pipelines of one run on the same model)
    on_tpu: bool = False  # its first open landed on the Edge TPU

    @property
    def key(self) -> tuple:
        return (os.path.realpath(self.path), astuple(self.options))

    def opened(self, describe: ModelDescription) -> None:
        """`describe` is what runs now; the deadline follows the device it runs on."""
        self.describe = describe
        key = (describe["model_path"], describe["name"])
        if self.deadline is None or self.deadline.key != key:
            self.deadline = Deadline(self.options.invoke_timeout, key=key)


class Supervisor:
    """The worker of one device and the models it runs, shared by every engine of the run that
    uses that device. `options` (the first model's) say how far recovery goes."""

    def __init__(self, device: str, options: Options, *, ops: Optional[HardwareOps] = None,
                 spawn: Spawn = WorkerProcess) -> None:
        self.device, self.options, self._spawn = device, options, spawn
        self.ops = ops if ops is not None else HardwareOps()
        self.lock = FifoLock()
        self.models: Dict[int, HostedModel] = {}
        self._numbers = itertools.count()
        self.core: Optional[int] = None  # the CPU core its workers are kept on (`pin`)
        self.worker = spawn(device)
        self.home = "cpu"  # the Edge TPU's name once a model runs on it
        self.on_twin = False
        self._retry_at = 0.0
        self._outage: Optional[tuple] = None  # (cause, start) while on the twin
        self.closed = False
        self._spawned = time.monotonic()
        self._took: Dict[str, float] = {}  # device -> seconds its last new worker took to open all

    @property
    def pid(self) -> int:
        return self.worker.pid

    def pin(self, core: Optional[int], cores: Optional[set] = None) -> None:
        """Keep this worker, and each that replaces it, on CPU `core` (engine.py decides when);
        None: let it run on `cores` again (those the main process may use)."""
        with self.lock:  # not while a recovery swaps the worker
            if core is None:
                if self.core is not None and cores:
                    self.worker.pin(cores)
                self.core = None
            elif self.worker.pin({core}):
                self.core = core

    def _new_worker(self, device: str) -> WorkerProcess:
        worker = self._spawn(device)
        if self.core is not None:
            worker.pin({self.core})
        return worker

    @property
    def name(self) -> str:
        """The device the worker runs on now (cpu while the twins run)."""
        return "cpu" if self.on_twin else self.home

    @property
    def twin_allowed(self) -> bool:
        return self.home != "cpu" and all(m.twin for m in self.models.values() if m.on_tpu)

    def holds(self, path: str, options: Options) -> bool:
        """Whether `path` with `options` is one of the models the worker runs."""
        key = (os.path.realpath(path), astuple(options))
        return any(m.key == key for m in self.models.values())

    def add(self, path: str, options: Options, *, trust_model: bool = False, twin: bool = False,
            share: bool = True) -> Optional[int]:
        """Open `path` in the worker: its number for `run`; the same model with the same options
        is shared when `share`. None when the worker was closed meanwhile. The model's or the
        device's error as the worker raised it."""
        with self.lock:
            if self.closed:
                return None
            model = HostedModel(next(self._numbers), str(path), options, trust_model, twin, self.device)
            if share:
                for known in self.models.values():
                    if known.key == model.key:
                        known.users += 1
                        return known.number
            for attempt in (0, 1):
                try:
                    model.opened(self.worker.open(model.number, model.path, "cpu" if self.on_twin else self.device,
                                                  options, trust_model=trust_model, timeout=START_TIMEOUT_S))
                    break
                except WorkerLost as lost:
                    if self.models:
                        self._recover(lost)  # its other models are reopened in a new one
                        raise DeviceUnavailable(f"{self.name}: the worker died opening {path} "
                                                f"({lost.detail})") from None
                    self.worker.end()  # a new worker that did not start: nothing else to keep
                    if attempt == 1 or not (lost.cause == "crash" or lost.stopped):
                        raise DeviceUnavailable(f"the worker for {self.device} did not start "
                                                f"({lost.detail})") from None
                    # killed or stopped while it started (as after any start): a new one, once,
                    # told (one silent for START_TIMEOUT_S is not waited for twice)
                    events.publish(EngineEvent(LOST, self.device, lost.cause, None, lost.waited))
                    cause, began = lost.cause, time.monotonic() - lost.waited
                    self.worker, self._spawned = self._new_worker(self.device), time.monotonic()
            if attempt == 1:
                events.publish(EngineEvent(RECOVERED, self.device, cause, "restart",
                                           time.monotonic() - began))
            if not self.on_twin:
                model.on_tpu = model.describe["device"] == "edgetpu"
                model.device = model.describe["name"] if model.on_tpu else "cpu"
                if model.on_tpu and self.home == "cpu":
                    self.home = model.describe["name"]
            if not self.models:  # the worker's start, and its first model
                self._took[self.name] = time.monotonic() - self._spawned
            self.models[model.number] = model
            return model.number

    def release(self, number: int) -> bool:
        """One engine of model `number` is done: the model is closed in the worker once no engine
        uses it, the worker ended with its last model. True when the worker has ended."""
        with self.lock:
            model = self.models.get(number)
            if model is not None:
                model.users -= 1
                if model.users > 0:
                    return False
                del self.models[number]
                if self.models and not self.closed:
                    self.worker.release(number)
                    return False
            self.closed = True
            self.worker.end(graceful=True)
            return True

    def run(self, number: int, tensors: List[np.ndarray]) -> List[np.ndarray]:
        """Model `number`'s outputs for one input; a lost invoke is recovered and run again once."""
        with self.lock:
            if self.closed:
                raise DeviceFailed(f"{self.name}: its worker was closed", self.home)
            if self.on_twin:
                self._try_hand_back()
            model = self.models[number]
            for attempt in (0, 1):
                assert model.deadline is not None
                t0 = time.monotonic()
                try:
                    outputs = self.worker.call(number, tensors, t0 + model.deadline.seconds)
                except WorkerLost as lost:
                    self._recover(lost)
                    if attempt == 1:
                        raise DeviceFailed(f"{self.name}: an input was lost twice ({lost.detail})",
                                           self.home) from None
                    continue
                model.deadline.measured(time.monotonic() - t0)
                return outputs
        raise AssertionError("unreachable")

    # -- the ladder ------------------------------------------------------------------------

    def _recover(self, lost: WorkerLost) -> None:
        start, device = time.monotonic() - lost.waited, self.name  # since the invoke began
        target = "cpu" if self.on_twin else self.home
        # the new process starts (Python, its imports) while the old one is ended: it opens
        # nothing before it is told to, once the old one is gone
        fresh = self._new_worker(target) if self.options.recover != "none" else None
        self.worker.end()
        events.publish(EngineEvent(LOST, device, lost.cause, None, lost.waited))
        if fresh is None:
            self.closed = True
            raise DeviceFailed(f"{device} lost ({lost.detail}); --recover none", self.home)
        for step in ["restart"] + ladder(self.options.recover, target):
            if step != "restart":
                try:
                    self.ops.apply(step, target)
                except NeedsRoot as e:
                    events.notify(f"cannot {step} {target}: {e}", once=True)
                    continue
                except NotApplicable:
                    continue
            reason = self._reopen(target, SETTLE_S[step], fresh)
            fresh = None
            if reason is None:
                events.publish(EngineEvent(RECOVERED, device, lost.cause, step, time.monotonic() - start))
                return
            events.publish(EngineEvent(LOST, device, "gone", step, time.monotonic() - start))
        if self.twin_allowed and not self.on_twin and self._reopen("cpu", SETTLE_S["restart"]) is None:
            self.on_twin, self._outage = True, (lost.cause, start)
            self._retry_at = time.monotonic() + self.options.retry_tpu
            events.notify(f"{device} did not come back: its CPU twin runs, {device} is tried again "
                          f"every {self.options.retry_tpu:g} s")
            events.publish(EngineEvent(RECOVERED, device, lost.cause, TWIN, time.monotonic() - start))
            return
        self.closed = True
        raise DeviceFailed(f"{device} lost ({lost.detail}) and not brought back", self.home)

    def _start(self, device: str, fresh: Optional[WorkerProcess] = None) -> WorkerProcess:
        """A new worker (`fresh`, else one started now) on `device` (the Edge TPU, or cpu for
        the twins) with every model opened in it, within RESTART_TIMEOUT_S (or 10 times its
        last start there): on the Edge TPU each model where it ran before (a model that ran on
        the CPU beside it stays there)."""
        worker = fresh if fresh is not None else self._new_worker(device)
        began = time.monotonic()
        took = self._took.get(device)
        until = began + (RESTART_TIMEOUT_S if took is None else
                         min(RESTART_TIMEOUT_S, max(START_FLOOR_S, START_FACTOR * took)))
        opened = {}
        try:
            for model in self.models.values():
                opened[model.number] = worker.open(
                    model.number, model.path, "cpu" if device == "cpu" else model.device,
                    replace(model.options, probe=False), trust_model=True,
                    timeout=max(0.1, until - time.monotonic()))
        except BaseException:
            worker.end()
            raise
        for number, describe in opened.items():
            self.models[number].opened(describe)
        self._took[device] = time.monotonic() - began
        return worker

    def _reopen(self, device: str, settle: float, fresh: Optional[WorkerProcess] = None) -> Optional[str]:
        """None once a new worker (`fresh` first) has `device` and every model open, else why
        not (after `settle` seconds)."""
        until, again = time.monotonic() + settle, True
        while True:
            try:
                self.worker = self._start(device, fresh)
                return None
            except (EdgeappError, WorkerLost) as e:
                reason = str(e)
                stuck = isinstance(e, WorkerLost) and e.cause == "hang"
            fresh = None
            if stuck and again:  # the new worker stuck in its start, not the device: once more
                again = False
                continue
            if time.monotonic() + 1.0 > until:
                return reason
            time.sleep(1.0)

    def _try_hand_back(self) -> None:
        """On the twin: once `retry_tpu` seconds have passed, open the Edge TPU again; if it
        answers, it takes over again (an `engine_recovered` with step hand-back)."""
        if time.monotonic() < self._retry_at:
            return
        try:
            tpu = self._start(self.home)  # the models' descriptions change only once all are open
        except (EdgeappError, WorkerLost):
            self._retry_at = time.monotonic() + self.options.retry_tpu
            return
        self.worker.end(graceful=True)
        self.worker, self.on_twin = tpu, False
        cause, start = self._outage or ("gone", time.monotonic())
        events.publish(EngineEvent(RECOVERED, self.home, cause, HAND_BACK, time.monotonic() - start))

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.worker.end(graceful=True)
