"""The batch pipeline shared by classify and detect: prepare ahead, invoke, record, go on."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np

from edgeapp.errors import InputError, InvalidModel
from edgeapp.core.meta import ModelMeta
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
    if len(engine.model.inputs) != 1:
        raise InvalidModel(f"{engine.model_path} has {len(engine.model.inputs)} inputs; an image model "
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
    """Labels from the file given, else the model's metadata; normalization likewise."""
    from edgeapp.core.labels import read_labels
    from edgeapp.core.meta import read_meta

    meta = read_meta(model_path)
    labels = read_labels(labels_file) if labels_file else meta.labels
    return ImageModel(engine, meta, labels, input_spec(engine, meta, mean, std, fast_decode))


def classifier_output(engine: Engine, hint: str = "use `edgeapp detect`") -> tuple[float, int]:
    """The (scale, zero point) of a classifier's one output; any other shape is refused."""
    if len(engine.outputs) != 1:
        more = f" (it looks like a detection model: {hint})" if len(engine.outputs) == 4 else ""
        raise InvalidModel(f"{engine.model_path} has {len(engine.outputs)} outputs; a classifier has "
                           f"one{more}")
    scale, zero = engine.outputs[0].get("quantization", (0.0, 0))
    return float(scale), int(zero)


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

    @property
    def per_second(self) -> float:
        return (self.ok + self.failed) / self.seconds if self.seconds > 0 else 0.0

    def summary(self, device: str, output: Optional[Path] = None) -> list[str]:
        """The parts of the one-line summary printed at the end of a batch."""
        parts = [f"{self.ok + self.failed} image(s) in {self.seconds:.2f} s "
                 f"({self.per_second:.1f}/s) on {device}"]
        if self.latencies_ms:
            parts.append(f"median inference {statistics.median(self.latencies_ms):.2f} ms")
        if self.skipped:
            parts.append(f"{self.skipped} already done (--resume)")
        if self.failed:
            parts.append(f"{self.failed} failed")
        if output is not None:
            parts.append(f"results in {output}")
        return parts


def iter_records(paths: Iterable, engine: Engine, task: Task, workers: int = 2) -> Iterator[dict]:
    """One record per input, in input order, as soon as it is produced (the JSONL records).

    Inputs are prepared `workers` ahead on threads while the interpreter runs; an input that
    fails to load gives a record with `error` set, and the batch goes on.
    """
    base = {"device": engine.device, "model": engine.model_path}
    for path, prepared in prefetch(paths, task.prepare, workers):
        record = {"path": path, **base}
        if isinstance(prepared, InputError):
            record.update(task.empty, latency_ms=None, error=str(prepared))
        else:
            tensor, context = prepared
            t0 = time.perf_counter()
            outputs = engine.run(tensor)
            latency = (time.perf_counter() - t0) * 1000.0
            record.update(task.interpret(outputs, context), latency_ms=round(latency, 3), error=None)
        yield record


def run_batch(paths: list[str], engine: Engine, task: Task, writer: RecordWriter,
              workers: int = 2, progress: Optional[Callable[[], None]] = None) -> BatchStats:
    """Run every path not already done; each record is written as soon as it is produced."""
    stats = BatchStats(total=len(paths))
    todo = [p for p in paths if not writer.is_done(p)]
    stats.skipped = len(paths) - len(todo)
    start = time.perf_counter()
    for record in iter_records(todo, engine, task, workers):
        if record["error"] is None:
            stats.ok += 1
            stats.latencies_ms.append(record["latency_ms"])
        else:
            stats.failed += 1
        writer.write(record)
        if progress:
            progress()
    stats.seconds = time.perf_counter() - start
    return stats
