"""The batch pipeline of every task, one loop: prepare (ahead, on threads) -> run -> interpret
(`iter_ran`, one `Ran` per input) -> record (`record`, the one way a `Ran` becomes a record:
local batches, the cluster's workers and the API alike). The runner (execution/) owns preparing
ahead and invoking; this module interprets its results, turns them into records and writes them
(`drain`, which flows/cluster.py shares). eval scores the `Ran`s themselves."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple, Optional, Sequence

from edgeapp.core.naming import cpu_twin_path
from edgeapp.errors import UsageError
from edgeapp.execution.runner import Done, Runner
from edgeapp.hw.native_stderr import quiet_libtiff
from edgeapp.hw.worker import events as engine_events
from edgeapp.hw.worker.events import EngineEvent, Tally
from edgeapp.sinks.records import RecordWriter
from edgeapp.tasks import TaskFields
from edgeapp.tasks.base import BoundTask, Prepared, Result, TaskKind


class Record(TaskFields, total=False):
    """The record of one input (a JSONL line, a cluster's and the API's too): the input, where
    it ran, the task's fields, and the latency, or the error that left it without a result."""
    path: str
    device: Optional[str]
    model: str
    latency_ms: Optional[float]
    error: Optional[str]

OnResult = Callable[[str, Prepared, Result], Optional[TaskFields]]


class Ran(NamedTuple):
    """One input through the spine: its place in the batch, its path, what preparing it gave,
    the task's result and the device's `Done`. An input that gave no result (it failed to load,
    or never ran) has `error` and neither `result` nor `done`."""

    index: int
    path: str
    prepared: Optional[Prepared]
    result: Optional[Result]
    done: Optional[Done]
    error: Optional[str] = None


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
    engine: Tally = field(default_factory=Tally)  # engines lost and recovered (hw/worker/events.py)

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
        if self.engine.events:
            parts.append(f"{self.engine.line()} (no image lost)")
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
    mine = [_resolved(p) for p in ours if p]
    other = sorted(m for m in recorded if not _same_model(m, mine))
    if other:
        raise UsageError(f"--resume: the results file holds results of {other[0]}, not of "
                         f"{ours[-1]}; resume with that model, or choose another --output")


def _resolved(path: str) -> str:
    return os.path.realpath(cpu_twin_path(path))


def _same_model(recorded: str, mine: list) -> bool:
    import filecmp

    theirs = _resolved(recorded)
    if theirs in mine:
        return True
    if os.path.isfile(theirs):  # found from here: the same bytes are the same model
        return any(os.path.isfile(m) and filecmp.cmp(theirs, m, shallow=False) for m in mine)
    tail = cpu_twin_path(recorded).parts
    return not os.path.isabs(recorded) and ".." not in tail and \
        any(Path(m).parts[-len(tail):] == tail for m in mine)


def iter_ran(paths: Iterable[str], runner: Runner, task: BoundTask, workers: int = 2,
             sources: Optional[Iterable] = None, keep_images: bool = False) -> Iterator[Ran]:
    """One `Ran` per input, in input order, as soon as it is interpreted.

    The whole batch, in one loop: the runner prepares inputs `workers` ahead and runs them
    (execution/runner.Runner.run_all), then each result is interpreted. An input that fails to
    load gives a `Ran` with its `error`, and the batch goes on. With several devices each `done`
    names the one that ran it, still in input order. `sources`: what to decode for each path,
    when not the path itself (the bytes a cluster client shipped). `keep_images`: whether
    `prepared` keeps the whole photo (a second decode when it was decoded scaled), for a caller
    that draws on it (--annotate, --mask).
    """
    quiet_libtiff()  # decoding a broken TIFF: the record's error, never libtiff's lines
    prepare = partial(task.prepare, keep_image=keep_images)
    if sources is None:
        ran = ((path, path, prepared, done)
               for path, prepared, done in runner.run_all(paths, prepare, workers))
    else:
        ran = ((path,) + got for path, got in zip(paths, runner.run_all(sources, prepare, workers)))
    for index, (path, source, prepared, done) in enumerate(ran):
        if done is None:  # prepared is the InputError
            error = str(prepared) if source is path else str(prepared).replace("<bytes>", path, 1)
            yield Ran(index, path, None, None, None, error)
            continue
        yield Ran(index, path, prepared, task.interpret(done.outputs, prepared), done)


def record(ran: Ran, model: str, device: Optional[str], kind: TaskKind) -> Record:
    """The record of one input (a JSONL line): `model` and `device` are what a record names when
    the `done` does not (the runner's model; `device_of_failures` for an input that never ran)."""
    if ran.done is None or ran.result is None:
        return {"path": ran.path, "device": device, "model": model, **kind.empty(), "latency_ms": None,
                "error": ran.error}
    return {"path": ran.path, "device": ran.done.device, "model": ran.done.model or model,
            **ran.result.fields, "latency_ms": round(ran.done.latency_ms, 3), "error": None}


def iter_records(paths: Iterable[str], runner: Runner, task: BoundTask, workers: int = 2,
                 on_result: Optional[OnResult] = None, sources: Optional[Iterable] = None
                 ) -> Iterator[Record]:
    """One record per input, in input order, as soon as it is produced (the JSONL records):
    `iter_ran`'s, each made by `record`. `on_result(path, prepared, result)` sees each image's
    result with its whole decoded image (--annotate, --mask) and may return fields to add to
    the record."""
    model, no_device = runner.model_path, device_of_failures(runner)
    for ran in iter_ran(paths, runner, task, workers, sources, keep_images=on_result is not None):
        if on_result is not None and ran.result is not None:
            ran.result.fields.update(on_result(ran.path, ran.prepared, ran.result) or {})
        yield record(ran, model, no_device, task.kind)


def device_of_failures(runner: Runner) -> Optional[str]:
    """What the record of an input that failed before inference names as its device: it touched
    none, but a runner of one device names that one anyway."""
    return runner.engine.name if runner.label == runner.engine.name else None


def failed_record(path: str, device: Optional[str], model: str, kind: TaskKind, error: str) -> Record:
    """The record of an input that gave no result (never ran, or its worker died): why."""
    return record(Ran(-1, path, None, None, None, error), model, device, kind)


def todo(paths: list[str], writer: RecordWriter, stats: BatchStats) -> list[str]:
    """The paths `writer` has no record of yet (--resume); the others are counted as skipped."""
    left = [p for p in paths if not writer.is_done(p)]
    stats.skipped = len(paths) - len(left)
    return left


def drain(records: Iterable[dict], stats: BatchStats, writer: RecordWriter,
          progress: Optional[Callable[[], None]] = None) -> None:
    """Count and write each record as soon as it comes (local and cluster runs alike); the
    time it took is the run's."""
    start = time.perf_counter()
    try:
        for record in records:
            stats.count(record)
            writer.write(record)
            if progress:
                progress()
    finally:
        stats.seconds = time.perf_counter() - start


def run_batch(paths: list[str], runner: Runner, task: BoundTask, writer: RecordWriter,
              workers: int = 2, progress: Optional[Callable[[], None]] = None,
              on_result: Optional[OnResult] = None,
              on_notice: Optional[Callable[[str], None]] = None,
              opening_events: Sequence[EngineEvent] = ()) -> BatchStats:
    """Run every path not already done; each record is written as soon as it is produced.
    The engine's outages are counted (`stats.engine`), from `opening_events` (those while the
    model opened: OpenTask.engine_events) on; what they have to say goes to `on_notice`."""
    stats = BatchStats(total=len(paths))
    for event in opening_events:
        stats.engine(event)
    try:
        with engine_events.listening(stats.engine, on_notice):
            drain(iter_records(todo(paths, writer, stats), runner, task, workers, on_result),
                  stats, writer, progress)
    finally:
        stats.per_device = dict(sorted(runner.counts.items()))
        stats.device_failures = list(runner.failures)
    return stats
