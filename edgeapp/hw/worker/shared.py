"""The memory the main process and a worker share: the inputs written by one, the outputs by
the other, at offsets both read from the same layout.

It is an unlinked file in /dev/shm (a tmpfs, so RAM) made by the worker and handed over as a
file descriptor (`multiprocessing.reduction.send_handle`): nothing is left behind when either
side dies, which `multiprocessing.shared_memory` (Python 3.8+, and its resource tracker that
unlinks segments a process merely attached) would not give on Python 3.7.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from dataclasses import dataclass
from typing import List, Tuple

import numpy as np

ALIGN = 64  # each tensor starts on a cache line


@dataclass(frozen=True)
class Slot:
    """One tensor in the region: where it starts, its shape and dtype."""

    offset: int
    shape: Tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class RegionLayout:
    """Where each input and each output lives in the region."""

    inputs: Tuple[Slot, ...]
    outputs: Tuple[Slot, ...]
    size: int

    @classmethod
    def of(cls, inputs: List[dict], outputs: List[dict]) -> "RegionLayout":
        """The layout for a runtime's tensor details (each with shape and dtype)."""
        offset, slots = 0, []
        for detail in list(inputs) + list(outputs):
            slot = Slot(offset, tuple(int(d) for d in detail["shape"]), np.dtype(detail["dtype"]).str)
            slots.append(slot)
            offset += -(-max(slot.nbytes, 1) // ALIGN) * ALIGN
        n = len(inputs)
        return cls(tuple(slots[:n]), tuple(slots[n:]), max(offset, ALIGN))


class Region:
    """The mapped memory and numpy views of its slots."""

    def __init__(self, fd: int, layout: RegionLayout) -> None:
        self.fd, self.layout = fd, layout
        self.map = mmap.mmap(fd, layout.size)
        self.inputs = [self._view(s) for s in layout.inputs]
        self.outputs = [self._view(s) for s in layout.outputs]

    def _view(self, slot: Slot) -> np.ndarray:
        return np.ndarray(slot.shape, np.dtype(slot.dtype), buffer=self.map, offset=slot.offset)

    def close(self) -> None:
        self.inputs = self.outputs = []
        try:
            self.map.close()
        except BufferError:  # a view still held somewhere: the mapping goes with the process
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass


def new_region(layout: RegionLayout) -> Region:
    """A fresh region of `layout.size` bytes, already unlinked (RAM-backed where /dev/shm is)."""
    folder = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    handle = tempfile.TemporaryFile(dir=folder, prefix="edgeapp-worker-")
    fd = os.dup(handle.fileno())
    handle.close()
    os.ftruncate(fd, layout.size)
    return Region(fd, layout)
