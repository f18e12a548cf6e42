"""Opening a model where the user asked: one device, several Edge TPUs, or a segment pipeline.

`open_runner` turns (model, --device) into one of the runners of execution/parallel.py and
execution/pipeline.py; the inference commands, the camera and the Python API all come through it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from edgeapp.errors import DeviceUnavailable
from edgeapp.execution.parallel import CpuPool, DevicePool
from edgeapp.execution.pipeline import open_pipeline
from edgeapp.execution.reconnect import Reconnect
from edgeapp.execution.runner import Notice, Runner, SingleRunner, engine_of, invoke


def open_runner(model: str | Path, device: str = "auto", *, cpu_model: Optional[str | Path] = None,
                runtime: Optional[str] = None, threads: Optional[int] = None, probe: bool = True,
                on_notice: Optional[Notice] = None, work: Callable = invoke,
                wrap: Callable = lambda engine: engine, depth: int = 2,
                cpu_replicas: int = 1, cpu_kernels: str = "fast", performance: Optional[str] = None,
                usb_queue: Optional[int] = None, reconnect: float = 0.0) -> Runner:
    """Open `model` on `device` (one device, a TPU list, `all`), or a segment set as a pipeline.

    One device: `runtime.open_engine` as always, with `auto` also covering a TPU that fails
    mid-run. A list or `all`: a DevicePool over those TPUs. A set of segment files (any one of
    them, or the base name): a pipeline over as many TPUs (execution/pipeline.py).
    `wrap` turns each opened engine into the member `work(member, payload)` is called with;
    `depth` items per TPU are in flight (2 keeps a batch's TPUs busy, 1 keeps frames fresh).
    `cpu_replicas`: when the run lands on the CPU and `threads` is not given, that many
    one-thread interpreters side by side instead of one (see `cpu_runner`).
    `performance`/`usb_queue`: libedgetpu's options for every TPU opened (hw/device_choice.tuned).
    `reconnect` seconds: an Edge TPU that fails mid-run is waited for that long before its work
    goes to the others or the CPU twin (execution/reconnect.py); 0 gives up at once.
    """
    from edgeapp.core.pipeline_segments import find_segment_files
    from edgeapp.hw.device_choice import parse_devices
    from edgeapp.hw.runtime import open_engine

    choice = parse_devices(device)
    segments = find_segment_files(model)
    tpu_options = {"performance": performance, "usb_queue": usb_queue}
    if segments is not None:
        return open_pipeline(segments, choice, cpu_model=cpu_model, runtime=runtime, threads=threads,
                             probe=probe, on_notice=on_notice, work=work, wrap=wrap,
                             cpu_kernels=cpu_kernels, tpu_options=tpu_options)
    say = on_notice or (lambda _text: None)

    def twin():
        engine = open_engine(model, "cpu", cpu_model=cpu_model, runtime=runtime, threads=threads,
                            probe=False, cpu_kernels=cpu_kernels)
        engine.notice = f"running {Path(engine.model_path).name} (CPU twin) on CPU"
        return wrap(engine)

    waiter = None
    if reconnect > 0:
        def reopen(name: str):
            return wrap(open_engine(model, name, cpu_model=cpu_model, runtime=runtime, threads=threads,
                                   probe=False, cpu_kernels=cpu_kernels, **tpu_options))

        waiter = Reconnect(reopen, reconnect, on_notice=say)
    if not choice.several:
        engine = open_engine(model, choice.text, cpu_model=cpu_model, runtime=runtime, threads=threads,
                            probe=probe, cpu_kernels=cpu_kernels, **tpu_options)
        if engine.notice:
            say(engine.notice)
        if engine.device == "cpu" and threads is None and cpu_replicas > 1:
            return cpu_runner(engine, cpu_replicas, runtime=runtime, cpu_kernels=cpu_kernels,
                              work=work, wrap=wrap,
                              on_notice=on_notice, meta_path=str(model), depth=depth)
        auto = choice.single.kind == "auto" and engine.device == "edgetpu"
        return SingleRunner(wrap(engine), work=work, fallback=twin if auto else None,
                            on_notice=on_notice, meta_path=str(model),
                            reconnect=waiter if engine.device == "edgetpu" else None)
    engines = open_tpus(model, choice, runtime=runtime, probe=probe, on_notice=say,
                        cpu_kernels=cpu_kernels, **tpu_options)
    if not engines:  # `auto` in the list and no TPU usable: the CPU twin, said once
        member = twin()
        say(f"no Edge TPU usable: {engine_of(member).notice or 'running on CPU'}")
        return SingleRunner(member, work=work, on_notice=on_notice, meta_path=str(model))
    return DevicePool([wrap(e) for e in engines], work=work, fallback=twin if choice.fallback else None,
                      on_notice=on_notice, meta_path=str(model), depth=depth, reconnect=waiter)


def cpu_runner(engine, replicas: int, *, runtime: Optional[str] = None, cpu_kernels: str = "fast",
               work: Callable = invoke,
               wrap: Callable = lambda e: e, on_notice: Optional[Notice] = None,
               meta_path: Optional[str] = None, depth: int = 2) -> Runner:
    """`replicas` one-thread interpreters of the CPU engine's model, fed from one queue.

    Per image the CPU decodes and invokes; one interpreter leaves a core idle while it waits
    for the next decoded image, and a multi-threaded one spends part of its threads
    synchronising. One-thread interpreters side by side (one per core), with the decoding
    threads between them, keep every core on useful work: measured by scripts/bench_feed.py.
    A batch's decoding threads invoke on them directly (`CpuPool.run_here`).
    The results are the same, in the same order."""
    from edgeapp.hw.runtime import open_engine

    # the model parsed and checked (containment) when `engine` was opened: not again per replica
    engines = [open_engine(engine.model, "cpu", runtime=runtime, threads=1, probe=False,
                           cpu_kernels=cpu_kernels, trust_model=True)
               for _ in range(replicas)]
    for e in engines:
        e.requested_model, e.notice = engine.requested_model, engine.notice
    return CpuPool([wrap(e) for e in engines], work=work, on_notice=on_notice,
                   meta_path=meta_path, depth=depth, label="cpu")


def open_tpus(model, choice, *, runtime: Optional[str] = None, probe: bool = True,
              on_notice: Notice = lambda _t: None, cpu_kernels: str = "fast",
              performance: Optional[str] = None, usb_queue: Optional[int] = None) -> list:
    """One engine per TPU of a multi-device choice.

    TPUs the user named must all open. With `all`, a TPU found but unusable (busy in another
    process) is skipped and said; with `auto` in the list, so is any. No engine at all is an
    error unless `auto` allows the CPU twin (then the list comes back empty).
    """
    from edgeapp.hw.device_choice import resolve_tpus
    from edgeapp.hw.runtime import open_engine

    names = resolve_tpus(choice)
    engines, skipped = [], []
    for name in names:
        try:
            engine = open_engine(model, name, runtime=runtime, probe=probe, cpu_kernels=cpu_kernels,
                                performance=performance, usb_queue=usb_queue)
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

