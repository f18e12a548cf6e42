"""The task commands: one per task, built from the task's own declaration (tasks/<name>.py),
and the one body they all run.

A task command's signature is MODEL INPUTS..., --labels when the task names classes, the
task's options (`TaskKind.options` taken by the "command" path), then the options every task
command shares: the fields of `ImageOptions`, which is also what the body gets (one typed
value); its help is the task module's docstring. The camera takes the tasks' "camera" options
the same way (`camera_parameters`). Commands are built when first asked for, so
`edgeapp --help` imports no task (cli/app.py).

The body (`run_images`) is the same for every task: inputs, --annotate and a task's own output
folders, local or --cluster, --device lists/all, the results writer, progress, the summary line
and the exit code.
"""

import dataclasses
import importlib
import inspect
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import typer
from typing_extensions import Annotated

from edgeapp import tasks
from edgeapp.cli.command import Command
from edgeapp.cli.options import (
    AnnotateOpt,
    ChunkSizeOpt,
    ClusterOpt,
    CocompiledCheck,
    CocompiledCheckOpt,
    CpuKernels,
    CpuKernelsOpt,
    CpuModelOpt,
    DecodeOpt,
    DeviceOpt,
    FastDecodeOpt,
    FormatOpt,
    InputsArg,
    InvokeTimeoutOpt,
    IsolateOpt,
    LabelsOpt,
    MeanOpt,
    ModelArg,
    NoProbeOpt,
    OutputOpt,
    OverwriteOpt,
    PerformanceOpt,
    Recover,
    RecoverOpt,
    ResumeOpt,
    RetryTpuOpt,
    RuntimeOpt,
    ShipBytesOpt,
    StdOpt,
    ThreadsOpt,
    TpuReconnectOpt,
    WorkersOpt,
    check_common,
    choice_value,
    choices,
    decode_choice,
    placement,
    progress_bar,
    resolve_model,
    resolved,
    results_format,
    resumable,
    say,
)
from edgeapp.errors import ExitCode, UsageError
from edgeapp.hw.hostinfo import decode_workers, usable_cores
from edgeapp.sinks.records import Layout, check_output

if TYPE_CHECKING:
    from edgeapp.flows.open_task import Placement
    from edgeapp.tasks.base import Prepared, Result, TaskKind, TaskOption

    Hook = Callable[[str, Prepared, Result], Optional[dict]]  # what a batch calls per image


@dataclass
class ImageOptions:
    """What a task command was given, built once from its parameters (cli/task_commands.py).

    Each field is one parameter: its annotation declares the flag, its default is the option's.
    MODEL, INPUTS and --labels (for a task that names classes) come first, then the task's own
    options (tasks/<name>.py), then the rest in this order: the options every task command
    shares. To add one, add a field here (its `...Opt` in cli/options.py when others share it)
    and read it below as `values.<name>`.
    """

    model: ModelArg
    inputs: InputsArg
    labels: LabelsOpt = None
    annotate: AnnotateOpt = None
    fmt: FormatOpt = None
    output: OutputOpt = None
    resume: ResumeOpt = False
    overwrite: OverwriteOpt = False
    mean: MeanOpt = None
    std: StdOpt = None
    workers: WorkersOpt = None
    decode: DecodeOpt = None
    fast_decode: FastDecodeOpt = False
    device: DeviceOpt = None
    cpu_model: CpuModelOpt = None
    threads: ThreadsOpt = None
    cpu_kernels: CpuKernelsOpt = CpuKernels.fast
    runtime: RuntimeOpt = None
    no_probe: NoProbeOpt = False
    performance: PerformanceOpt = None
    tpu_reconnect: TpuReconnectOpt = 0.0
    isolate: IsolateOpt = None
    invoke_timeout: InvokeTimeoutOpt = None
    recover: RecoverOpt = Recover.reset
    retry_tpu: RetryTpuOpt = 60.0
    cocompiled_check: CocompiledCheckOpt = CocompiledCheck.warn
    cluster: ClusterOpt = None
    ship_bytes: ShipBytesOpt = False
    chunk_size: ChunkSizeOpt = 16

    @classmethod
    def of(cls, values: Dict[str, Any]) -> "ImageOptions":
        """The command's values (its keyword arguments), the task's own left out."""
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    def placement(self, ctx: typer.Context) -> "Placement":
        return placement(ctx, device=self.device, cpu_model=self.cpu_model, runtime=self.runtime,
                         threads=self.threads, no_probe=self.no_probe, cpu_kernels=self.cpu_kernels,
                         performance=self.performance, reconnect=self.tpu_reconnect,
                         isolate=self.isolate, invoke_timeout=self.invoke_timeout,
                         recover=self.recover, retry_tpu=self.retry_tpu,
                         cocompiled_check=self.cocompiled_check)


_choice_types: Dict[Tuple[str, Tuple[str, ...]], type] = {}


def _parameter(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


def choice_type(option: "TaskOption") -> type:
    """The str Enum Typer shows and checks for an option's choices (one per option)."""
    key = (option.name, tuple(option.choices))
    if key not in _choice_types:
        title = "".join(part.title() for part in option.name.split("_"))
        _choice_types[key] = choices(f"{title}Choice", option.choices)
    return _choice_types[key]


def option_parameter(option: "TaskOption", default: Any = inspect.Parameter.empty, help_text: Optional[str] = None,
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
    settings = {o.name: choice_value(values.get(o.name)) for o in options if not o.folder}
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
    app = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False)
    app.command(name, cls=Command)(command)
    return typer.main.get_command(app)


def task_command(name: str) -> Any:
    """The `edgeapp <task>` command of task `name`."""
    kind = tasks.kind(name)
    own = kind.options_for("command")
    common = [_parameter(f.name, f.type, f.default if f.default is not dataclasses.MISSING
                         else inspect.Parameter.empty)
              for f in dataclasses.fields(ImageOptions) if f.name != "labels" or kind.labels]
    signature = [_parameter("ctx", typer.Context, inspect.Parameter.empty)]
    at = 3 if kind.labels else 2  # MODEL INPUTS [--labels], then the task's own options
    signature += common[:at] + [option_parameter(o) for o in own] + common[at:]

    def run(ctx: typer.Context, **values: Any) -> None:
        settings, folders = given_options(own, values)
        run_images(ctx, kind, ImageOptions.of(values), settings, folders=folders)

    doc = module_doc(tasks.module_of(name))
    return build_command(signature, run, name, doc)


def camera_parameters() -> Tuple[List[inspect.Parameter], List[Any]]:
    """The tasks' camera options, each flag once (default None: each task keeps its own), and
    the options themselves. Two tasks spelling one option differently is a bug of theirs."""
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


def _default_words(option: "TaskOption") -> str:
    if option.default is None:
        return option.default_text or "none"
    return str(option.default)


def module_doc(module: str) -> str:
    return importlib.import_module(module).__doc__ or ""


class Folders:
    """The image folders a run writes into, checked before any work: --annotate, and a task's
    own (TaskOption.folder, e.g. segment's --mask); their files are never taken as inputs."""

    def __init__(self, annotate: Optional[Path], extra: Optional[Dict["TaskOption", Optional[Path]]] = None) -> None:
        from edgeapp.sinks.image_folder import ImageFolder

        self.annotate = ImageFolder(annotate) if annotate is not None else None
        self.extra = {option: ImageFolder(folder, option.flag_names[0])
                      for option, folder in (extra or {}).items() if folder is not None}

    def all(self) -> list:
        return ([self.annotate] if self.annotate else []) + list(self.extra.values())

    def exclude_own(self, paths: List[str]) -> List[str]:
        for folder in self.all():
            paths = folder.exclude_own(paths, say)
        return paths

    def summary(self, ok: int) -> List[str]:
        if not ok:
            return []
        named = [("annotated images", self.annotate)] if self.annotate else []
        named += [(option.folder, folder) for option, folder in self.extra.items()]
        return [f"{what} in {folder.folder}" for what, folder in named]

    def hook(self, kind: "TaskKind") -> "Optional[Hook]":
        """The per-image writer of these folders: (path, prepared, result) -> fields to add."""
        if not self.all():
            return None

        def write(path: str, prepared: "Prepared", result: "Result") -> Optional[dict]:
            if self.annotate is not None:
                self.annotate.annotate(path, prepared.image,
                                       lambda bgr: kind.draw(bgr, result.fields, result.extras))
            added: dict = {}
            for option, folder in self.extra.items():
                added.update(kind.to_folder(option, folder, path, result))
            return added or None

        return write


def run_images(ctx: typer.Context, kind: "TaskKind", values: ImageOptions, options: dict, *,
               folders: Optional[Dict["TaskOption", Optional[Path]]] = None) -> None:
    """Run the task `kind` with `options` (its own, as plain values) over the command's inputs,
    as its shared `values` say. `folders` {TaskOption: folder}: the task's own output folders given.
    """
    from edgeapp.flows.inputs import expand_inputs

    v = values
    task = kind.name
    check_common(options, model=v.model, mean=v.mean, std=v.std, device=v.device, cpu_model=v.cpu_model,
                 labels=v.labels)
    fmt = results_format(v.fmt, v.output)
    _check_output(fmt, v)
    writing = (["--annotate"] if v.annotate else []) + [
        option.flag_names[0] for option, folder in (folders or {}).items() if folder is not None]
    if v.cluster and writing:
        raise UsageError(f"{' and '.join(writing)} write files where the images are processed: "
                         "not with --cluster")
    out = Folders(v.annotate, folders)  # OpenCV and the folders checked first
    paths = out.exclude_own(expand_inputs(v.inputs, on_notice=say))
    if v.cluster:
        stats, where = _on_cluster(ctx, kind, v, options, paths, fmt)
    else:
        stats, where = _locally(ctx, task, v, options, paths, fmt, out.hook(kind))
    parts = stats.summary(where, v.output) + out.summary(stats.ok)
    say("; ".join(parts))
    if stats.failed:
        raise typer.Exit(int(ExitCode.INPUTS_FAILED))


def _locally(ctx: typer.Context, task: str, v: ImageOptions, options: dict, paths: List[str], fmt,
             hook) -> tuple:
    from edgeapp.flows.batch import run_batch
    from edgeapp.flows.open_task import open_task

    replicas = max(1, min(usable_cores(), len(paths)))  # one image needs one interpreter, not one per core
    model, place = resolved(v.model, v.placement(ctx))
    with open_task(model, task, place, options=options, labels_file=v.labels, mean=v.mean, std=v.std,
                   decode=decode_choice(v.decode, v.fast_decode), on_notice=say,
                   cpu_replicas=replicas) as opened:
        for note in opened.notices:
            say(note)
        for note in opened.task.warnings(v.labels):
            say(f"warning: {note}")
        engine = opened.engine
        writer = _writer(Layout(opened.task.kind), fmt, v, (engine.model_path, engine.requested_model))
        with writer, resumable(writer, v.output), progress_bar(len(paths), task) as advance:
            workers = decode_workers(v.workers) if len(paths) > 1 else 0  # one image: no thread
            stats = run_batch(paths, opened.runner, opened.task, writer, workers=workers,
                              progress=advance, on_result=opened.with_cascade(hook), on_notice=say,
                              opening_events=opened.engine_events)
        return stats, opened.where


def _on_cluster(ctx: typer.Context, kind: "TaskKind", v: ImageOptions, options: dict, paths: List[str],
                fmt) -> tuple:
    from edgeapp.core.labels import read_labels
    from edgeapp.flows.cluster import Job, run_cluster

    model, _ = resolve_model(v.model, "all")  # a Coral model's name: both files, the workers choose
    place = v.placement(ctx)
    job = Job(kind.name, str(model), place, labels=read_labels(v.labels) if v.labels else None,
              mean=v.mean, std=v.std, decode=decode_choice(v.decode, v.fast_decode),
              options=kind.settle(options), decode_workers=decode_workers(v.workers))
    writer = _writer(Layout(kind), fmt, v, (job.model, place.engine.cpu_model))
    with writer, resumable(writer, v.output), progress_bar(len(paths), kind.name) as advance:
        stats = run_cluster(paths, job, writer, v.cluster, v.ship_bytes, v.chunk_size, advance)
    return stats, f"the cluster {v.cluster}"


def _writer(layout: Layout, fmt, v: ImageOptions, models: tuple):
    """The results (stdout or --output): --resume appends only to results of `models` (the
    paths this run's records name; a compiled model and its CPU twin count as one)."""
    from edgeapp.flows.batch import check_resumed_model

    ours = [str(m) for m in models if m]
    return layout.writer(fmt, v.output, v.resume,
                         check_models=lambda recorded: check_resumed_model(recorded, *ours),
                         overwrite=v.overwrite)


def _check_output(fmt, v: ImageOptions) -> None:
    """The results file's options, before a model is opened: --resume and --overwrite
    contradict each other, and the rest is the records sink's rule."""
    if v.resume and v.overwrite:
        raise UsageError("--resume and --overwrite contradict each other (one goes on, one "
                         "replaces): give one")
    check_output(fmt, v.output, v.resume, v.overwrite)
