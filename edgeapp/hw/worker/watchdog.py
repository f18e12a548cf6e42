"""The deadline each invoke gets: long enough for this model on this device, short enough that
a hung Edge TPU is noticed within seconds.

From the latencies measured so far: their p99 times `factor`, never under `floor` seconds;
before there are enough of them (the first invokes upload the model to the Edge TPU), a
generous start-up deadline. `--invoke-timeout SECONDS` replaces all of it.

The latencies are remembered per (model file, device) for the life of the process: a worker
that replaces a lost one, the CPU twin taking over a second time, the Edge TPU handed back, or
the model opened again by another pipeline starts from them, not from the start-up deadline
(the new worker's open, which uploads the model, has its own timeout), so a hang right after a
restart is noticed as fast as any other.
"""

from __future__ import annotations

import collections
import threading
from typing import Deque, Dict, Hashable, Optional

import numpy as np

FLOOR_S = 1.0
FACTOR = 10.0
WARM_UP = 20  # latencies measured before the p99 is trusted
START_S = 15.0  # the deadline before that (a first invoke loads the model onto the Edge TPU)
WINDOW = 1000  # the latencies the p99 is taken over (a device that slows down is followed)


_lock = threading.Lock()
_measured: Dict[Hashable, Deque[float]] = {}  # (model file, device) -> its latest latencies


class Deadline:
    """Seconds the next invoke may take; fed each measured latency. `key` (model file, device):
    starts from the latencies measured under that key before, and keeps them for the next."""

    def __init__(self, fixed: Optional[float] = None, *, key: Optional[Hashable] = None,
                 factor: float = FACTOR, floor: float = FLOOR_S, start: float = START_S) -> None:
        self.fixed, self.factor, self.floor, self.start = fixed, factor, floor, start
        self.key = key
        with _lock:
            before = _measured.get(key, ()) if key is not None else ()
            self._seconds: Deque[float] = collections.deque(before, maxlen=WINDOW)
            if key is not None:
                _measured[key] = self._seconds
        self._cached: Optional[float] = None
        self._count = 0  # measured by this one (the p99 is taken again every 50)

    def measured(self, seconds: float) -> None:
        self._seconds.append(seconds)
        self._count += 1
        if self._count % 50 == 0 or len(self._seconds) == WARM_UP:
            self._cached = None

    @property
    def seconds(self) -> float:
        if self.fixed is not None:
            return self.fixed
        if len(self._seconds) < WARM_UP:
            return max(self.start, self.floor)
        if self._cached is None:
            p99 = float(np.percentile(np.asarray(self._seconds), 99))
            self._cached = max(self.floor, p99 * self.factor)
        return self._cached
