"""Waiting for an Edge TPU that vanished mid-run to come back (`--reconnect SECONDS`).

A USB Accelerator that is knocked, browns out or resets leaves the bus and re-enumerates a few
seconds later (as 1a6e:089a, then 18d1:9302 once libedgetpu has loaded its firmware again).
The runner that lost it asks `Reconnect.wait`: the dead engine is released (libedgetpu would
hand a new open the old, dead context otherwise), then the model is opened on the same device
every `interval` seconds until it opens or `seconds` have passed since the failure. Only a
result from the reopened device ends the outage: a device that opens and fails again at once
keeps counting against the same deadline, so a flapping device cannot hold a run forever.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable, Dict, Optional

from edgeapp.errors import DeviceFailed, DeviceUnavailable, EdgeappError

if TYPE_CHECKING:
    from edgeapp.hw.runtime import TfliteEngine

Notice = Callable[[str], None]


class Reconnect:
    """`reopen(device)` opens the model on `device` again (a new engine for the runner)."""

    def __init__(self, reopen: Callable[[str], TfliteEngine], seconds: float, *, interval: float = 0.5,
                 on_notice: Optional[Notice] = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.reopen, self.seconds, self.interval = reopen, float(seconds), interval
        self._say = on_notice or (lambda _text: None)
        self._clock = clock
        self._since: Dict[str, float] = {}  # device -> when its current outage began
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.returns = 0  # devices that came back
        self.attempts = 0

    def succeeded(self, device: str) -> None:
        """A result from `device`: its outage, if any, is over."""
        if self._since:
            with self._lock:
                self._since.pop(device, None)

    def wait(self, device: str, error: DeviceFailed, old: Optional[TfliteEngine] = None
             ) -> Optional[TfliteEngine]:
        """A new engine for `device` once it is back, or None after `seconds` (said either way)."""
        with self._lock:
            start = self._since.setdefault(device, self._clock())
        _release(old)
        deadline = start + self.seconds
        if self._clock() >= deadline:
            return None
        self._say(f"{str(error).rstrip('; ')}; waiting up to {deadline - self._clock():.0f} s for "
                  f"{device} to come back (re-enumeration)")
        last = ""
        while not self._stop.is_set():
            self.attempts += 1
            try:
                member = self.reopen(device)
            except DeviceUnavailable as e:  # not back yet
                last = str(e)
            except EdgeappError as e:  # back, but the model cannot run there: stop waiting
                last = str(e)
                break
            else:
                self.returns += 1
                self._say(f"{device} is back after {self._clock() - start:.1f} s; going on")
                return member
            if self._clock() + self.interval > deadline:
                break
            self._stop.wait(self.interval)
        if self._stop.is_set():  # the run is over: nothing left to wait for
            return None
        self._say(f"{device} did not come back within {self.seconds:g} s"
                  + (f" (last: {last})" if last else ""))
        return None

    def cancel(self) -> None:
        """End every wait at once (the run is closing)."""
        self._stop.set()


def _release(engine: Optional[TfliteEngine]) -> None:
    if engine is not None:
        engine.release()
