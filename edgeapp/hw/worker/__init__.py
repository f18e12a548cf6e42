"""The Edge TPU in a worker process: a native call stuck in libedgetpu cannot be ended from
another thread of the same process, but a process can be ended and replaced.

- `shared.py`: the memory both processes map (input tensors in, outputs back) and its layout;
- `main.py`: the worker itself (`python -I -c ... edgeapp.hw.worker.main`): one device, every
  model opened on it (an engine and a region each);
- `wire.py`: what crosses the control connection;
- `process.py`: starting one, opening a model in it, calling it with a deadline, ending it;
- `watchdog.py`: the deadline an invoke gets (p99 of the model's latencies so far times a
  factor), the latencies remembered per (model, device);
- `supervisor.py`: a worker watched and replaced with all its models, the recovery ladder
  climbed, each model's CPU twin; the pipelines' calls taken in turn;
- `engine.py`: `IsolatedEngine`, the engine the main process sees: one model in the worker of
  its device, which every pipeline of the run using that Edge TPU shares;
- `events.py`: what an outage and each recovery tell (`engine_lost`, `engine_recovered`).
"""

from __future__ import annotations

# How far the recovery ladder climbs (--recover; hw/recovery.py): none, a new worker, + a USB
# reset or PCIe rescan, + a power cycle of the hub port, all.
RECOVER = ("none", "restart", "reset", "power", "all")
