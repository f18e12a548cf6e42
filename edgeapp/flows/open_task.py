"""Opening a model for a task: the one way the CLI, the camera, the cluster's workers and the
Python API do it.

A MODEL that names one of Coral's published models is pulled first; the model opens where
--device says (one device, several Edge TPUs, a segment pipeline, the CPU twin as a fallback);
labels and normalization come from the arguments, else the model's sidecar or metadata; the
task is the one asked for, else the model's metadata's, else what its outputs are for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional

from edgeapp.core.edgetpu.pipeline_segments import find_segment_files
from edgeapp.core.tflite.model import load_model, map_model_file
from edgeapp.errors import InvalidModel
from edgeapp.execution.placement import Notices, open_runner
from edgeapp.execution.runner import Runner
from edgeapp.flows.cascade import Cascade, parse_on, parse_then
from edgeapp.hw.runtime import Engine, EngineOptions
from edgeapp.hw.worker import events as engine_events
from edgeapp.hw.worker.events import EngineEvent
from edgeapp.tasks import kind, names, options_for, task_for
from edgeapp.tasks.base import BoundTask, bind
from edgeapp.tasks.model import ImageModel, image_model

if TYPE_CHECKING:
    from edgeapp.core.naming import PathLike

Notice = Callable[[str], None]


@dataclass
class OpenTask:
    """An opened model, where it runs, and the task bound to it. Close it (or use `with`) to
    end the runner's threads. `notices`: what opening it has to tell the user (the CPU twin
    runs, a TPU was skipped), for the caller to say."""

    runner: Runner
    model: ImageModel
    task: BoundTask
    notices: List[str] = field(default_factory=list)
    cascade: Optional[Cascade] = None  # --then: the second model, run on the crops of the boxes
    engine_events: List[EngineEvent] = field(default_factory=list)

    @property
    def engine(self) -> Engine:
        return self.runner.engine

    @property
    def where(self) -> str:
        """Where it runs, for summaries ("cpu", "usb:0, usb:1", "usb:0, then cpu")."""
        return self.runner.label

    def close(self) -> None:
        self.runner.close()
        if self.cascade is not None:
            self.cascade.close()

    def with_cascade(self, hook: Optional[Callable] = None) -> Optional[Callable]:
        """A batch's per-image hook: the cascade's second model on the crops first (when there
        is one), then `hook` (--annotate draws what both found)."""
        return self.cascade.hook(hook) if self.cascade is not None else hook

    def __enter__(self) -> "OpenTask":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class Placement:
    """Where and how to run: --device, how each engine opens (`engine`: --cpu-model, --runtime,
    --threads, --cpu-kernels, --no-probe, --performance) and --reconnect (plain data: the
    cluster ships it to its workers)."""

    device: str = "auto"
    engine: EngineOptions = EngineOptions()
    reconnect: float = 0.0  # seconds to wait for an Edge TPU that vanished mid-run


def open_task(model: PathLike, task: Optional[str] = None, place: Placement = Placement(), *,
              options: Optional[dict] = None, labels_file: Optional[PathLike] = None,
              labels: Optional[dict] = None, mean: Optional[float] = None,
              std: Optional[float] = None, decode: Optional[str] = None,
              on_notice: Optional[Notice] = None, frames: bool = False, cpu_replicas: int = 1,
              strict_options: bool = True) -> OpenTask:
    """Open `model` on `place` and bind `task` (None: the model's own) with `options`.

    A Coral model's name is pulled quietly (flows.models.resolve; the CLI resolves it first,
    with a progress bar). What opening has to say comes back in `OpenTask.notices`;
    `on_notice` hears what happens later (a TPU failing over). `frames`: the runner takes camera frames
    and each device's thread runs the whole task on its frame (prepare, invoke, interpret),
    one frame per device in flight; else it takes prepared tensors (batches).
    `cpu_replicas`: one-thread CPU interpreters side by side when the run lands on the CPU.
    `strict_options` False: options the task does not take are dropped (the camera's options
    are for whichever task the model turns out to be), not refused.
    """
    notices = Notices()
    path, device = Path(str(model)), place.device
    if find_segment_files(path) is None:
        path, name_notice = _resolve_quietly(path, device)
        if name_notice:  # auto and no Edge TPU: the name's CPU build, said once, on the CPU
            notices(name_notice)
            device = "cpu"
        if not path.is_file():  # missing, a folder, a FIFO: the model's error, whatever the device
            map_model_file(path)
    holder: dict = {}
    kw: dict = {}
    if frames:
        kw = {"work": lambda engine, frame: holder["task"].on(engine).run_frame(frame), "depth": 1}
    heard: List[EngineEvent] = []
    with engine_events.listening(heard.append, notices):
        try:
            runner = open_runner(path, device, place.engine, on_notice=notices,
                                 cpu_replicas=cpu_replicas, reconnect=place.reconnect, **kw)
        except InvalidModel:
            _explain_unopenable(path)
            raise
        try:
            loaded = image_model(runner.engine, runner.meta_path, labels_file, mean, std, decode,
                                 labels)
            name = task or task_for(runner.engine, loaded.meta)
            if not strict_options:
                options = options_for(name, options, path.name)
            bound = holder["task"] = bind(name, loaded, options)
            cascade = open_cascade(bound, place, notices) if bound.options.get("then") else None
        except BaseException:
            runner.close()
            raise
    notices.opening, notices.later = False, on_notice
    return OpenTask(runner, loaded, bound, notices.kept, cascade, heard)


def open_cascade(first: BoundTask, place: Placement, notices: Notice) -> Cascade:
    """The second model of `--then TASK:MODEL` after `first`, opened where the first runs."""
    options = first.options
    task, model = parse_then(options["then"], first.name)
    on = parse_on(options.get("on"), first.model.labels)  # before the second model is opened
    second = open_task(model, task, place, on_notice=notices)
    for note in second.notices:
        notices(f"--then: {note}")
    return Cascade(second, on, options.get("then_every") or 15)


def _resolve_quietly(path: Path, device: str) -> tuple:
    if path.exists():
        return path, None
    from edgeapp.flows.models import resolve

    found = resolve(str(path), device)
    return (found.path, found.notice) if found is not None else (path, None)


def _explain_unopenable(path: Path) -> None:
    """A model the runtime cannot open that a task knows better (PoseNet without Coral's op):
    the task's one-line reason instead of the runtime's."""
    if not path.is_file():
        return
    try:
        parsed = load_model(path)
    except InvalidModel:
        return
    for name in names():
        why = kind(name).unopenable(str(path), parsed)
        if why:
            raise InvalidModel(why) from None
