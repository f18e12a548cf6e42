"""The worker processes a test started, found by their command line as an operator finds them
(`edgeapp-worker`), and records compared without their timings."""

from __future__ import annotations

import os
from pathlib import Path

TIMING = ("latency_ms", "frame_ms", "source_ms", "timestamp")  # when, not what

_EARLIER: set = set()  # workers other tests' engines left running (ended when their engine is)


def set_aside_earlier_workers() -> None:
    """Workers are this test's only (a test module's autouse fixture calls this first): what
    earlier tests' unclosed engines still hold (Python 3.9 collects an engine in a reference
    cycle later than 3.11 does) is set aside."""
    import gc

    gc.collect()
    _EARLIER.clear()
    _EARLIER.update(_all_workers())


def workers_of_this_process() -> list:
    """Pids of the worker processes this test started, found by their command line."""
    return [pid for pid in _all_workers() if pid not in _EARLIER]


def _all_workers() -> list:
    return workers_of(os.getpid())


def workers_of(parent: int) -> list:
    """Pids of the worker processes `parent` started, found by their command line (as an
    operator finds them: `edgeapp-worker`)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"edgeapp-worker" in cmdline and ppid == parent:
            found.append(int(entry))
    return found


def only_worker() -> int:
    pids = workers_of_this_process()
    assert len(pids) == 1, pids
    return pids[0]


def without_timing(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMING}
