"""The Edge TPU in a worker process: a native call stuck in libedgetpu cannot be ended from
another thread of the same process, but a process can be ended and replaced.

- `shared.py`: the memory both processes map (input tensors in, outputs back) and its layout;
- `main.py`: the worker itself (`python -I -c ... edgeapp.hw.worker.main`), one engine;
- `process.py`: starting one, calling it with a deadline, ending it;
- `watchdog.py`: the deadline an invoke gets (p99 of the latencies so far times a factor);
- `supervisor.py`: a worker watched and replaced, the recovery ladder climbed, the CPU twin;
- `engine.py`: `IsolatedEngine`, the engine the main process sees, shared by every pipeline
  of a run that uses the same Edge TPU;
- `events.py`: what an outage and each recovery tell (`engine_lost`, `engine_recovered`).
"""

from __future__ import annotations

# How far the recovery ladder climbs (--recover; hw/recovery.py): none, a new worker, + a USB
# reset or PCIe rescan, + a power cycle of the hub port, all.
RECOVER = ("none", "restart", "reset", "power", "all")
