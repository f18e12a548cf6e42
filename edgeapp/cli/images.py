"""The one body of the task commands (cli/task_commands.py builds one per task of tasks/).

Everything here is the same for every task: inputs, --annotate and a task's own output folders,
local or --cluster, --device lists/all, the results writer, progress, the summary line and the
exit code.
"""

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

import typer

from edgeapp.cli.options import (
    AnnotateOpt,
    ChunkSizeOpt,
    ClusterOpt,
    CpuKernels,
    CpuKernelsOpt,
    CpuModelOpt,
    DecodeOpt,
    DeviceOpt,
    FastDecodeOpt,
    FormatOpt,
    InputsArg,
    LabelsOpt,
    MeanOpt,
    ModelArg,
    NoProbeOpt,
    OutputOpt,
    OverwriteOpt,
    PerformanceOpt,
    ResumeOpt,
    RuntimeOpt,
    ShipBytesOpt,
    StdOpt,
    ThreadsOpt,
    TpuReconnectOpt,
    WorkersOpt,
    check_common,
    decode_choice,
    decode_workers,
    placement,
    progress_bar,
    resolved,
    results_format,
    resumable,
    say,
)
from edgeapp.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from edgeapp.flows.open_task import Placement
    from edgeapp.tasks.base import Prepared, Result, TaskKind

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
                         performance=self.performance, reconnect=self.tpu_reconnect)


class Folders:
    """The image folders a run writes into, checked before any work: --annotate, and a task's
    own (TaskOption.folder, e.g. segment's --mask); their files are never taken as inputs."""

    def __init__(self, annotate: Optional[Path], extra: Optional[Dict[Any, Optional[Path]]] = None) -> None:
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


def run_images(ctx: typer.Context, task: str, values: ImageOptions, options: dict, *,
               folders: Optional[Dict[Any, Optional[Path]]] = None) -> None:
    """Run `task` with `options` (the task's own, as plain values) over the command's inputs, as
    its shared `values` say. `folders` {TaskOption: folder}: the task's own output folders given.
    """
    from edgeapp.flows.inputs import expand_inputs
    from edgeapp.tasks import kind as task_kind

    v = values
    kind = task_kind(task)
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
        stats, where = _on_cluster(ctx, task, v, options, paths, fmt)
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
    from edgeapp.hw.hostinfo import usable_cores
    from edgeapp.sinks.records import Layout

    replicas = max(1, min(usable_cores(), len(paths)))  # one image needs one interpreter, not one per core
    model, place = resolved(v.model, v.placement(ctx))
    with open_task(model, task, place, options=options, labels_file=v.labels, mean=v.mean, std=v.std,
                   decode=decode_choice(v.decode, v.fast_decode), on_notice=say,
                   cpu_replicas=replicas) as opened:
        for note in opened.notices:
            say(note)
        for note in opened.task.kind.warnings(opened.model, v.labels):
            say(f"warning: {note}")
        engine = opened.engine
        writer = _writer(Layout(opened.task.kind), fmt, v, (engine.model_path, engine.requested_model))
        with writer, resumable(writer, v.output), progress_bar(len(paths), task) as advance:
            workers = decode_workers(v.workers) if len(paths) > 1 else 0  # one image: no thread
            stats = run_batch(paths, opened.runner, opened.task, writer, workers=workers,
                              progress=advance, on_result=hook)
        return stats, opened.where


def _on_cluster(ctx: typer.Context, task: str, v: ImageOptions, options: dict, paths: List[str],
                fmt) -> tuple:
    from edgeapp.cli.options import resolve_model
    from edgeapp.core.labels import read_labels
    from edgeapp.flows.cluster import Job, run_cluster
    from edgeapp.sinks.records import Layout
    from edgeapp.tasks import kind

    model, _ = resolve_model(v.model, "all")  # a Coral model's name: both files, the workers choose
    place = v.placement(ctx)
    job = Job(task, str(model), place, labels=read_labels(v.labels) if v.labels else None,
              mean=v.mean, std=v.std, decode=decode_choice(v.decode, v.fast_decode),
              options=kind(task).settle(options), decode_workers=decode_workers(v.workers))
    writer = _writer(Layout(kind(task)), fmt, v, (job.model, place.engine.cpu_model))
    with writer, resumable(writer, v.output), progress_bar(len(paths), task) as advance:
        stats = run_cluster(paths, job, writer, v.cluster, v.ship_bytes, v.chunk_size, advance)
    return stats, f"the cluster {v.cluster}"


def _writer(layout: Any, fmt, v: ImageOptions, models: tuple):
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
    from edgeapp.sinks.records import check_output

    if v.resume and v.overwrite:
        raise UsageError("--resume and --overwrite contradict each other (one goes on, one "
                         "replaces): give one")
    check_output(fmt, v.output, v.resume, v.overwrite)
