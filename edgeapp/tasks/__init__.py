"""The tasks edgeapp runs, one module each, and the one list of them.

Every path (batch, camera, cluster, API, CLI choices, model registry, results files, overlay,
live view, MQTT) asks here; adding a task is a module in this folder and a line in `_MODULES`
(CONTRIBUTING.md, "How to add a task"). Modules are imported on first use, so listing the
names costs nothing (`edgeapp --help`).
"""

from __future__ import annotations

import importlib
from typing import Any, Optional, Tuple

# name -> the module defining its `KIND`, in the order help and lists show them.
_MODULES = {
    "classify": "edgeapp.tasks.classify",
    "detect": "edgeapp.tasks.detect",
    "pose": "edgeapp.tasks.pose",
    "segment": "edgeapp.tasks.segment",
}
# Tasks that run inside other commands only (retrain extracts embeddings): no command, camera
# mode or MQTT events of their own.
_INTERNAL = {
    "embed": "edgeapp.tasks.embed",
}
_kinds: dict = {}


def names() -> Tuple[str, ...]:
    """The task names, in the order commands and help list them."""
    return tuple(_MODULES)


def internal_names() -> Tuple[str, ...]:
    return tuple(_INTERNAL)


def kind(name: str) -> Any:
    """The TaskKind called `name` (UsageError for an unknown one)."""
    found = _kinds.get(name)
    if found is None:
        module = _MODULES.get(name) or _INTERNAL.get(name)
        if module is None:
            from edgeapp.errors import UsageError

            raise UsageError(f"unknown task {name!r}: one of {', '.join(names())}")
        found = _kinds.setdefault(name, importlib.import_module(module).KIND)
    return found


def guess_task(engine: Any) -> Optional[str]:
    """The task an opened model's outputs are for, or None when none claims it."""
    from edgeapp.tasks.model import input_size, op_names, output_shapes

    return guess_from(output_shapes(engine), op_names(engine), input_size(engine))


def guess_from(shapes: Any, ops: Any = (), input_size: Any = None) -> Optional[str]:
    """The task these output shapes (and operator names, and the input (width, height)) are
    for; the most specific kinds are asked first (`TaskKind.guess_rank`), the classifier, which
    takes any one vector, last."""
    for n in sorted(names(), key=lambda n: kind(n).guess_rank):
        if kind(n).claims(shapes, ops, input_size):
            return n
    return None


def task_for(engine: Any, meta_task: Optional[str] = None) -> str:
    """The task to run a model as when the user did not say: its metadata's, else its outputs'."""
    from edgeapp.errors import InvalidModel
    from edgeapp.tasks.model import describe_outputs

    if meta_task in names():
        return str(meta_task)
    found = guess_task(engine)
    if found is None:
        raise InvalidModel(f"{engine.model_path}: outputs {describe_outputs(engine)} are not those "
                           f"of any task edgeapp knows ({', '.join(names())}); use --task")
    return found
