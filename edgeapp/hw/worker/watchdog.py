"""The deadline each invoke gets: long enough for this model on this device, short enough that
a hung Edge TPU is noticed within seconds.

From the latencies measured so far: their p99 times `factor`, never under `floor` seconds;
before there are enough of them (the first invokes upload the model to the Edge TPU), a
generous start-up deadline. `--invoke-timeout SECONDS` replaces all of it.
"""

from __future__ import annotations

import collections
from typing import Deque, Optional

import numpy as np

FLOOR_S = 1.0
FACTOR = 10.0
WARM_UP = 20  # latencies measured before the p99 is trusted
START_S = 15.0  # the deadline before that (a first invoke loads the model onto the Edge TPU)
WINDOW = 1000  # the latencies the p99 is taken over (a device that slows down is followed)


class Deadline:
    """Seconds the next invoke may take; fed each measured latency."""

    def __init__(self, fixed: Optional[float] = None, *, factor: float = FACTOR,
                 floor: float = FLOOR_S, start: float = START_S) -> None:
        self.fixed, self.factor, self.floor, self.start = fixed, factor, floor, start
        self._seconds: Deque[float] = collections.deque(maxlen=WINDOW)
        self._cached: Optional[float] = None

    def measured(self, seconds: float) -> None:
        self._seconds.append(seconds)
        if len(self._seconds) % 50 == 0 or len(self._seconds) == WARM_UP:
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
