"""One command per task, built from the task's own declaration (tasks/<name>.py).

A task command's signature is MODEL INPUTS..., --labels when the task names classes, the
task's options (`TaskKind.options` taken by the "command" path), then the options every task
command shares: the fields of cli/images.ImageOptions, which is also what the body gets (one
typed value); its help is the task module's docstring. The camera takes the tasks' "camera"
options the same way (`camera_parameters`).
Commands are built when first asked for, so `edgeapp --help` imports no task (cli/app.py).
"""

import inspect
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import typer
from typing_extensions import Annotated

from edgeapp.cli import options as shared
from edgeapp.cli.command import Command

_choice_types: Dict[Tuple[str, Tuple[str, ...]], type] = {}


def _parameter(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


def choice_type(option: Any) -> type:
    """The str Enum Typer shows and checks for an option's choices (one per option)."""
    key = (option.name, tuple(option.choices))
    if key not in _choice_types:
        title = "".join(part.title() for part in option.name.split("_"))
        _choice_types[key] = shared.choices(f"{title}Choice", option.choices)
    return _choice_types[key]


def option_parameter(option: Any, default: Any = inspect.Parameter.empty, help_text: Optional[str] = None,
                     ) -> inspect.Parameter:
    """A TaskOption as a Typer option parameter (`default`: another default, e.g. None for the
    camera, where each task keeps its own)."""
    value = option.default if default is inspect.Parameter.empty else default
    kind = choice_type(option) if option.choices else option.value_type
    if option.choices and value is not None:
        value = kind(value)
    text = help_text or option.help
    if help_text is None and option.default is None and option.default_text:
        text += f" Default: {option.default_text}."
    info = typer.Option(*option.flag_names, help=text, min=option.min, max=option.max,
                        metavar=option.metavar, show_default=value is not None)
    return _parameter(option.name, Annotated[Optional[kind] if value is None else kind, info], value)


def given_options(options: Sequence[Any], values: Dict[str, Any]) -> Tuple[dict, dict]:
    """(the task's options as plain values, {folder option: folder}) from a command's values."""
    settings = {o.name: shared.choice_value(values.get(o.name)) for o in options if not o.folder}
    folders = {o: values.get(o.name) for o in options if o.folder}
    return settings, folders


def build_command(signature: List[inspect.Parameter], body: Callable[..., None], name: str,
                  doc: str) -> Any:
    """A click command for `body(**values)` with this signature, through Typer (so its options
    read and convert as every other command's)."""
    def command(**values: Any) -> None:
        body(**values)

    command.__doc__ = doc
    command.__signature__ = inspect.Signature(signature)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in signature}
    wrapped = shared.cli_errors(command)
    wrapped.__signature__ = command.__signature__  # type: ignore[attr-defined]
    app = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False)
    app.command(name, cls=Command)(wrapped)
    return typer.main.get_command(app)


def task_command(name: str) -> Any:
    """The `edgeapp <task>` command of task `name`."""
    import dataclasses

    from edgeapp import tasks
    from edgeapp.cli.images import ImageOptions, run_images

    kind = tasks.kind(name)
    own = kind.options_for("command")
    shared = [_parameter(f.name, f.type, f.default if f.default is not dataclasses.MISSING
                         else inspect.Parameter.empty)
              for f in dataclasses.fields(ImageOptions) if f.name != "labels" or kind.labels]
    signature = [_parameter("ctx", typer.Context, inspect.Parameter.empty)]
    at = 3 if kind.labels else 2  # MODEL INPUTS [--labels], then the task's own options
    signature += shared[:at] + [option_parameter(o) for o in own] + shared[at:]

    def run(ctx: typer.Context, **values: Any) -> None:
        settings, folders = given_options(own, values)
        run_images(ctx, name, ImageOptions.of(values), settings, folders=folders)

    doc = module_doc(tasks.module_of(name))
    return build_command(signature, run, name, doc)


def camera_parameters() -> Tuple[List[inspect.Parameter], List[Any]]:
    """The tasks' camera options, each flag once (default None: each task keeps its own), and
    the options themselves. Two tasks spelling one option differently is a bug of theirs."""
    from edgeapp import tasks

    merged: Dict[str, List[Tuple[str, Any]]] = {}
    for name in tasks.names():
        for option in tasks.kind(name).options_for("camera"):
            merged.setdefault(option.name, []).append((name, option))
    params, options = [], []
    for key, declared in merged.items():
        first = declared[0][1]
        for task, option in declared[1:]:
            if (option.flag_names, option.value_type, option.choices) != \
                    (first.flag_names, first.value_type, first.choices):
                raise TypeError(f"tasks {declared[0][0]} and {task} declare --{key} differently")
        words = [_default_words(option) for _, option in declared]
        if len(set(words)) == 1:
            text = f"{first.help} Default: {words[0]}."
        else:
            defaults = "; ".join(f"{task} {w}" for (task, _), w in zip(declared, words))
            text = f"{first.help} Default: each task's own ({defaults})."
        params.append(option_parameter(first, None, text))
        options.append(first)
    return params, options


def _default_words(option: Any) -> str:
    if option.default is None:
        return option.default_text or "none"
    return str(option.default)


def module_doc(module: str) -> str:
    import importlib

    return importlib.import_module(module).__doc__ or ""
