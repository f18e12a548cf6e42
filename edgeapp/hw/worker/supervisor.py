"""One engine's worker, watched: every invoke has a deadline; a worker that misses it, dies or
loses its device is ended and replaced, climbing the recovery ladder (hw/recovery.py) until the
engine is back, else the CPU twin takes over and the Edge TPU is tried again every
--retry-tpu seconds. Every step is an event (events.py).

The input whose invoke was lost is run again once on the new worker, so a batch loses and
repeats nothing; lost twice, it raises DeviceFailed and the runner's own policy (--reconnect,
the CPU twin of `auto`, or stopping after the last result in order) decides.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, List, Optional

from edgeapp.errors import DeviceFailed, DeviceUnavailable
from edgeapp.hw.recovery import HardwareOps, NeedsRoot, NotApplicable, ladder
from edgeapp.hw.worker import events
from edgeapp.hw.worker.events import LOST, RECOVERED, EngineEvent
from edgeapp.hw.worker.process import WorkerLost, WorkerProcess
from edgeapp.hw.worker.watchdog import Deadline

# hw/runtime.EngineOptions (not imported: hw/runtime opens the worker, not the other way)
Options = Any

if TYPE_CHECKING:
    import numpy as np


# After a step, how long the device may take to come back (USB re-enumeration, a power cycle's
# boot, a rescan), tried every second.
SETTLE_S = {"restart": 2.0, "reset": 6.0, "power": 12.0, "rescan": 6.0}
# A new worker opening a device already checked and opened once (no probe, a trusted model):
# longer than that is a worker stuck in its start.
RESTART_TIMEOUT_S = 30.0
TWIN, HAND_BACK = "cpu twin", "hand-back"

Spawn = Callable[..., WorkerProcess]


class Supervisor:
    """The worker of one (model, device), shared by every engine of the run that uses it."""

    def __init__(self, model: str, device: str, options: Options, *, trust_model: bool = False,
                 twin: bool = False, ops: Optional[HardwareOps] = None,
                 spawn: Spawn = WorkerProcess) -> None:
        self.model, self.options, self._spawn = model, options, spawn
        self.ops = ops if ops is not None else HardwareOps()
        self.deadline = Deadline(options.invoke_timeout)
        self.lock = threading.RLock()
        self.worker = spawn(model, device, options, trust_model=trust_model)
        self.describe = self.worker.describe
        self.home = self.describe["name"] if self.describe["device"] == "edgetpu" else "cpu"
        self.twin_allowed = twin and self.home != "cpu"
        self.on_twin = False
        self._retry_at = 0.0
        self._outage: Optional[tuple] = None  # (cause, start) while on the twin
        self.closed = False

    @property
    def pid(self) -> int:
        return self.worker.pid

    def run(self, tensors: List[np.ndarray]) -> List[np.ndarray]:
        """The outputs of one input; a lost invoke is recovered and run again once."""
        with self.lock:
            if self.closed:
                raise DeviceFailed(f"{self.describe['name']}: its worker was closed", self.home)
            if self.on_twin:
                self._try_hand_back()
            for attempt in (0, 1):
                t0 = time.monotonic()
                try:
                    outputs = self.worker.call(tensors, t0 + self.deadline.seconds)
                except WorkerLost as lost:
                    self._recover(lost)
                    if attempt == 1:
                        raise DeviceFailed(f"{self.describe['name']}: an input was lost twice "
                                           f"({lost.detail})", self.home) from None
                    continue
                self.deadline.measured(time.monotonic() - t0)
                return outputs
        raise AssertionError("unreachable")

    # -- the ladder ------------------------------------------------------------------------

    def _recover(self, lost: WorkerLost) -> None:
        start, device = time.monotonic() - lost.waited, self.describe["name"]  # since the invoke began
        self.worker.end()
        events.publish(EngineEvent(LOST, device, lost.cause, None, lost.waited))
        if self.options.recover == "none":
            self.closed = True
            raise DeviceFailed(f"{device} lost ({lost.detail}); --recover none", self.home)
        target = "cpu" if self.on_twin else self.home
        for step in ["restart"] + ladder(self.options.recover, target):
            if step != "restart":
                try:
                    self.ops.apply(step, target)
                except NeedsRoot as e:
                    events.notify(f"cannot {step} {target}: {e}", once=True)
                    continue
                except NotApplicable:
                    continue
            reason = self._reopen(target, SETTLE_S[step])
            if reason is None:
                events.publish(EngineEvent(RECOVERED, device, lost.cause, step, time.monotonic() - start))
                return
            events.publish(EngineEvent(LOST, device, "gone", step, time.monotonic() - start))
        if self.twin_allowed and not self.on_twin and self._reopen("cpu", SETTLE_S["restart"]) is None:
            self.on_twin, self._outage = True, (lost.cause, start)
            self.deadline = Deadline(self.options.invoke_timeout)  # the CPU's latencies, not the TPU's
            self._retry_at = time.monotonic() + self.options.retry_tpu
            events.notify(f"{device} did not come back: its CPU twin runs, {device} is tried again "
                       f"every {self.options.retry_tpu:g} s")
            events.publish(EngineEvent(RECOVERED, device, lost.cause, TWIN, time.monotonic() - start))
            return
        self.closed = True
        raise DeviceFailed(f"{device} lost ({lost.detail}) and not brought back", self.home)

    def _reopen(self, device: str, settle: float) -> Optional[str]:
        """None once a new worker has `device` open, else why not (after `settle` seconds)."""
        until = time.monotonic() + settle
        options = replace(self.options, probe=False)
        while True:
            try:
                self.worker = self._spawn(self.model, device, options, trust_model=True,
                                           start_timeout=RESTART_TIMEOUT_S)
                self.describe = self.worker.describe
                return None
            except (DeviceUnavailable, WorkerLost) as e:
                reason = str(e)
            if time.monotonic() + 1.0 > until:
                return reason
            time.sleep(1.0)

    def _try_hand_back(self) -> None:
        """On the twin: once `retry_tpu` seconds have passed, open the Edge TPU again; if it
        answers, it takes over again (an `engine_recovered` with step hand-back)."""
        if time.monotonic() < self._retry_at:
            return
        try:
            tpu = self._spawn(self.model, self.home, replace(self.options, probe=False), trust_model=True,
                              start_timeout=RESTART_TIMEOUT_S)
        except (DeviceUnavailable, WorkerLost):
            self._retry_at = time.monotonic() + self.options.retry_tpu
            return
        self.worker.end(graceful=True)
        self.worker, self.describe, self.on_twin = tpu, tpu.describe, False
        self.deadline = Deadline(self.options.invoke_timeout)
        cause, start = self._outage or ("gone", time.monotonic())
        events.publish(EngineEvent(RECOVERED, self.home, cause, HAND_BACK, time.monotonic() - start))

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.worker.end(graceful=True)
