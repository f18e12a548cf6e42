"""edgeapp as a library: open a model once, then run any task on images from your own code.

    import edgeapp

    model = edgeapp.open_model("mobilenet_v2_1.0_224_quant_edgetpu.tflite")  # Edge TPU, else CPU twin
    print(model.device, model.notice, model.task)
    print(model.classify("cat.jpg", top_k=3))            # [{"id", "label", "score"}, ...]
    print(model.run("cat.jpg"))                           # the model's own task: {"classes": [...]}
    for record in model.batch(["a.jpg", "b.png"]):        # records as `edgeapp classify -f jsonl`
        print(record)

    with edgeapp.open_model("ssd_mobilenet_v2_coco_quant_postprocess_edgetpu.tflite",
                            device="all") as model:       # every Edge TPU side by side
        for record in model.batch(paths, task="detect", threshold=0.5):
            ...

The functions are the ones the CLI runs (flows.open_task, flows.batch, tasks/), so results are
identical; errors are edgeapp.errors exceptions (InvalidModel, DeviceUnavailable, InputError...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Tuple, Union

from edgeapp.flows.batch import iter_records
from edgeapp.flows.open_task import OpenTask, Placement, open_task
from edgeapp.tasks import kind
from edgeapp.tasks.base import BoundTask, Result

PathLike = Union[str, Path]


class Model:
    """An opened image model on its device(s). Not thread-safe: one Model per thread. Close it
    (or use `with`) when it runs on several Edge TPUs, to end their threads."""

    def __init__(self, opened: OpenTask) -> None:
        self._opened = opened
        self._bound: dict = {}

    @property
    def engine(self) -> Any:
        return self._opened.engine

    @property
    def device(self) -> str:
        """"edgetpu" or "cpu": where it actually runs (the first device, with several)."""
        return self.engine.device

    @property
    def where(self) -> str:
        """Every device it runs on ("usb:0, usb:1"; "cpu")."""
        return self._opened.where

    @property
    def notice(self) -> Optional[str]:
        """Why it runs where it runs, when that is not what was asked (the CLI prints this)."""
        return self.engine.notice

    @property
    def labels(self) -> Optional[dict]:
        return self._opened.model.labels

    @property
    def task(self) -> str:
        """The task it runs when none is named: the one asked at open, else the model's own."""
        return self._opened.task.name

    def run(self, image: Any, task: Optional[str] = None, **options: Any) -> dict:
        """One image (a path, bytes, a Pillow image or a uint8 array) through `task` (default:
        the model's): the record's task fields, e.g. {"objects": [...]}."""
        return self._run_one(self._task(task, options), image).fields

    def batch(self, paths: Iterable[PathLike], task: Optional[str] = None, workers: int = 2,
              **options: Any) -> Iterator[dict]:
        """One record per path, in order, decoding ahead on `workers` threads and running on
        every device the model was opened on; a bad image is a record with `error` set, not an
        exception."""
        return iter_records(_strings(paths), self._opened.runner, self._task(task, options), workers)

    def classify(self, image: Any, top_k: int = 5, threshold: float = 0.0) -> list:
        """Classes of one image, best first."""
        return self.run(image, "classify", top_k=top_k, threshold=threshold)["classes"]

    def detect(self, image: Any, threshold: float = 0.4, top_k: Optional[int] = None,
               resize: str = "stretch") -> list:
        """Objects in one image, boxes [xmin, ymin, xmax, ymax] in its pixels, best first."""
        return self.run(image, "detect", threshold=threshold, top_k=top_k, resize=resize)["objects"]

    def pose(self, image: Any, threshold: float = 0.2, resize: str = "stretch") -> list:
        """Poses in one image: [{"score", "keypoints": [{"name", "x", "y", "score"}]}], pixels."""
        return self.run(image, "pose", threshold=threshold, resize=resize)["poses"]

    def segment(self, image: Any, resize: str = "stretch") -> Tuple[list, Any]:
        """(classes present [{"id", "label", "share"}], class map at the image's size)."""
        result = self._run_one(self._task("segment", {"resize": resize}), image)
        return result.fields["classes"], result.extras["mask"]

    def classify_batch(self, paths: Iterable[PathLike], top_k: int = 5, threshold: float = 0.0,
                       workers: int = 2) -> Iterator[dict]:
        return self.batch(paths, "classify", workers, top_k=top_k, threshold=threshold)

    def detect_batch(self, paths: Iterable[PathLike], threshold: float = 0.4,
                     top_k: Optional[int] = None, resize: str = "stretch",
                     workers: int = 2) -> Iterator[dict]:
        return self.batch(paths, "detect", workers, threshold=threshold, top_k=top_k, resize=resize)

    def pose_batch(self, paths: Iterable[PathLike], threshold: float = 0.2, resize: str = "stretch",
                   workers: int = 2) -> Iterator[dict]:
        return self.batch(paths, "pose", workers, threshold=threshold, resize=resize)

    def segment_batch(self, paths: Iterable[PathLike], resize: str = "stretch",
                      workers: int = 2) -> Iterator[dict]:
        return self.batch(paths, "segment", workers, resize=resize)

    def close(self) -> None:
        self._opened.close()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _task(self, task: Optional[str], options: dict) -> BoundTask:
        default = self._opened.task
        if (task is None or task == default.name) and not options:
            return default
        name = task or default.name
        key = (name, tuple(sorted(options.items())))
        if key not in self._bound:
            self._bound[key] = BoundTask(kind(name), self._opened.model, options)
        return self._bound[key]

    def _run_one(self, task: BoundTask, image: Any) -> Result:
        tensor, prepared = task.prepare(image)
        ((_, done),) = self._opened.runner.imap([(0, tensor)])
        return task.interpret(done.outputs, prepared)


def open_model(path: PathLike, device: str = "auto", *, task: Optional[str] = None,
               labels: Optional[PathLike] = None, mean: Optional[float] = None,
               std: Optional[float] = None, cpu_model: Optional[PathLike] = None,
               runtime: Optional[str] = None, threads: Optional[int] = None,
               fast_decode: bool = False, cpu_kernels: str = "fast",
               performance: Optional[str] = None, **options: Any) -> Model:
    """Open an image model as the CLI does: validated, on the Edge TPU when usable (`auto`),
    else on the CPU (a compiled model's CPU twin); `device` may also list several Edge TPUs
    (`usb:0,usb:1`) or say `all`. Labels and normalization come from the arguments, else the
    model's sidecar JSON or metadata; `task` (default: what the model is for) and its
    `options` (top_k, threshold, resize...) are what `run` and `batch` use when not told.
    `path` may also name one of Coral's published models (`edgeapp models list`): it is
    pulled and verified when not cached. `performance` (low, medium, high, max) is libedgetpu's
    clock setting for the Edge TPU (see the README, "Keeping the Edge TPU fast and cool")."""
    place = Placement(device, str(cpu_model) if cpu_model else None, runtime, threads, True,
                      cpu_kernels, performance)
    return Model(open_task(path, task, place, options=options, labels_file=labels, mean=mean,
                           std=std, fast_decode=fast_decode))


def _strings(paths: Iterable[PathLike]) -> Iterator[str]:
    return (str(p) for p in paths)
