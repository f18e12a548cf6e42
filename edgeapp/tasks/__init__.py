"""The tasks edgeapp runs: every module in this folder defining `KIND` is one, found here.

Every path (the task's command, camera, cluster, API, model registry, results files, overlay,
live view, MQTT) asks here; adding a task is adding a module to this folder (CONTRIBUTING.md,
"How to add a task"). A task's name is its module's name, and its module's docstring is its
command's help. Names and one-line summaries are read from the folder without importing the
modules, so `edgeapp --help` costs nothing; a task's module is imported on first use.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from typing_extensions import TypedDict

from edgeapp.errors import InvalidModel, UsageError

if TYPE_CHECKING:
    import numpy as np

    from edgeapp.core.meta import ModelMeta
    from edgeapp.core.vision.classify import ClassItem
    from edgeapp.core.vision.detect import ObjectItem
    from edgeapp.core.vision.pose import PoseItem
    from edgeapp.core.vision.segmentation import ClassShare
    from edgeapp.hw.runtime import Engine

_HERE = Path(__file__).resolve().parent
_NOT_TASKS = ("base", "model")  # what a task is, and an opened image model
_INTERNAL = "internal"  # the sub-package of tasks that run inside other commands (retrain's embed)
_found: Dict[str, Tuple[str, ...]] = {}
_kinds: dict = {}


class TaskFields(TypedDict, total=False):
    """A record's task fields: each task fills its own (`TaskKind.field`; an image that failed:
    `TaskKind.empty`), plus what its output folders add (segmentation's --mask file)."""
    classes: Union[List[ClassItem], List[ClassShare]]  # classify; segment: each class's share
    objects: List[ObjectItem]  # detect
    filtered: Dict[str, int]  # detect with box filters: objects each filter removed
    poses: List[PoseItem]  # pose
    mask: Optional[str]  # segment: the class map's PNG (--mask), else None
    embedding: Optional[np.ndarray]  # embed: the feature vector

def _discover(package: str, folder: Path) -> Tuple[str, ...]:
    if package not in _found:
        _found[package] = tuple(sorted(
            m.name for m in pkgutil.iter_modules([str(folder)])
            if not m.ispkg and not m.name.startswith("_") and m.name not in _NOT_TASKS))
    return _found[package]


def names() -> Tuple[str, ...]:
    """The task names, in the order commands and help list them (alphabetical)."""
    return _discover(__name__, _HERE)


def internal_names() -> Tuple[str, ...]:
    """Tasks other commands run (no command of their own)."""
    return _discover(f"{__name__}.{_INTERNAL}", _HERE / _INTERNAL)


def module_of(name: str) -> str:
    """The module defining task `name` (UsageError for an unknown one)."""
    if name in names():
        return f"{__name__}.{name}"
    if name in internal_names():
        return f"{__name__}.{_INTERNAL}.{name}"
    raise UsageError(f"unknown task {name!r}: one of {', '.join(names())}")


def kind(name: str) -> Any:
    """The TaskKind called `name` (UsageError for an unknown one)."""
    found = _kinds.get(name)
    if found is None:
        found = importlib.import_module(module_of(name)).KIND
        if found.name != name:
            raise TypeError(f"{module_of(name)} defines the task {found.name!r}: a task's name is "
                            "its module's")
        found = _kinds.setdefault(name, found)
    return found


def summary(name: str) -> str:
    """The first line of the task module's docstring (its command's one-line help), read
    without importing the module."""
    import ast

    module = module_of(name)
    spec = importlib.util.find_spec(module)
    source = spec.loader.get_source(module) if spec is not None and spec.loader is not None else None
    doc = ast.get_docstring(ast.parse(source)) if source else importlib.import_module(module).__doc__
    return (doc or name).strip().splitlines()[0]


def guess_task(engine: Engine) -> Optional[str]:
    """The task an opened model's outputs are for, or None when none claims it."""
    from edgeapp.tasks.model import input_size, op_names, output_shapes

    return guess_from(output_shapes(engine), op_names(engine), input_size(engine))


def guess_from(shapes: Sequence[Sequence[int]], ops: Sequence[str] = (),
               input_size: Optional[Tuple[int, int]] = None) -> Optional[str]:
    """The task these output shapes (and operator names, and the input (width, height)) are
    for; the most specific kinds are asked first (`TaskKind.guess_rank`, then the name)."""
    for n in sorted(names(), key=lambda n: (kind(n).guess_rank, n)):
        if kind(n).claims(shapes, ops, input_size):
            return n
    return None


def noun_for(shapes: Sequence[Sequence[int]], ops: Sequence[str] = ()) -> Optional[str]:
    """What a model with these outputs (and operators) is for, in words ("a detection model")."""
    found = guess_from(shapes, ops)
    return kind(found).noun if found is not None else None


def for_ultralytics(ultralytics_task: Optional[str]) -> Optional[str]:
    """The task whose `ultralytics_task` is the one Ultralytics' metadata names, or None."""
    if ultralytics_task is None:
        return None
    return next((n for n in names() if kind(n).ultralytics_task == ultralytics_task), None)


def task_for(engine: Engine, meta: Optional[ModelMeta] = None) -> str:
    """The task to run a model as when the user did not say: its metadata's (an edgeapp sidecar's
    task, or the task whose `ultralytics_task` an Ultralytics export names), else its outputs'."""
    from edgeapp.tasks.model import describe_outputs

    if meta is not None and meta.task in names():
        return str(meta.task)
    ultralytics = for_ultralytics(meta.ultralytics_task if meta is not None else None)
    if ultralytics is not None:
        return ultralytics
    found = guess_task(engine)
    if found is None:
        raise InvalidModel(f"{engine.model_path}: outputs {describe_outputs(engine)} are not those "
                           f"of any task edgeapp knows ({', '.join(names())}); use --task")
    return found


TRACK_LOW = "track_low"  # the option of a task that --track follows (TaskKind.tracks)


def options_for(name: str, options: Optional[Mapping[str, object]], model: str = "this model"
                ) -> Dict[str, object]:
    """The options task `name` takes, out of options meant for whichever task a model turns out
    to be (the camera's). An option only other tasks take is dropped when left at nothing or at
    their default, and is a UsageError when given (`camera classifier.tflite --tiles 2x2`
    would otherwise run without what was asked for, saying nothing)."""
    takes = kind(name).defaults
    kept: Dict[str, object] = {}
    for key, value in (options or {}).items():
        if key in takes:
            kept[key] = value
            continue
        if value is None or value is False or value == "" or value == () or value == []:
            continue
        if key == TRACK_LOW:  # --track's own check says what a model that cannot be tracked lacks
            continue
        owners = [n for n in names() if n != name and key in kind(n).defaults]
        if owners and all(value != kind(n).defaults[key] for n in owners):
            raise UsageError(f"--{key.replace('_', '-')} is an option of {' and '.join(owners)} "
                             f"models; {model} is a {name} model")
    return kept
