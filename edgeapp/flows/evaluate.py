"""`eval`: models on labelled data, each through the batch pipeline every task command runs
(flows/batch.iter_ran: decode ahead, invoke, interpret; each `Ran` scored), with the task's options for
evaluation (every box above 0.001...) and its metric (`TaskKind.scorer`).

`evaluate(opened, data)` is the one measurement (what `convert --eval` and `--max-drop` call);
`evaluate_models` opens each MODEL (an int8 .tflite, an _edgetpu.tflite, a Coral model's name, or
a float ONNX/Keras source run with the preprocessing of its int8 conversion) and compares.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager, Dict, List, Optional, Sequence, Union

from typing_extensions import TypedDict

from edgeapp.core.eval.coco import cocotools
from edgeapp.core.eval.data import DataSummary
from edgeapp.core.labels import read_labels
from edgeapp.core.meta import read_meta
from edgeapp.core.naming import sidecar_path
from edgeapp.core.tflite.model import load_model
from edgeapp.errors import EdgeappError, InvalidModel, UsageError, WrongTask
from edgeapp.execution.runner import SingleRunner
from edgeapp.flows import eval_coco
from edgeapp.flows.batch import iter_ran
from edgeapp.flows.eval_data import EvalData, read_class_folders, read_csv, read_masks
from edgeapp.flows.eval_reading import file_kind
from edgeapp.flows.open_task import OpenTask, Placement, open_task
from edgeapp.flows.sources.float_engine import is_float_source, open_float
from edgeapp.hw.hostinfo import usable_cores
from edgeapp.hw.worker import events as engine_events
from edgeapp.hw.worker.events import Tally
from edgeapp.tasks import guess_from, kind, names, task_for
from edgeapp.tasks.base import BoundTask, Scorer, TaskKind, bind
from edgeapp.tasks.model import ImageModel, input_spec

if TYPE_CHECKING:
    from edgeapp.core.eval.metrics import TaskMetrics
    from edgeapp.core.meta import ModelMeta
    from edgeapp.core.naming import PathLike
    from edgeapp.flows.sources.float_engine import FloatEngine

Say = Callable[[str], None]
# progress(total, label): a context manager yielding `advance` (cli.options.progress_bar)
Progress = Callable[[int, str], ContextManager[Optional[Callable[[], None]]]]
DATA_WORDS = {"classification": "classification data (class labels)",
              "detection": "detection data (boxes)", "segmentation": "segmentation data (masks)",
              "keypoints": "pose data (keypoints)"}


class EvalEntry(TypedDict, total=False):
    """One model's entry in eval's JSON (docs/eval.md): where it ran, how fast, its metrics;
    `delta`: its scalar metrics minus the first model's."""
    model: str
    runs_on: str
    task: str
    images: int
    failed: int
    images_per_s: Optional[float]
    median_ms: Optional[float]
    metrics: Union[TaskMetrics, Dict[str, float]]  # {} when only predictions were asked for
    notes: List[str]
    delta: Dict[str, float]


class EvalReport(TypedDict):
    """`eval --format json`, and what `model.evaluate` returns."""
    data: DataSummary
    models: List[EvalEntry]


class FloatVsInt8(TypedDict):
    """A float original and its int8 conversion on the same data (convert --eval's sidecar)."""
    data: DataSummary
    float: EvalEntry
    int8: EvalEntry
    drop: Dict[str, float]  # float minus int8, per metric
    left_out: List[str]


@dataclass
class ModelEval:
    """One model's measurement: its JSON entry, and the scorer (predictions, plot data)."""

    entry: EvalEntry
    scorer: Scorer
    errors: List[str] = field(default_factory=list)  # one line per image left out


def check_task(opened: OpenTask, data: EvalData) -> None:
    """A model of another task than the data is exit 4, naming both."""
    kind = opened.task.kind
    if kind.evaluates != data.kind:
        raise WrongTask(f"{opened.runner.model_path} is {kind.noun} ({kind.name}); labelled data "
                        f"{data.source} is {DATA_WORDS.get(data.kind, data.kind)}")


def evaluate(opened: OpenTask, data: EvalData, workers: int = 2,
             advance: Optional[Callable[[], None]] = None,
             task_options: Optional[dict] = None, measure: bool = True) -> ModelEval:
    """Run `opened` on every image of `data` and measure it: {"model", "runs_on", "task",
    "images", "failed", "images_per_s", "median_ms", "metrics", "notes"}. An image that fails to
    decode is left out of the metric (and counted in "failed"). `task_options`: the task's own
    options measured beside its evaluation settings (detection's `tiles`). `measure=False`:
    predictions only, "metrics" empty (no COCO evaluator here: they are measured elsewhere from
    the file)."""
    check_task(opened, data)
    kind = opened.task.kind
    bound = BoundTask(kind, opened.model, {**kind.eval_options, **(task_options or {})})
    labels = opened.model.labels
    if labels is None and kind.class_count(bound.plan):  # unnamed classes, as many as the outputs hold
        labels = {i: str(i) for i in range(kind.class_count(bound.plan))}
    scorer = kind.scorer(data, labels)
    if measure and scorer.coco_results:
        cocotools()  # the evaluator is here: exit 7 before the run, not after it
    done, errors, latencies = [], [], []
    start = time.perf_counter()
    for ran in iter_ran(data.paths, opened.runner, bound, workers):
        if ran.done is not None:
            scorer.add(ran.index, ran.result)
            done.append(ran.index)
            latencies.append(round(ran.done.latency_ms, 3))  # as its record would say
        else:
            errors.append(ran.error)
        if advance is not None:
            advance()
    seconds = time.perf_counter() - start
    entry: EvalEntry = {"model": opened.runner.model_path, "runs_on": opened.where, "task": kind.name,
                         "images": len(done), "failed": len(errors),
                         "images_per_s": round(len(data.paths) / seconds, 2) if seconds > 0 else 0.0,
                         "median_ms": round(statistics.median(latencies), 3) if latencies else None,
                         "metrics": scorer.metrics(done) if measure else {}, "notes": list(scorer.notes)}
    return ModelEval(entry, scorer, errors)


def needs_coco(data: EvalData) -> bool:
    """Whether `data`'s metric is COCO's evaluation (detection, pose)."""
    task = kind_for(data)
    return task is not None and bool(task.scorer(data, None).coco_results)


def kind_for(data: EvalData) -> Optional[TaskKind]:
    """The task kind measured on `data` (the one whose `evaluates` is its kind)."""
    return next((kind(n) for n in names() if kind(n).evaluates == data.kind), None)


def score_saved(files: Sequence[Path], data: EvalData, labels_file: Optional[PathLike] = None) -> List[ModelEval]:
    """Predictions files `eval --save-predictions` wrote (on a Coral Dev Board, say, where no
    COCO evaluator installs), measured against `data` here as their run would have been: every
    image of the data counts, an image without results is one where nothing was found."""
    import json

    task = kind_for(data)
    out = []
    for path in files:
        try:
            rows = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise UsageError(f"--predictions {path}: cannot read it ({e.strerror})") from None
        except ValueError as e:
            raise UsageError(f"--predictions {path}: not JSON ({e})") from None
        labels = read_labels(labels_file) if labels_file else None
        scorer = task.scorer(data, labels) if task is not None else None
        if scorer is None or not scorer.coco_results:
            raise UsageError(f"--predictions {path}: only detection and pose predictions (COCO "
                             "results lists) are measured from a file")
        scorer.load(rows, f"--predictions {path}")
        cocotools()
        done = list(range(len(data.paths)))
        entry: EvalEntry = {"model": str(path), "runs_on": "predictions file", "task": task.name,
                             "images": len(done), "failed": 0, "images_per_s": None, "median_ms": None,
                             "metrics": scorer.metrics(done), "notes": list(scorer.notes)}
        out.append(ModelEval(entry, scorer))
    differences([r.entry for r in out])
    return out


def read_data(data: Path, images: Optional[Path] = None) -> EvalData:
    """The labelled data `data` names (a file or a folder, the format found from it)."""
    kind = file_kind(data)
    if kind == "missing":
        raise UsageError(f"labelled data {data}: not found")
    if kind not in ("", "a folder"):  # a FIFO or device would block the reader
        raise UsageError(f"labelled data {data}: {kind}, not a file or folder")
    suffix = data.suffix.lower()
    if data.is_file():
        if suffix == ".json":
            found = eval_coco.read_coco(data, images)
            if images is not None:
                _images_under(found, images)
            return found
        if suffix in (".yaml", ".yml"):
            return eval_coco.read_yolo_yaml(data)
        if suffix == ".csv":
            return read_csv(data)
        raise UsageError(f"labelled data {data}: expected a COCO .json, a YOLO data .yaml, a .csv of "
                         "path,label or a folder")
    if images is not None:
        raise UsageError("--images is for a COCO JSON's images")
    try:
        yamls = sorted(p for p in data.iterdir() if p.suffix.lower() in (".yaml", ".yml"))
    except OSError as e:
        raise UsageError(f"labelled data {data}: cannot list it ({e.strerror or e})") from None
    if len(yamls) == 1:  # a dataset's own definition (names, val) comes first
        return eval_coco.read_yolo_yaml(yamls[0])
    if (data / "images").is_dir() and (data / "labels").is_dir():
        return eval_coco.read_yolo_folder(data)
    if (data / "images").is_dir() and (data / "masks").is_dir():
        return read_masks(data)
    return read_class_folders(data)


def _images_under(data: EvalData, images: Path) -> None:
    """--images DIR: DIR joined with each image's file_name; none there is exit 2 before any
    model opens (some missing: those are left out, exit 3, as without --images)."""
    if any(Path(p).exists() for p in data.paths):
        return
    first = Path(data.paths[0])
    raise UsageError(f"--images {images}: none of the {len(data.paths)} images of {data.source} "
                     f"is there (each is DIR/<its file_name>: {first} not found)")


def scalar_metrics(metrics: Union[TaskMetrics, Dict[str, float]]) -> Dict[str, float]:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def differences(entries: List[EvalEntry]) -> None:
    """Each model's "delta": its scalar metrics minus the first model's (the reference)."""
    if not entries:
        return
    ref = scalar_metrics(entries[0]["metrics"])
    for e in entries:
        mine = scalar_metrics(e["metrics"])
        e["delta"] = {k: round(mine[k] - ref[k], 6) for k in mine if k in ref}


def open_for_eval(model: str, place: Placement, *, labels_file: Optional[PathLike] = None,
               mean: Optional[float] = None, std: Optional[float] = None,
               say: Say = lambda _t: None,
               sidecars: Sequence[PathLike] = (), cpu_replicas: int = 1) -> OpenTask:
    """An int8 .tflite, _edgetpu.tflite or Coral name as `classify` opens it; a float ONNX or
    Keras source on ONNX Runtime / TensorFlow with the preprocessing of its conversion: --mean/
    --std, else its own sidecar, else the sidecar of the int8 model converted from it among
    `sidecars` (their "source"), else its metadata (Ultralytics: pixels / 255)."""
    path = Path(str(model))
    if path.exists() and is_float_source(path):
        return _open_float(path, labels_file, mean, std, sidecars)
    return open_task(model, None, place, labels_file=labels_file, mean=mean, std=std,
                     on_notice=say, cpu_replicas=cpu_replicas)


def _open_float(path: Path, labels_file: Optional[PathLike], mean: Optional[float], std: Optional[float],
                sidecars: Sequence[PathLike]) -> OpenTask:
    engine = open_float(path)
    meta = conversion_meta(path, sidecars) or engine.meta
    labels = read_labels(labels_file) if labels_file else (meta.labels or engine.meta.labels)
    return bind_float(engine, meta, labels, mean, std)


def bind_float(engine: FloatEngine, meta: ModelMeta, labels: Optional[dict], mean: Optional[float] = None,
                std: Optional[float] = None) -> OpenTask:
    """A float engine (flows/sources/float_engine.py) bound to its task as `classify` binds a
    .tflite: the task from `meta` or the outputs, the input fitted as the int8 model's is."""
    try:
        model = ImageModel(engine, meta, labels, input_spec(engine, meta, mean, std))
        task = bind(task_for(engine, meta), model)
    except BaseException:
        engine.close()
        raise
    runner = SingleRunner(engine)
    runner.close = engine.close  # type: ignore[method-assign]
    return OpenTask(runner, model, task)


def conversion_meta(path: Path, sidecars: Sequence[PathLike]) -> Optional[ModelMeta]:
    """The sidecar of `path` itself, else of a model converted from it (its "source")."""
    own = read_meta(path)
    if own.source and own.source.endswith(".json"):
        return own
    for other in sidecars:
        meta = read_meta(other)
        source = meta.extra.get("source")
        if source and any(c.resolve() == path.resolve() for c in source_candidates(source, sidecar_path(Path(other)))):
            return meta
    return None


def source_candidates(entry: str, sidecar: Path) -> list:
    """Where a sidecar's "source" may be: relative to the sidecar's folder (what `convert`
    writes), else (older sidecars) relative to the working folder."""
    path = Path(entry)
    return [path] if path.is_absolute() else [sidecar.resolve().parent / path, path]


def evaluate_models(models: Sequence[str], data: EvalData, place: Placement = Placement(), *,
                    labels_file: Optional[PathLike] = None, mean: Optional[float] = None,
                    std: Optional[float] = None, workers: int = 2, say: Say = lambda _t: None,
                    places: Optional[Sequence[Placement]] = None, progress: Optional[Progress] = None,
                    task_options: Optional[dict] = None,
                    on_done: Optional[Callable[[int, ModelEval], None]] = None,
                    measure: bool = True) -> List[ModelEval]:
    """Every model on the same data, in order; the first is the reference of each "delta".
    `progress(total, label)` gives a context manager yielding `advance` (cli.options.progress_bar);
    `on_done(n, result)` is called as each model finishes (its predictions written then, so a
    run stopped later keeps them)."""
    import contextlib

    tflites = [m for m in models if str(m).endswith(".tflite")]
    out = []
    for n, model in enumerate(models):
        tally = Tally()  # an engine lost and recovered meanwhile (a worker): said in its notes
        with engine_events.listening(tally, say), \
                open_for_eval(model, places[n] if places else place, labels_file=labels_file, mean=mean,
                              std=std, say=say, sidecars=tflites,
                              cpu_replicas=max(1, min(usable_cores(), len(data.paths)))) as opened:
            for note in opened.notices:  # where it runs, when not where asked
                say(note)
            check_task(opened, data)
            bar = progress(len(data.paths), f"eval {Path(str(model)).name}") if progress else \
                contextlib.nullcontext(None)
            with bar as advance:
                result = evaluate(opened, data, workers, advance, task_options, measure)
        if tally.events:
            result.entry["notes"].append(tally.line())
        for line in result.errors:
            say(f"left out: {line}")
        for note in result.entry["notes"]:
            say(f"{Path(result.entry['model']).name}: {note}")
        out.append(result)
        differences([r.entry for r in out])
        if on_done is not None:
            on_done(n, result)
    return out


def compared(ref: ModelEval, q: ModelEval, data: EvalData) -> FloatVsInt8:
    """The task's metric of a float original and the int8 model made from it, on the same data
    (what `convert --eval` stores in the sidecar): {"data", "float", "int8", "drop"}; "drop" is
    float minus int8 per metric (positive: int8 lost that much)."""
    a, b = scalar_metrics(ref.entry["metrics"]), scalar_metrics(q.entry["metrics"])
    return {"data": data.summary(), "float": ref.entry, "int8": q.entry,
            "drop": {k: round(a[k] - b[k], 6) for k in a if k in b},
            "left_out": ref.errors + [e for e in q.errors if e not in ref.errors]}


def is_labelled_data(path: Path) -> bool:
    """Whether --eval names labelled data `eval` reads beyond class folders (a COCO JSON, a YOLO
    dataset, a CSV, images and masks)."""
    if path.is_file():
        return path.suffix.lower() in (".json", ".yaml", ".yml", ".csv")
    return path.is_dir() and (path / "images").is_dir() and (
        (path / "labels").is_dir() or (path / "masks").is_dir())


def report(data: EvalData, results: List[ModelEval]) -> EvalReport:
    """What `eval --format json` prints and `model.evaluate` returns."""
    return {"data": data.summary(), "models": [r.entry for r in results]}


def refuse_unknown(models: Sequence[str], data: Optional[EvalData] = None) -> None:
    """Before any model runs: a MODEL that is neither a file nor a folder nor a Coral name, or
    a .tflite whose task (its sidecar's, else its outputs') is not the data's, is exit 4."""
    for m in models:
        p = Path(str(m))
        if not p.exists() and (p.suffix or "/" in str(m)):
            raise InvalidModel(f"model not found: {m}")
        task = file_task(p) if data is not None else None
        if task is not None and kind(task).evaluates != data.kind:  # type: ignore[union-attr]
            raise WrongTask(f"{m} is {kind(task).noun} ({task}); labelled data {data.source} is "  # type: ignore[union-attr]
                            f"{DATA_WORDS.get(data.kind, data.kind)}")  # type: ignore[union-attr]


def file_task(path: Path) -> Optional[str]:
    """The task of a .tflite file from the file alone (no runtime), or None when unsure."""
    if path.suffix.lower() != ".tflite" or not path.is_file():
        return None
    meta = read_meta(path)
    if meta.task in names():
        return str(meta.task)
    if meta.ultralytics_task:
        return None  # the model's own metadata decides when it opens
    try:
        parsed = load_model(path)
    except EdgeappError:
        return None  # opening it says why
    shapes = [t.shape for t in parsed.output_tensors]
    size = parsed.input_tensors[0].shape if len(parsed.input_tensors) == 1 else ()
    return guess_from(shapes, parsed.op_names, (size[2], size[1]) if len(size) == 4 else None)
