"""The batch pipeline shared by classify and detect: prepare ahead, invoke, record, go on."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Union

import numpy as np

from edgeapp.errors import InputError, InvalidModel
from edgeapp.core.meta import ModelMeta
from edgeapp.core.model_task import output_task
from edgeapp.flows.parallel import Runner, SingleRunner
from edgeapp.flows.prefetch import prefetch
from edgeapp.core.preprocess import CORAL_MEAN, CORAL_STD, prepare_image
from edgeapp.flows.records import RecordWriter
from edgeapp.hw.runtime import Engine


@dataclass(frozen=True)
class InputSpec:
    """How to turn an image into this model's input tensor."""

    width: int
    height: int
    channels: int
    dtype: np.dtype
    scale: float
    zero_point: int
    mean: float
    std: float
    fast_decode: bool = False

    def prepare(self, source) -> np.ndarray:
        return prepare_image(source, (self.width, self.height), self.channels, self.dtype,
                             self.scale, self.zero_point, self.mean, self.std, self.fast_decode)


def input_spec(engine: Engine, meta: ModelMeta, mean: Optional[float] = None,
               std: Optional[float] = None, fast_decode: bool = False) -> InputSpec:
    """Input layout from the model; normalization from flags, else metadata, else Coral's 128/128."""
    if len(engine.inputs) != 1:
        raise InvalidModel(f"{engine.model_path} has {len(engine.inputs)} inputs; an image model "
                           "has one")
    shape = engine.input_shape
    if len(shape) != 4 or shape[0] != 1 or shape[3] not in (1, 3):
        raise InvalidModel(f"{engine.model_path}: input shape {list(shape)} is not an image tensor "
                           "[1, height, width, 1 or 3]")
    if engine.input_dtype not in (np.uint8, np.int8, np.float32):
        raise InvalidModel(f"{engine.model_path}: input type {engine.input_dtype} is not supported "
                           "(uint8, int8 or float32)")
    scale, zero = engine.input_quantization
    return InputSpec(width=shape[2], height=shape[1], channels=shape[3], dtype=engine.input_dtype,
                     scale=scale, zero_point=zero,
                     mean=_first(mean, meta.mean, CORAL_MEAN), std=_first(std, meta.std, CORAL_STD),
                     fast_decode=fast_decode)


@dataclass(frozen=True)
class ImageModel:
    """An opened image model and what it needs besides its graph: labels and input layout."""

    engine: Engine
    meta: ModelMeta
    labels: Optional[dict[int, str]]
    spec: InputSpec


def image_model(engine: Engine, model_path, labels_file=None, mean: Optional[float] = None,
                std: Optional[float] = None, fast_decode: bool = False) -> ImageModel:
    """Labels from the file given, else the model's metadata; normalization likewise.

    The metadata is that of the file the engine opened, which for a model given by name
    (`edgeapp classify mobilenet_v2`) is the pulled file, not `model_path`."""
    from edgeapp.core.labels import read_labels
    from edgeapp.core.meta import read_meta

    meta = read_meta(engine.requested_model or model_path)
    labels = read_labels(labels_file) if labels_file else meta.labels
    return ImageModel(engine, meta, labels, input_spec(engine, meta, mean, std, fast_decode))


def engine_task(engine: Engine) -> Optional[str]:
    """The task an opened model's outputs are for (model_task.output_task)."""
    shapes = [tuple(int(d) for d in o["shape"]) for o in engine.outputs]
    return output_task(shapes, [op.op for op in engine.model.operators])


def _shapes(engine: Engine) -> str:
    return ", ".join(str([int(d) for d in o["shape"]]) for o in engine.outputs)


_TASK_NAMES = {"detect": "a detection model", "pose": "a pose estimation model",
               "segment": "a segmentation model"}


def require_task(engine: Engine, task: str, wanted: str) -> None:
    """Refuse a model whose outputs are not for `task`, naming the command that fits it.
    `wanted` says what the outputs should be, for the message."""
    found = engine_task(engine)
    if found == task:
        return
    fits = f"; it looks like {_TASK_NAMES.get(found, 'a classifier')}: use `edgeapp {found}`" \
        if found else ""
    raise InvalidModel(f"{engine.model_path}: outputs {_shapes(engine)} are not {wanted}{fits}")


def classifier_output(engine: Engine, hint: str = "use `edgeapp {task}`") -> tuple[float, int]:
    """The (scale, zero point) of a classifier's one output; another task's model is refused
    with the command (`hint`, formatted with the task) that fits it."""
    task = engine_task(engine)
    if task in _TASK_NAMES:
        raise InvalidModel(f"{engine.model_path} is {_TASK_NAMES[task]} (output "
                           f"{_shapes(engine)}), not a classifier: {hint.format(task=task)}")
    if len(engine.outputs) != 1:
        raise InvalidModel(f"{engine.model_path} has {len(engine.outputs)} outputs; a classifier has "
                           "one")
    scale, zero = engine.outputs[0].get("quantization", (0.0, 0))
    return float(scale), int(zero)


def label_count_note(model: ImageModel, labels_file=None) -> Optional[str]:
    """A classifier's labels that do not fit its class vector: one warning, or None."""
    from edgeapp.core.labels import label_count_warning

    classes = int(np.prod(model.engine.outputs[0]["shape"]))
    source = f"--labels {labels_file}" if labels_file else "the model's labels"
    return label_count_warning(model.labels, classes, source)


def _first(*values):
    return next(v for v in values if v is not None)


@dataclass(frozen=True)
class Task:
    """What a command does with one image (flows/tasks.py makes them): prepare it ahead on a
    worker thread, read the raw outputs back into record fields, and the fields of a failure."""

    name: str
    prepare: Callable[[Any], tuple]  # image -> (input tensor, context)
    interpret: Callable[[list, Any], dict]  # (raw outputs, context) -> record fields
    empty: dict  # the result fields of a record whose image failed


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
    file would pass unnoticed."""
    from edgeapp.errors import UsageError
    from edgeapp.core.naming import cpu_twin_path

    def same(path: str) -> str:
        return os.path.abspath(cpu_twin_path(path))

    mine = {same(p) for p in ours}
    other = sorted(m for m in recorded if same(m) not in mine)
    if other:
        raise UsageError(f"--resume: the results file holds results of {other[0]}, not of "
                         f"{ours[-1]}; resume with that model, or choose another --output")


def iter_records(paths: Iterable, engine: Union[Engine, Runner], task: Task,
                 workers: int = 2) -> Iterator[dict]:
    """One record per input, in input order, as soon as it is produced (the JSONL records).

    Inputs are prepared `workers` ahead on threads while the interpreter runs; an input that
    fails to load gives a record with `error` set, and the batch goes on. `engine` may be a
    runner of flows/parallel.py (several Edge TPUs, a segment pipeline): each record then names
    the device that ran it, still in input order.
    """
    runner = as_runner(engine)
    model = runner.model_path
    # an input that fails before inference touched no device; one device names it anyway
    no_device = runner.engine.name if runner.label == runner.engine.name else None

    def work():
        for path, prepared in prefetch(paths, task.prepare, workers):
            bad = isinstance(prepared, InputError)
            yield (path, prepared), (None if bad else prepared[0])

    for (path, prepared), done in runner.imap(work()):
        record = {"path": path, "device": no_device, "model": model}
        if done is None:
            record.update(task.empty, latency_ms=None, error=str(prepared))
        else:
            record["device"], record["model"] = done.device, done.model or model
            record.update(task.interpret(done.outputs, prepared[1]),
                          latency_ms=round(done.latency_ms, 3), error=None)
        yield record


def run_batch(paths: list[str], engine: Union[Engine, Runner], task: Task, writer: RecordWriter,
              workers: int = 2, progress: Optional[Callable[[], None]] = None) -> BatchStats:
    """Run every path not already done; each record is written as soon as it is produced."""
    runner = as_runner(engine)
    stats = BatchStats(total=len(paths))
    todo = [p for p in paths if not writer.is_done(p)]
    stats.skipped = len(paths) - len(todo)
    start = time.perf_counter()
    try:
        for record in iter_records(todo, runner, task, workers):
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
