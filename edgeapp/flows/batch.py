"""The batch pipeline of every task: prepare ahead, invoke, interpret, record, go on."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Union

from edgeapp.errors import InputError
from edgeapp.execution.prefetch import prefetch
from edgeapp.execution.runner import Runner, SingleRunner
from edgeapp.hw.runtime import Engine
from edgeapp.sinks.records import RecordWriter
from edgeapp.tasks.base import BoundTask, Prepared, Result

OnResult = Callable[[Any, Prepared, Result], Optional[dict]]


@dataclass
class BatchStats:
    total: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    per_device: dict = field(default_factory=dict)  # results per device, with several
    device_failures: list = field(default_factory=list)  # (device, reason) of TPUs lost mid-run

    @property
    def per_second(self) -> float:
        return (self.ok + self.failed) / self.seconds if self.seconds > 0 else 0.0

    def count(self, record: dict) -> None:
        """Add one written record to the totals (local and cluster runs alike)."""
        if record["error"] is None:
            self.ok += 1
            self.latencies_ms.append(record["latency_ms"])
        else:
            self.failed += 1

    def summary(self, device: str, output: Optional[Path] = None) -> list[str]:
        """The parts of the one-line summary printed at the end of a batch."""
        parts = [f"{self.ok + self.failed} image(s) in {self.seconds:.2f} s "
                 f"({self.per_second:.1f}/s) on {device}"]
        if self.latencies_ms:
            import statistics  # its fractions and decimal: only for this line

            parts.append(f"median inference {statistics.median(self.latencies_ms):.2f} ms")
        if len(self.per_device) > 1:
            parts.append("per device: " + ", ".join(f"{d} {n}" for d, n in self.per_device.items()))
        if self.device_failures:
            parts.append(f"failed mid-run: {', '.join(d for d, _ in self.device_failures)} "
                         "(no image lost)")
        if self.skipped:
            parts.append(f"{self.skipped} already done (--resume)")
        if self.failed:
            parts.append(f"{self.failed} failed")
        if output is not None:
            parts.append(f"results in {output}")
        return parts


def check_resumed_model(recorded: set[str], *ours: str) -> None:
    """--resume appends to results of the same model only (`ours`: the paths this run's records
    name; a compiled model and its CPU twin count as one); mixing two models' results in one
    file would pass unnoticed. The same model spelled another way is the same model: the same
    file once resolved, a file with the same bytes, or a relative path written from another
    folder that names the end of ours."""
    from edgeapp.errors import UsageError

    mine = [_resolved(p) for p in ours if p]
    other = sorted(m for m in recorded if not _same_model(m, mine))
    if other:
        raise UsageError(f"--resume: the results file holds results of {other[0]}, not of "
                         f"{ours[-1]}; resume with that model, or choose another --output")


def _resolved(path: str) -> str:
    from edgeapp.core.naming import cpu_twin_path

    return os.path.realpath(cpu_twin_path(path))


def _same_model(recorded: str, mine: list) -> bool:
    import filecmp

    from edgeapp.core.naming import cpu_twin_path

    theirs = _resolved(recorded)
    if theirs in mine:
        return True
    if os.path.isfile(theirs):  # found from here: the same bytes are the same model
        return any(os.path.isfile(m) and filecmp.cmp(theirs, m, shallow=False) for m in mine)
    tail = cpu_twin_path(recorded).parts
    return not os.path.isabs(recorded) and ".." not in tail and \
        any(Path(m).parts[-len(tail):] == tail for m in mine)


def iter_records(paths: Iterable, engine: Union[Engine, Runner], task: BoundTask,
                 workers: int = 2, on_result: Optional[OnResult] = None,
                 prepare: Optional[Callable[[Any], tuple]] = None) -> Iterator[dict]:
    """One record per input, in input order, as soon as it is produced (the JSONL records).

    Inputs are prepared `workers` ahead on threads while the interpreter runs; an input that
    fails to load gives a record with `error` set, and the batch goes on. `engine` may be a
    runner of execution/parallel.py (several Edge TPUs, a segment pipeline): each record then
    names the device that ran it, still in input order. `on_result(path, prepared, result)`
    sees each image's result with its decoded image (--annotate, --mask) and may return fields
    to add to the record. `prepare` replaces the task's (images shipped as bytes).
    """
    from edgeapp.hw.native_stderr import quiet_libtiff

    quiet_libtiff()  # decoding a broken TIFF: the record's error, never libtiff's lines
    runner = as_runner(engine)
    model = runner.model_path
    # an input that fails before inference touched no device; one device names it anyway
    no_device = runner.engine.name if runner.label == runner.engine.name else None
    if prepare is None:
        keep = on_result is not None

        def prepare(source):
            return task.prepare(source, keep_image=keep)

    for path, prepared, done in _run(paths, runner, prepare, workers):
        record = {"path": path, "device": no_device, "model": model}
        if done is None:
            record.update(task.empty(), latency_ms=None, error=str(prepared))
        else:
            record["device"], record["model"] = done.device, done.model or model
            result = task.interpret(done.outputs, prepared[1])
            if on_result is not None:
                result.fields.update(on_result(path, prepared[1], result) or {})
            record.update(result.fields, latency_ms=round(done.latency_ms, 3), error=None)
        yield record


def _run(paths: Iterable, runner: Runner, prepare: Callable[[Any], tuple], workers: int
         ) -> Iterator[tuple]:
    """(path, prepared or its InputError, Done or None) per input, in input order.

    Inputs are prepared ahead on `workers` threads. Interpreters that can run in any thread
    (execution/parallel.CpuPool) are invoked by the thread that prepared the input, and this
    thread is one of the `workers` (it prepares instead of waiting); otherwise the runner's own
    threads or devices take the prepared tensors.
    """
    run_here = getattr(runner, "run_here", None)
    if run_here is not None and workers > 0:
        def prepare_and_run(source):
            prepared = prepare(source)
            return prepared, run_here(prepared[0])

        for path, got in prefetch(paths, prepare_and_run, workers - 1, caller_helps=True):
            yield (path, got, None) if isinstance(got, InputError) else (path, got[0], got[1])
        return

    def work():
        for path, prepared in prefetch(paths, prepare, workers):
            bad = isinstance(prepared, InputError)
            yield (path, prepared), (None if bad else prepared[0])

    for (path, prepared), done in runner.imap(work()):
        yield path, prepared, done


def run_batch(paths: list[str], engine: Union[Engine, Runner], task: BoundTask, writer: RecordWriter,
              workers: int = 2, progress: Optional[Callable[[], None]] = None,
              on_result: Optional[OnResult] = None) -> BatchStats:
    """Run every path not already done; each record is written as soon as it is produced."""
    runner = as_runner(engine)
    stats = BatchStats(total=len(paths))
    todo = [p for p in paths if not writer.is_done(p)]
    stats.skipped = len(paths) - len(todo)
    start = time.perf_counter()
    try:
        for record in iter_records(todo, runner, task, workers, on_result):
            stats.count(record)
            writer.write(record)
            if progress:
                progress()
    finally:
        stats.seconds = time.perf_counter() - start
        stats.per_device = dict(sorted(runner.counts.items()))
        stats.device_failures = list(runner.failures)
    return stats


def as_runner(engine: Union[Engine, Runner]) -> Runner:
    """An Engine runs as it always did: one device, in the caller's thread."""
    return engine if isinstance(engine, Runner) else SingleRunner(engine)
