"""edgeapp as a library: open a model once, then run any task on images from your own code.

    import edgeapp

    model = edgeapp.open_model("mobilenet_v2_1.0_224_quant_edgetpu.tflite")  # Edge TPU, else CPU twin
    print(model.device, model.notice, model.task)
    print(model.classify("cat.jpg", top_k=3))            # [{"id", "label", "score"}, ...]
    print(model.run("cat.jpg"))                           # the model's own task: {"classes": [...]}
    for record in model.batch(["a.jpg", "b.png"]):        # records as `edgeapp classify -f jsonl`
        print(record)
    outcome = model.camera("video.mp4", on_record=print)  # frames, as `edgeapp camera`

    with edgeapp.open_model("ssd_mobilenet_v2_coco_quant_postprocess_edgetpu.tflite",
                            device="all") as model:       # every Edge TPU side by side
        for record in model.detect_batch(paths, threshold=0.5):
            ...

Every task of tasks/ is a method (`model.<task>(image, **options)` and `model.<task>_batch(paths,
**options)`) and a `task=` name; its options and their defaults are the task's own, the same as
its command's, and the functions are the ones the CLI runs (flows.open_task, flows.batch,
flows.camera.run, tasks/), so results are identical. Errors are edgeapp.errors exceptions
(InvalidModel, DeviceUnavailable, InputError...).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from edgeapp.errors import UsageError
from edgeapp.flows.batch import iter_records
from edgeapp.flows.camera.request import API_WORDS, CameraSettings, camera_request, split_settings
from edgeapp.flows.cascade import Cascade
from edgeapp.flows.evaluate import EvalReport, differences, evaluate, read_data, report
from edgeapp.flows.open_task import OpenTask, Placement, open_cascade, open_task
from edgeapp.hw.cocompiled import CHECK_MODES
from edgeapp.hw.runtime import Engine, EngineOptions
from edgeapp.hw.worker import RECOVER
from edgeapp.tasks import TaskFields, kind, names
from edgeapp.tasks.base import BoundTask, Result

if TYPE_CHECKING:
    import threading

    from edgeapp.core.vision.preprocess import ImageSource
    from edgeapp.flows.camera.run import CameraOutcome

PathLike = Union[str, Path]


class Model:
    """An opened image model on its device(s). Not thread-safe: one Model per thread. Close it
    (or use `with`) when it runs on several Edge TPUs, to end their threads."""

    def __init__(self, opened: OpenTask, reopen: Optional[dict] = None) -> None:
        self._opened = opened
        self._reopen = reopen or {}  # how it was opened: the camera opens it again for frames
        self._bound: dict = {}
        self._cascades: dict = {}  # (then, on, then_every) -> flows.cascade.Cascade, opened once

    @property
    def engine(self) -> Engine:
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

    def run(self, image: ImageSource, task: Optional[str] = None, **options: object) -> TaskFields:
        """One image (a path, bytes, a Pillow image or a uint8 array) through `task` (default:
        the model's): the record's task fields, e.g. {"objects": [...]}."""
        return self.result(image, task, **options).fields

    def result(self, image: ImageSource, task: Optional[str] = None, **options: object) -> Result:
        """As `run`, with what the record does not hold (`extras`, e.g. a segmentation's class
        map at the image's size)."""
        bound = self._task(task, options)
        cascade = self._cascade(bound)
        tensor, prepared = bound.prepare(image, keep_image=cascade is not None)
        ((_, done),) = self._opened.runner.imap([(0, tensor)])
        result = bound.interpret(done.outputs, prepared)
        if cascade is not None:
            cascade.apply(result.fields, prepared.image)
        return result

    def batch(self, paths: Iterable[PathLike], task: Optional[str] = None, workers: int = 2,
              **options: object) -> Iterator[dict]:
        """One record per path, in order, decoding ahead on `workers` threads and running on
        every device the model was opened on; a bad image is a record with `error` set, not an
        exception."""
        bound = self._task(task, options)
        cascade = self._cascade(bound)
        return iter_records(_strings(paths), self._opened.runner, bound, workers,
                            on_result=cascade.hook() if cascade is not None else None)

    def evaluate(self, data: PathLike, images: Optional[PathLike] = None, workers: int = 2) -> EvalReport:
        """The model's metric on labelled `data` (class folders or a CSV, a COCO JSON or a YOLO
        dataset, images/ + masks/, a COCO keypoints JSON; `images`: a COCO JSON's image
        folder), as `edgeapp eval --format json` reports it: {"data": {...}, "models": [{"model",
        "runs_on", "images", "failed", "images_per_s", "median_ms", "metrics": {...}}]}."""
        found = read_data(Path(data), Path(images) if images is not None else None)
        result = evaluate(self._opened, found, workers)
        differences([result.entry])
        return report(found, [result])

    def camera(self, source: Union[str, int, Path, Sequence[Union[str, int, Path]],
                                   Mapping[str, Union[str, int, Path]]] = "0", *,
               task: Optional[str] = None,
               on_record: Optional[Callable[[dict], None]] = None,
               on_notice: Optional[Callable[[str], None]] = None, stop: Optional[threading.Event] = None,
               **options: object) -> CameraOutcome:
        """Run `task` (default: the model's) on the frames of a camera (index), a video file or a
        stream, as `edgeapp camera` does: every frame's record to `on_record`. `options` are the
        camera's settings (flows.camera.request.CameraSettings: `edgeapp camera`'s flags as
        keywords, e.g. `record`, `output`, `max_frames`, `duration`, `serve` (PORT or
        HOST:PORT), `mqtt` (mqtt://host/prefix); `display` defaults to False here) and the
        task's own options. Stops at the end of a file, after `max_frames` or `duration`, or
        when the threading.Event `stop` is set. The model is opened again for frames on the
        same devices. `track=True`: objects get a `track_id`, and `count_lines` / `zones` (as
        `--count-line` / `--zone` write them) are counted, the events written to `events`
        (JSON lines); the counts are in the outcome's `outputs`. Returns the
        flows.camera.run.CameraOutcome (`stats`, `warnings`, `error`: None when the run
        succeeded). Several sources share the model: a list (names made from them) or a dict
        name -> source; the outcome's `sources` has each one's stats by name, `engines` each
        device's busy fraction, and records carry `source` (docs/camera.md, Several sources)."""
        from edgeapp.flows.camera.run import CameraRun

        name = task or self.task
        settings, task_options = split_settings(options)
        _check_api_options(name, task_options)
        request = camera_request(CameraSettings(**{"display": False, **settings, "source": source}),
                                 API_WORDS, task=name, options=task_options, on_record=on_record,
                                 **self._reopen)
        return CameraRun(request, on_notice, stop).run()

    def close(self) -> None:
        self._opened.close()
        for cascade in self._cascades.values():
            cascade.close()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getattr__(self, attribute: str) -> Any:
        """`model.<task>(image, **options)` and `model.<task>_batch(paths, **options)` for every
        task: the task's items (`TaskKind.api_value`), or its records."""
        name, batch = (attribute[:-len("_batch")], True) if attribute.endswith("_batch") else \
            (attribute, False)
        if attribute.startswith("_") or name not in names():
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attribute!r}")
        return _batch_method(self, name) if batch else _image_method(self, name)

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(names()) | {f"{n}_batch" for n in names()})

    def _cascade(self, bound: BoundTask) -> Optional[Cascade]:
        """The second model of `then=` (open_model's, else this call's), opened once."""
        if not bound.options.get("then"):
            return None
        if bound is self._opened.task:
            return self._opened.cascade
        key = tuple(bound.options.get(k) for k in ("then", "on", "then_every"))
        if key not in self._cascades:
            self._cascades[key] = open_cascade(bound, self._reopen.get("place", Placement()),
                                               lambda _text: None)
        return self._cascades[key]

    def _task(self, task: Optional[str], options: Dict[str, object]) -> BoundTask:
        default = self._opened.task
        if (task is None or task == default.name) and not options:
            return default
        name = task or default.name
        _check_api_options(name, options)
        key = (name, tuple(sorted(options.items())))
        if key not in self._bound:
            self._bound[key] = BoundTask(kind(name), self._opened.model, options)
        return self._bound[key]


def _check_api_options(task: str, options: Mapping[str, object]) -> None:
    takes = {o.name for o in kind(task).options_for("api")}
    other = sorted(set(options) - takes)
    if other:
        raise UsageError(f"{task}: unknown option(s) {', '.join(other)} (it takes "
                         f"{', '.join(sorted(takes)) or 'none'})")


def _options_doc(task: str) -> str:
    lines = []
    for o in kind(task).options_for("api"):
        default = o.default_text if o.default is None and o.default_text else repr(o.default)
        lines.append(f"    {o.name} (default {default}): {o.help}")
    return "\n".join(lines) or "    (none)"


def _image_method(model: Model, task: str) -> Callable[..., Any]:
    def method(image: ImageSource, **options: object) -> Any:
        return kind(task).api_value(model.result(image, task, **options))

    method.__name__ = task
    method.__doc__ = (f"One image through the {task} task. {kind(task).__doc__ or ''}\n\nOptions:\n"
                      + _options_doc(task))
    return method


def _batch_method(model: Model, task: str) -> Callable[..., Any]:
    def method(paths: Iterable[PathLike], workers: int = 2, **options: object) -> Iterator[dict]:
        return model.batch(paths, task, workers, **options)

    method.__name__ = f"{task}_batch"
    method.__doc__ = (f"Records of images through the {task} task (see Model.batch).\n\nOptions:\n"
                      + _options_doc(task))
    return method


def open_model(path: PathLike, device: str = "auto", *, task: Optional[str] = None,
               labels: Optional[PathLike] = None, mean: Optional[float] = None,
               std: Optional[float] = None, cpu_model: Optional[PathLike] = None,
               runtime: Optional[str] = None, threads: Optional[int] = None,
               decode: Optional[str] = None, cpu_kernels: str = "fast",
               performance: Optional[str] = None, isolate: Optional[bool] = None,
               invoke_timeout: Optional[float] = None, recover: str = "reset",
               retry_tpu: float = 60.0, cocompiled_check: str = "warn", **options: object) -> Model:
    """Open an image model as the CLI does: validated, on the Edge TPU when usable (`auto`),
    else on the CPU (a compiled model's CPU twin); `device` may also list several Edge TPUs
    (`usb:0,usb:1`) or say `all`. Labels and normalization come from the arguments, else the
    model's sidecar JSON or metadata; `task` (default: what the model is for) and its
    `options` (top_k, threshold, resize...: the task's own, with its command's defaults) are
    what `run` and `batch` use when not told. `path` may also name one of Coral's published
    models (`edgeapp models list`): it is pulled and verified when not cached. `performance`
    (low, medium, high, max) is libedgetpu's clock setting for the Edge TPU. `decode` ("scaled"
    or "full", as --decode; default: what the model was calibrated with, else the task's own:
    full for classify, scaled for detect, pose and segment) is how JPEG files and bytes are
    decoded. `isolate`, `invoke_timeout`, `recover` and `retry_tpu` are the worker process,
    its watchdog and its recovery ladder (docs/recovery.md), as --isolate and the others say.
    `cocompiled_check` (warn, strict, off) is what a co-compiled model whose first Edge TPU run
    disagrees with its CPU twin does, as --cocompiled-check says (strict: InvalidModel)."""
    if recover not in RECOVER:
        raise UsageError(f"recover={recover!r}: choose one of {', '.join(RECOVER)}")
    if cocompiled_check not in CHECK_MODES:
        raise UsageError(f"cocompiled_check={cocompiled_check!r}: choose one of {', '.join(CHECK_MODES)}")
    engine = EngineOptions(str(cpu_model) if cpu_model else None, runtime, threads,
                           cpu_kernels=cpu_kernels, performance=performance, isolate=isolate,
                           invoke_timeout=invoke_timeout, recover=recover, retry_tpu=retry_tpu,
                           cocompiled_check=cocompiled_check)
    place = Placement(device, engine)
    if task is not None:
        _check_api_options(task, options)
    opened = open_task(path, task, place, options=options, labels_file=labels, mean=mean, std=std,
                       decode=decode)
    return Model(opened, {"model": path, "place": place, "labels_file": labels, "mean": mean,
                          "std": std})


def _strings(paths: Iterable[PathLike]) -> Iterator[str]:
    return (str(p) for p in paths)
