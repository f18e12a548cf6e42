"""edgeapp as a library: open a model once, then classify or detect images from your own code.

    import edgeapp

    model = edgeapp.open_model("mobilenet_v2_1.0_224_quant_edgetpu.tflite")  # Edge TPU, else CPU twin
    print(model.device, model.notice)
    print(model.classify("cat.jpg", top_k=3))            # [{"id", "label", "score"}, ...]
    for record in model.classify_batch(["a.jpg", "b.png"]):
        print(record)                                     # the records `edgeapp classify -f jsonl` prints

The functions are the ones the CLI runs (flows.tasks, flows.batch), so results are identical;
errors are edgeapp.errors exceptions (InvalidModel, DeviceUnavailable, InputError, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Union

from edgeapp.flows.batch import ImageModel, image_model, iter_records
from edgeapp.flows.tasks import Task, classify_task, detect_task
from edgeapp.hw.runtime import Engine
from edgeapp.hw.runtime import open_model as _open_engine

PathLike = Union[str, Path]


class Model:
    """An opened image model on its device. Not thread-safe: one Model per thread."""

    def __init__(self, loaded: ImageModel) -> None:
        self._loaded = loaded

    @property
    def engine(self) -> Engine:
        return self._loaded.engine

    @property
    def device(self) -> str:
        """"edgetpu" or "cpu": where it actually runs."""
        return self.engine.device

    @property
    def notice(self) -> Optional[str]:
        """Why it runs where it runs, when that is not what was asked (the CLI prints this)."""
        return self.engine.notice

    @property
    def labels(self) -> Optional[dict]:
        return self._loaded.labels

    def classify(self, image: Any, top_k: int = 5, threshold: float = 0.0) -> list:
        """Classes of one image (a path, bytes, a Pillow image or a uint8 array), best first."""
        return self._run_one(classify_task(self._loaded, top_k, threshold), image)["classes"]

    def detect(self, image: Any, threshold: float = 0.4, top_k: Optional[int] = None,
               resize: str = "stretch") -> list:
        """Objects in one image, boxes [xmin, ymin, xmax, ymax] in its pixels, best first."""
        return self._run_one(detect_task(self._loaded, threshold, top_k, resize), image)["objects"]

    def classify_batch(self, paths: Iterable[PathLike], top_k: int = 5, threshold: float = 0.0,
                       workers: int = 2) -> Iterator[dict]:
        """One record per path, in order, decoding ahead on `workers` threads; a bad image is a
        record with `error` set, not an exception."""
        return iter_records(_strings(paths), self.engine, classify_task(self._loaded, top_k, threshold),
                            workers)

    def detect_batch(self, paths: Iterable[PathLike], threshold: float = 0.4,
                     top_k: Optional[int] = None, resize: str = "stretch",
                     workers: int = 2) -> Iterator[dict]:
        """Like classify_batch, with `objects` in each record."""
        return iter_records(_strings(paths), self.engine,
                            detect_task(self._loaded, threshold, top_k, resize), workers)

    def _run_one(self, task: Task, image: Any) -> dict:
        tensor, context = task.prepare(image)
        return task.interpret(self.engine.run(tensor), context)


def open_model(path: PathLike, device: str = "auto", *, labels: Optional[PathLike] = None,
               mean: Optional[float] = None, std: Optional[float] = None,
               cpu_model: Optional[PathLike] = None, runtime: Optional[str] = None,
               threads: Optional[int] = None, fast_decode: bool = False) -> Model:
    """Open an image model as the CLI does: validated, on the Edge TPU when usable (`auto`),
    else on the CPU (a compiled model's CPU twin), with labels and normalization from the
    arguments, else the model's sidecar JSON or metadata."""
    engine = _open_engine(path, device, cpu_model=cpu_model, runtime=runtime, threads=threads)
    return Model(image_model(engine, path, labels, mean, std, fast_decode))


def _strings(paths: Iterable[PathLike]) -> Iterator[str]:
    return (str(p) for p in paths)
