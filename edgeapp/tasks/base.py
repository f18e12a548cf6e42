"""What a task is: one definition that every path asks, and the same task bound to a model.

A `TaskKind` (one per module in tasks/, found by tasks/__init__.py) says everything the paths
need of a task: its options (`options`: each one's type, default, help, flags and the paths
that take it: the command, the camera, the API), which models it takes (`claims`, `plan`), how
an image or a camera frame becomes the input (`prepare`, `prepare_frame`), how the raw outputs
become record fields (`interpret`), the record of a failed image (`empty`), its results-file
rows and table text, its overlay, and what an event is for MQTT. The command, the camera, the
cluster, the API, results files, the live view and MQTT go through it; none of them tells
tasks apart by name or by the keys of a record.

A `BoundTask` is a kind with its options, bound to an opened model: what actually runs.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Optional, Sequence, Tuple

import numpy as np
from typing_extensions import Protocol

from edgeapp.core.vision.boxes import Fit
from edgeapp.core.vision.preprocess import decode_image, fit_pixels, load_image, quantize_input
from edgeapp.errors import UsageError, WrongTask
from edgeapp.hw.runtime import run_payload
from edgeapp.tasks import TaskFields, guess_task, kind
from edgeapp.tasks.model import (
    ImageModel,
    InputSpec,
    decode_of,
    describe_outputs,
    input_size,
    op_names,
    output_shapes,
)

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from edgeapp.core.eval.data import EvalData
    from edgeapp.core.eval.metrics import TaskMetrics
    from edgeapp.core.naming import PathLike
    from edgeapp.core.tflite.model import TfliteModel
    from edgeapp.core.vision.preprocess import Decoded, ImageSource
    from edgeapp.hw.runtime import Engine

# The paths a task option can reach: its own command (and --cluster), the camera, the Python API.
PATHS = ("command", "camera", "api")


@dataclass(frozen=True)
class TaskOption:
    """One option of a task, declared once: the command, the camera and the API derive theirs
    from it (cli/task_commands.py, cli/camera.py, api.py).

    `type` is int, float, str or Path; `choices` makes a str a choice; a `default` of None
    means "the task decides" (say how in `default_text`). `folder`: an image folder the command
    writes one file per input into (the task's `to_folder` writes it), named in the summary."""

    name: str  # the key in the task's options, and the Python keyword
    default: Any
    help: str
    flags: Tuple[str, ...] = ()  # default: ("--name-with-dashes",)
    type: Any = None  # default: the default's type
    choices: Tuple[str, ...] = ()
    min: Optional[float] = None
    max: Optional[float] = None
    metavar: Optional[str] = None
    paths: Tuple[str, ...] = PATHS
    default_text: Optional[str] = None  # what a None default means, for help texts
    folder: Optional[str] = None  # "class maps": an output folder, not an input of `interpret`

    @property
    def flag_names(self) -> Tuple[str, ...]:
        return self.flags or ("--" + self.name.replace("_", "-"),)

    @property
    def value_type(self) -> Any:
        return self.type if self.type is not None else type(self.default)

    def check(self, value: Any) -> Any:
        """A value given through the API or a cluster job, as the command line would take it."""
        if value is None or self.folder:
            return value
        if self.choices:
            value = getattr(value, "value", value)
            if value not in self.choices:
                raise UsageError(f"{self.flag_names[0]} {value!r}: one of {', '.join(self.choices)}")
            return value
        kind = self.value_type
        if kind in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise UsageError(f"{self.flag_names[0]} must be a number, not {value!r}")
        if kind is int and int(value) != value:
            raise UsageError(f"{self.flag_names[0]} must be a whole number, not {value!r}")
        value = kind(value) if kind in (int, float) else value
        for bound, ok in ((self.min, lambda b: value >= b), (self.max, lambda b: value <= b)):
            if bound is not None and not ok(bound):
                raise UsageError(f"{self.flag_names[0]} {value}: must be between "
                                 f"{self.min if self.min is not None else '-inf'} and "
                                 f"{self.max if self.max is not None else 'inf'}")
        return value


RESIZE = TaskOption(
    "resize", "stretch", choices=("stretch", "letterbox"),
    help="How images are fitted to the model input: stretch (what most models are trained with) "
         "or letterbox (keep the aspect ratio, pad). Results are mapped back to the original "
         "image either way.")


@dataclass
class Prepared:
    """What interpreting needs of the input besides the outputs."""

    fit: Fit  # how the image went into the input tensor (to map results back)
    image: Any = None  # the decoded image when something draws on it (Pillow; BGR for frames)
    source: Any = None  # the path (or bytes) it came from
    # --tiles: each window of the image (x0, y0, x1, y1) with how it went into its own tensor
    tiles: Tuple[Tuple[Tuple[int, int, int, int], Fit], ...] = ()


@dataclass
class Result:
    """One image's results: the record's task fields, and what is not for the record (a
    segmentation's class map at the image's size, "mask") but for overlays and files."""

    fields: TaskFields
    extras: dict = field(default_factory=dict)
    # camera --track: the lines, zones, counts and trails to draw (flows/camera/tracking.TrackStage.snapshot)
    counting: Optional[tuple] = None


@dataclass(frozen=True)
class Entity:
    """One thing a task reports, as a Home Assistant entity (MQTT discovery: sinks/ha_discovery.py).

    `frames` and `state` are Home Assistant value templates (Jinja over `value_json`) reading a
    frame record on PREFIX/frames (--mqtt-mode frames) or the retained state on PREFIX/state
    (events); None when that mode does not carry the value."""

    key: str  # unique within the task: the entity's id
    name: str
    component: str = "sensor"  # or "binary_sensor" (templates give ON / OFF)
    frames: Optional[str] = None
    state: Optional[str] = None
    numeric: bool = False  # a measurement Home Assistant keeps statistics of


def jinja_literal(value: object) -> str:
    """A label as a Jinja string literal (quotes and backslashes escaped)."""
    return json.dumps(str(value))


def item_name(item: dict) -> str:
    label = item.get("label")
    return str(label) if label is not None else str(item.get("id"))


def event_name(item: dict) -> Any:
    """What an event calls an item: its label, else its class id."""
    return item.get("label") if item.get("label") is not None else item.get("id")


class TaskKind:
    """One task. Subclasses set the class attributes and override what differs."""

    name: ClassVar[str] = ""  # the command, --task value and registry key (the module's name)
    field: ClassVar[str] = ""  # the record key holding the results
    noun: ClassVar[str] = ""  # "a classifier", for messages that name the task a model is for
    wanted: ClassVar[str] = ""  # what the outputs should be, for refusals
    columns: ClassVar[Tuple[str, ...]] = ()  # results-file columns of one row (`rows`)
    options: ClassVar[Tuple[TaskOption, ...]] = ()  # every option the task takes
    labels: ClassVar[bool] = True  # its results name classes: it takes --labels
    resample: ClassVar[str] = "lanczos"  # how images are resized: lanczos (Pillow) or bilinear
    # how JPEGs are decoded unless --decode or the model's sidecar says: "scaled" to the input
    # (several times faster on photos), or "full" where scaled moved results too much
    # (docs/performance.md: top-1 agreement with a full decode below 98.5 %)
    decode: ClassVar[str] = "scaled"
    events: ClassVar[Optional[str]] = None  # MQTT events: "top" (top result changes), "presence"
    nothing: ClassVar[str] = "(nothing above threshold)"
    guess_rank: ClassVar[int] = 5  # guess_task asks kinds in this order (specific shapes first)
    ultralytics_task: ClassVar[Optional[str]] = None  # the task of Ultralytics' exports it runs
    instead_of_custom_ops: ClassVar[Optional[str]] = None  # advice for models needing a custom op
    evaluates: ClassVar[Optional[str]] = None  # the labelled data `eval` measures it on
    eval_options: ClassVar[Dict[str, Any]] = {}  # its options in `eval` (every result counts)
    # camera --track: the record's field of boxes ({"id", "score", "bbox"} items) it follows;
    # the task takes a `track_low` option (boxes kept below the threshold for the tracker) and
    # says its display threshold through `track_threshold`
    tracks: ClassVar[Optional[str]] = None

    @property
    def defaults(self) -> Dict[str, Any]:
        """The options `interpret` gets when none is given (output folders are not among them)."""
        return {o.name: o.default for o in self.options if not o.folder}

    def options_for(self, path: str) -> Tuple[TaskOption, ...]:
        """The options this path (PATHS) takes."""
        return tuple(o for o in self.options if path in o.paths)

    # -- the model --------------------------------------------------------------------------------

    def claims(self, shapes: Sequence[Sequence[int]], ops: Sequence[str],
               input_size: Optional[Tuple[int, int]] = None) -> bool:
        """Whether a model with these output shapes and operators (and this input (width,
        height), when known) is for this task (guessing)."""
        return False

    def claims_engine(self, engine: Engine) -> bool:
        """`claims` asked of an opened model."""
        return self.claims(output_shapes(engine), op_names(engine), input_size(engine))

    def plan(self, engine: Engine, options: dict) -> Any:
        """Check that `engine`'s model is for this task (InvalidModel naming the task it is for,
        if not) and work out what `interpret` needs of it (layout, quantization)."""
        return None

    def plan_for(self, model: ImageModel, engine: Engine, options: dict) -> Any:
        """`plan` for an opened model whose metadata may say more than its graph can (the
        output layout a `convert` sidecar names); by default the graph alone."""
        return self.plan(engine, options)

    def unopenable(self, path: str, parsed: TfliteModel) -> Optional[str]:
        """Why a model the runtime could not open is this task's and cannot run here (a
        parsed core.tflite model), or None: the runtime's own reason stands."""
        return None

    def warnings(self, model: ImageModel, labels_file: Optional[PathLike] = None) -> List[str]:
        """What to tell the user before running (labels that do not fit the model)."""
        return []

    def labels_warning(self, labels: Optional[dict], output_shapes: Sequence[Sequence[int]],
                       source: str) -> Optional[str]:
        """Why `labels` (from `source`, for messages) do not fit a model of this task with these
        outputs, or None."""
        return None

    def refuse(self, engine: Engine) -> WrongTask:
        """The refusal of another task's model, naming the task that fits it (each face words
        how to run it: `edgeapp pose`, `model.pose()`)."""
        found = guess_task(engine)
        fits = f"; it looks like {kind(found).noun}" if found else ""
        return WrongTask(f"{engine.model_path}: outputs {describe_outputs(engine)} are not "
                         f"{self.wanted}{fits}", found)

    # -- one image --------------------------------------------------------------------------------

    def prepare(self, source: ImageSource, spec: InputSpec, options: dict, plan: Any = None,
                keep_image: bool = False) -> tuple[np.ndarray, Prepared]:
        """Load an image (path, bytes, Pillow image, array) and fit it into the input tensor."""
        return prepare_image(source, spec, options.get("resize", "stretch"), self.resample,
                             keep_image)

    def prepare_frame(self, frame: np.ndarray, spec: InputSpec, options: dict,
                      plan: Any = None) -> tuple[np.ndarray, Prepared]:
        """Fit a BGR camera frame into the input tensor (with OpenCV)."""
        from edgeapp.core.vision.frames import fit_frame

        pixels, fit = fit_frame(frame, spec.size, spec.channels, options.get("resize", "stretch"))
        tensor = quantize_input(pixels, spec.dtype, spec.scale, spec.zero_point, spec.mean, spec.std)
        return tensor[None], Prepared(fit)

    def interpret(self, outputs: List[np.ndarray], prepared: Prepared, plan: Any, options: dict,
                  labels: Optional[dict]) -> Result:
        raise NotImplementedError

    def empty(self) -> TaskFields:
        """The task fields of a record whose image failed."""
        return {self.field: []}  # type: ignore[misc]  # the kind's own field

    # -- results ----------------------------------------------------------------------------------

    def items(self, fields: TaskFields) -> list:
        return list(fields.get(self.field) or [])

    def rows(self, fields: TaskFields) -> List[dict]:
        """Results-file rows (CSV) with `columns` as keys: one per item, ranked."""
        return [{"rank": r, **it} for r, it in enumerate(self.items(fields), 1)]

    def item_text(self, item: dict) -> str:
        return f"{item_name(item)} {item['score']:.3f}"

    def summary_text(self, fields: TaskFields) -> str:
        """The table format's text for one image (items apart with ` | `: labels hold commas)."""
        return " | ".join(self.item_text(it) for it in self.items(fields)) or self.nothing

    def draw(self, img: np.ndarray, fields: TaskFields, extras: dict) -> None:
        """Draw the results on a BGR image in place (annotated files, camera overlay)."""

    # -- events (MQTT) ----------------------------------------------------------------------------

    def top(self, fields: TaskFields) -> Optional[tuple]:
        """events "top": (label, score) of the result that counts, or None."""
        return None

    def presence(self, fields: TaskFields) -> Dict[Any, tuple]:
        """events "presence": label -> (count, best score) of what is in the image."""
        return {}

    def discovery(self, labels: Optional[Dict[int, str]]) -> List[Entity]:
        """What a home automation system can show of this task's results (MQTT discovery);
        `labels`: the model's (id -> name), None when it has none."""
        return []

    # -- options ----------------------------------------------------------------------------------

    def settle(self, given: Optional[dict] = None) -> dict:
        """The options `interpret` runs with: the defaults, overridden by those given (None: the
        default), each checked as its flag would be."""
        declared = {o.name: o for o in self.options if not o.folder}
        given = {k: v for k, v in (given or {}).items() if v is not None}
        unknown = sorted(set(given) - set(declared))
        if unknown:
            raise UsageError(f"{self.name}: unknown option(s) {', '.join(unknown)} (it takes "
                             f"{', '.join(sorted(declared)) or 'none'})")
        return {**self.defaults, **{k: declared[k].check(v) for k, v in given.items()}}

    def scorer(self, data: EvalData, labels: Optional[dict]) -> "Scorer":
        """What measures this task's results on labelled `data` (flows/eval_data.EvalData of
        the kind `evaluates` names), with the model's `labels`."""
        raise UsageError(f"{self.name} has no metric: eval cannot measure it")

    def class_count(self, plan: Any) -> Optional[int]:
        """How many classes the model's outputs hold, when they say it (None: they do not); what
        eval checks unnamed data's class ids against when the model has no labels."""
        return None

    def track_threshold(self, plan: Any) -> float:
        """camera --track: the score a box needs to start a track and be shown (the task runs
        down to `track_low` so that weaker boxes can keep tracks alive)."""
        raise NotImplementedError(f"{self.name} results are not tracked")

    def api_value(self, result: "Result") -> Any:
        """What `model.<task>(image)` returns: the record's items (a task may add its extras)."""
        return result.fields[self.field]

    def to_folder(self, option: TaskOption, folder: ImageFolderLike, path: str, result: "Result") -> TaskFields:
        """Write `result`'s file for input `path` into `folder` (sinks/image_folder.ImageFolder)
        for the output-folder `option`; the fields this adds to the record."""
        raise NotImplementedError(f"{self.name} declares --{option.name} but writes no file")


class ImageFolderLike(Protocol):
    """Where a task writes its own files (sinks/image_folder.ImageFolder, which tasks/ may not
    import: sinks/ sits above)."""

    def write(self, path: str, array: np.ndarray, ext: Optional[str] = None) -> Path:
        """Write a BGR (or single-channel) array for input `path`; the file written."""


class Scorer:
    """One model's results on labelled data, added image by image (`add(index, result)`, the
    index into the data's images), then its metrics over the images that ran (`metrics`), its
    predictions as `eval --save-predictions` writes them, and what `--plot` draws (`plot`)."""

    notes: List[str]  # what to tell the user (classes the model does not know)
    plot: dict  # set by `metrics`: {"kind": ..., ...} for sinks/eval_plot.py
    # predictions are a COCO results list and the metric is COCO's evaluation (the eval
    # extra's faster-coco-eval or pycocotools); such results can be read back (`load`)
    coco_results: ClassVar[Optional[str]] = None  # its result field: "bbox", "keypoints"

    def add(self, index: int, result: Result) -> None:
        raise NotImplementedError

    def metrics(self, done: List[int]) -> TaskMetrics:
        raise NotImplementedError

    def predictions(self) -> List[dict]:
        raise NotImplementedError

    def load(self, rows: Any, source: str) -> None:
        """Predictions saved by `eval --save-predictions` (a COCO results list in the data's
        own image ids, elsewhere perhaps), read back as if this run had made them."""
        if self.coco_results is None:
            raise UsageError(f"{source}: only detection and pose predictions (COCO results "
                             "lists) are measured from a file")
        if not isinstance(rows, list):
            raise UsageError(f"{source}: not a COCO results list (a JSON list of results)")
        index = {image_id: n for n, image_id in enumerate(self.data.ids)}  # type: ignore[attr-defined]
        results = []
        for n, row in enumerate(rows):
            where = f"{source}: result {n}"
            if not isinstance(row, dict) or not all(k in row for k in (
                    "image_id", "category_id", "score", self.coco_results)):
                raise UsageError(f"{where}: needs image_id, category_id, score and "
                                 f"{self.coco_results}")
            if row["image_id"] not in index:
                raise UsageError(f"{where}: image_id {row['image_id']!r} is not an image of the "
                                 "data (the predictions of other data?)")
            values = row[self.coco_results]
            if not isinstance(values, list) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                    for v in values):
                raise UsageError(f"{where}: {self.coco_results} is not a list of finite numbers")
            category = self.data.class_key(row["category_id"])  # type: ignore[attr-defined]
            if category is None:
                raise UsageError(f"{where}: category_id {row['category_id']!r} is not a category of "
                                 "the data")
            results.append(dict(row, image_id=index[row["image_id"]], category_id=category))
        self.results = results  # type: ignore[attr-defined]


def prepare_image(source: ImageSource, spec: InputSpec, mode: str, resample: str = "lanczos",
                  keep_image: bool = False) -> tuple[np.ndarray, Prepared]:
    """Load one image (a JPEG at the scale the fit needs, unless --decode full), fit it
    (core/vision/preprocess.fit_pixels) and quantize it; results map onto the whole photo."""
    decoded = decode_image(source, spec.channels, spec.decode_size, mode)
    pixels, fit = fit_pixels(decoded.image, spec.size, mode, resample)
    tensor = quantize_input(pixels, spec.dtype, spec.scale, spec.zero_point, spec.mean, spec.std)
    image = kept_image(decoded, source, spec) if keep_image else None
    return tensor[None], Prepared(decoded.fit_of_photo(fit), image, source)


def kept_image(decoded: Decoded, source: ImageSource, spec: InputSpec) -> Optional[PILImage]:
    """The photo at its own size, for what draws on it (--annotate): decoded again whole when
    the model's input was decoded at a reduced scale."""
    return decoded.image if decoded.scale == 1 else load_image(source, spec.channels)


def bind(name: str, model: ImageModel, options: Optional[dict] = None) -> "BoundTask":
    """Task `name` (tasks/__init__.py) with `options` on an opened ImageModel."""
    return BoundTask(kind(name), model, options)


class BoundTask:
    """A task kind with its options, bound to an opened model: what batch, camera, cluster and
    the API run. `on(engine)` gives the same task for another engine of the model (each TPU's
    thread in the camera, a CPU twin) with its own plan."""

    def __init__(self, kind: TaskKind, model: ImageModel, options: Optional[dict] = None,
                 engine: Optional[Engine] = None) -> None:
        self.kind, self.model = kind, model
        self.spec = replace(model.spec, decode=decode_of(model.spec.decode, task_default=kind.decode))
        self.options = kind.settle(options)
        self.engine = engine if engine is not None else model.engine
        self.plan = kind.plan_for(model, self.engine, self.options)
        self._others: dict = {}

    @property
    def name(self) -> str:
        return self.kind.name

    def warnings(self, labels_file: Optional[PathLike] = None) -> List[str]:
        """What to tell the user before running this model (labels that do not fit it);
        `labels_file` names where the labels came from, for the message."""
        return self.kind.warnings(self.model, labels_file)

    def on(self, engine: Engine) -> "BoundTask":
        if engine is self.engine:
            return self
        bound = self._others.get(id(engine))
        if bound is None:
            bound = self._others.setdefault(id(engine),
                                            BoundTask(self.kind, self.model, self.options, engine))
        return bound

    def prepare(self, source: ImageSource, keep_image: bool = False) -> tuple[np.ndarray, Prepared]:
        return self.kind.prepare(source, self.spec, self.options, self.plan, keep_image)

    def prepare_frame(self, frame: np.ndarray) -> tuple[np.ndarray, Prepared]:
        return self.kind.prepare_frame(frame, self.spec, self.options, self.plan)

    def interpret(self, outputs: List[np.ndarray], prepared: Prepared) -> Result:
        return self.kind.interpret(outputs, prepared, self.plan, self.options, self.model.labels)

    def empty(self) -> TaskFields:
        return self.kind.empty()

    def run(self, image: ImageSource) -> Result:
        """One image on this task's engine, in the caller's thread."""
        tensor, prepared = self.prepare(image)
        return self.interpret(run_payload(self.engine, tensor), prepared)

    def run_frame(self, frame: np.ndarray) -> tuple[Result, float]:
        """One camera frame: (result, inference milliseconds)."""
        tensor, prepared = self.prepare_frame(frame)
        t0 = time.perf_counter()
        outputs = run_payload(self.engine, tensor)
        latency = (time.perf_counter() - t0) * 1000.0
        return self.interpret(outputs, prepared), latency


def annotate_frame(kind: Optional[TaskKind], img: np.ndarray, result: Result,
                   latency_ms: Optional[float], fps: Optional[float], device: str) -> np.ndarray:
    """A camera frame's overlay: the task's drawing, then the status line."""
    from edgeapp.core.vision.overlay import draw_status

    if kind is not None:
        kind.draw(img, result.fields, result.extras)
    if result.counting is not None:
        from edgeapp.core.vision.overlay import draw_counting

        draw_counting(img, *result.counting)
    return draw_status(img, latency_ms, fps, device)

