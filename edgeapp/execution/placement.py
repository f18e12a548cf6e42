"""Opening a model where the user asked: one device, several Edge TPUs, or a segment pipeline.

`open_runner` turns (model, --device) into one of the runners of execution/parallel.py and
execution/pipeline.py; the inference commands, the camera and the Python API all come through it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from edgeapp.core.edgetpu.pipeline_segments import find_segment_files
from edgeapp.errors import DeviceUnavailable
from edgeapp.execution.parallel import CpuPool, DevicePool
from edgeapp.execution.pipeline import open_pipeline
from edgeapp.execution.reconnect import Reconnect
from edgeapp.execution.runner import Notice, Runner, SingleRunner, invoke
from edgeapp.hw.cocompiled import verify_cocompiled
from edgeapp.hw.device_choice import parse_devices, resolve_tpus
from edgeapp.hw.runtime import EngineOptions, TfliteEngine, open_engine

if TYPE_CHECKING:
    from edgeapp.hw.device_choice import DeviceChoice

Work = Callable[[TfliteEngine, Any], Any]  # (engine, payload) -> outputs: what a runner does per item


class Notices:
    """A runner's notices as values while it opens (`kept`, for the caller to say), then handed
    to `later` as they happen (a TPU failing over mid-run); set `opening` False to switch."""

    def __init__(self) -> None:
        self.kept: list[str] = []
        self.opening = True
        self.later: Optional[Notice] = None

    def __call__(self, text: str) -> None:
        if self.opening:
            self.kept.append(text)
        elif self.later is not None:
            self.later(text)


def open_runner(model: str | Path, device: str = "auto", options: EngineOptions = EngineOptions(), *,
                on_notice: Optional[Notice] = None, work: Work = invoke,
                depth: int = 2, cpu_replicas: int = 1, reconnect: float = 0.0) -> Runner:
    """Open `model` on `device` (one device, a TPU list, `all`), or a segment set as a pipeline,
    every engine as `options` say (hw/runtime.EngineOptions).

    One device: `runtime.open_engine` as always, with `auto` also covering a TPU that fails
    mid-run. A list or `all`: a DevicePool over those TPUs. A set of segment files (any one of
    them, or the base name): a pipeline over as many TPUs (execution/pipeline.py).
    `depth` items per TPU are in flight (2 keeps a batch's TPUs busy, 1 keeps frames fresh).
    `cpu_replicas`: when the run lands on the CPU and `options.threads` is not given, that many
    one-thread interpreters side by side instead of one (see `cpu_runner`).
    `reconnect` seconds: an Edge TPU that fails mid-run is waited for that long before its work
    goes to the others or the CPU twin (execution/reconnect.py); 0 gives up at once.
    A co-compiled model's first run on an Edge TPU is checked against its CPU twin
    (hw/cocompiled.py), as `options.cocompiled_check` says.
    """
    choice = parse_devices(device)
    segments = find_segment_files(model)
    if segments is not None:
        return open_pipeline(segments, choice, options, on_notice=on_notice, work=work)
    say = on_notice or (lambda _text: None)

    def twin() -> TfliteEngine:
        engine = open_engine(model, "cpu", options, probe=False)
        engine.notice = f"running {Path(engine.model_path).name} (CPU twin) on CPU"
        return engine

    waiter = None
    if reconnect > 0:
        def reopen(name: str) -> TfliteEngine:
            return open_engine(model, name, options, probe=False)

        waiter = Reconnect(reopen, reconnect, on_notice=say)
    if not choice.several:
        engine = open_engine(model, choice.text, options)
        if engine.notice:
            say(engine.notice)
        if engine.device == "edgetpu":
            verify_cocompiled(engine, twin, options.cocompiled_check, say)
        if engine.device == "cpu" and options.threads is None and cpu_replicas > 1:
            return cpu_runner(engine, cpu_replicas, options, work=work,
                              on_notice=on_notice, meta_path=str(model), depth=depth)
        auto = choice.single.kind == "auto" and engine.device == "edgetpu"
        return SingleRunner(engine, work=work, fallback=twin if auto else None,
                            on_notice=on_notice, meta_path=str(model),
                            reconnect=waiter if engine.device == "edgetpu" else None)
    engines = open_tpus(model, choice, options, on_notice=say)
    if not engines:  # `auto` in the list and no TPU usable: the CPU twin, said once
        member = twin()
        say(f"no Edge TPU usable: {member.notice or 'running on CPU'}")
        return SingleRunner(member, work=work, on_notice=on_notice, meta_path=str(model))
    verify_cocompiled(engines[0], twin, options.cocompiled_check, say)
    return DevicePool(engines, work=work, fallback=twin if choice.fallback else None,
                      on_notice=on_notice, meta_path=str(model), depth=depth, reconnect=waiter)


def cpu_runner(engine: TfliteEngine, replicas: int, options: EngineOptions = EngineOptions(), *,
               work: Work = invoke, on_notice: Optional[Notice] = None,
               meta_path: Optional[str] = None, depth: int = 2) -> Runner:
    """`replicas` one-thread interpreters of the CPU engine's model, fed from one queue.

    Per image the CPU decodes and invokes; one interpreter leaves a core idle while it waits
    for the next decoded image, and a multi-threaded one spends part of its threads
    synchronising. One-thread interpreters side by side (one per core), with the decoding
    threads between them, keep every core on useful work: measured by scripts/bench_feed.py.
    A batch's decoding threads invoke on them directly (`CpuPool.run_all`).
    The results are the same, in the same order."""
    # the model parsed and checked (containment) when `engine` was opened: not again per replica
    engines = [open_engine(engine.model, "cpu", options, threads=1, probe=False, trust_model=True)
               for _ in range(replicas)]
    for e in engines:
        e.requested_model, e.notice = engine.requested_model, engine.notice
    engine.release()  # its replicas run the model now (in a worker: one model less in it)
    return CpuPool(engines, work=work, on_notice=on_notice,
                   meta_path=meta_path, depth=depth, label="cpu")


def open_tpus(model: str | Path, choice: DeviceChoice, options: EngineOptions = EngineOptions(), *,
              on_notice: Notice = lambda _t: None) -> list:
    """One engine per TPU of a multi-device choice.

    TPUs the user named must all open. With `all`, a TPU found but unusable (busy in another
    process) is skipped and said; with `auto` in the list, so is any. No engine at all is an
    error unless `auto` allows the CPU twin (then the list comes back empty).
    """
    names = resolve_tpus(choice)
    engines, skipped = [], []
    for name in names:
        try:
            engine = open_engine(model, name, options)
        except DeviceUnavailable as e:
            if not (choice.every or choice.fallback):
                raise
            skipped.append(f"{name}: {e}")
            continue
        engines.append(engine)
    for s in skipped:
        on_notice(f"skipping {s}")
    if not engines and not choice.fallback:
        raise DeviceUnavailable(f"--device {choice.text}: no Edge TPU could be opened "
                                f"({'; '.join(skipped) or 'none found'})")
    return engines

