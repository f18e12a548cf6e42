"""The one body of the task commands (cli/task_commands.py builds one per task of tasks/).

Everything here is the same for every task: inputs, --annotate and a task's own output folders,
local or --cluster, --device lists/all, the results writer, progress, the summary line and the
exit code.
"""

from pathlib import Path
from typing import Any, Dict, List, Optional

import typer

from edgeapp.cli.options import (
    check_common,
    decode_workers,
    placement,
    progress_bar,
    results_format,
    resumable,
    say,
)
from edgeapp.errors import ExitCode, UsageError


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

    def hook(self, kind: Any):
        """The per-image writer of these folders: (path, prepared, result) -> fields to add."""
        if not self.all():
            return None

        def write(path, prepared, result) -> Optional[dict]:
            if self.annotate is not None:
                self.annotate.annotate(path, prepared.image,
                                       lambda bgr: kind.draw(bgr, result.fields, result.extras))
            added: dict = {}
            for option, folder in self.extra.items():
                added.update(kind.to_folder(option, folder, path, result))
            return added or None

        return write


def run_images(ctx: typer.Context, task: str, options: dict, *,
               folders: Optional[Dict[Any, Optional[Path]]] = None) -> None:
    """Run `task` with `options` over the command's inputs, as its shared options say.

    `ctx.params` holds the shared options by name (model, inputs, labels, fmt, output, resume,
    mean, std, workers, fast_decode, device, cpu_model, threads, cpu_kernels, runtime,
    no_probe, cluster, ship_bytes, chunk_size, annotate). `folders` {TaskOption: folder}: the
    task's own output folders given.
    """
    from edgeapp.flows.inputs import expand_inputs
    from edgeapp.tasks import kind as task_kind

    p = ctx.params
    kind = task_kind(task)
    check_common(p, options)
    fmt = results_format(p.get("fmt"), p.get("output"))
    _check_output(fmt, p)
    writing = (["--annotate"] if p.get("annotate") else []) + [
        option.flag_names[0] for option, folder in (folders or {}).items() if folder is not None]
    if p.get("cluster") and writing:
        raise UsageError(f"{' and '.join(writing)} write files where the images are processed: "
                         "not with --cluster")
    out = Folders(p.get("annotate"), folders)  # OpenCV and the folders checked first
    paths = out.exclude_own(expand_inputs(p["inputs"], on_notice=say))
    if p.get("cluster"):
        stats, where = _on_cluster(ctx, task, options, paths, fmt)
    else:
        stats, where = _locally(ctx, task, options, paths, fmt, out.hook(kind))
    parts = stats.summary(where, p.get("output")) + out.summary(stats.ok)
    say("; ".join(parts))
    if stats.failed:
        raise typer.Exit(int(ExitCode.INPUTS_FAILED))


def _locally(ctx: typer.Context, task: str, options: dict, paths: List[str], fmt, hook) -> tuple:
    from edgeapp.cli.options import resolve_model
    from edgeapp.flows.batch import run_batch
    from edgeapp.flows.open_task import open_task
    from edgeapp.hw.hostinfo import usable_cores
    from edgeapp.sinks.records import Layout

    p = ctx.params
    replicas = max(1, min(usable_cores(), len(paths)))  # one image needs one interpreter, not one per core
    with open_task(p["model"], task, placement(ctx), options=options, labels_file=p.get("labels"),
                   mean=p.get("mean"), std=p.get("std"), fast_decode=p.get("fast_decode", False),
                   on_notice=say, resolve=resolve_model, cpu_replicas=replicas) as opened:
        for note in opened.task.kind.warnings(opened.model, p.get("labels")):
            say(f"warning: {note}")
        engine = opened.engine
        writer = _writer(Layout(opened.task.kind), fmt, p, (engine.model_path, engine.requested_model))
        with writer, resumable(writer, p), progress_bar(len(paths), task) as advance:
            workers = decode_workers(p.get("workers")) if len(paths) > 1 else 0  # one image: no thread
            stats = run_batch(paths, opened.runner, opened.task, writer, workers=workers,
                              progress=advance, on_result=hook)
        return stats, opened.where


def _on_cluster(ctx: typer.Context, task: str, options: dict, paths: List[str], fmt) -> tuple:
    from edgeapp.cli.options import resolve_model
    from edgeapp.core.labels import read_labels
    from edgeapp.flows.cluster import Job, run_cluster
    from edgeapp.sinks.records import Layout
    from edgeapp.tasks import kind

    p = ctx.params
    model, _ = resolve_model(p["model"], "all")  # a Coral model's name: both files, the workers choose
    place = placement(ctx)
    job = Job(task, str(model), place, labels=read_labels(p["labels"]) if p.get("labels") else None,
              mean=p.get("mean"), std=p.get("std"), fast_decode=p.get("fast_decode", False),
              options=kind(task).settle(options), decode_workers=decode_workers(p.get("workers")))
    writer = _writer(Layout(kind(task)), fmt, p, (job.model, place.cpu_model))
    with writer, resumable(writer, p), progress_bar(len(paths), task) as advance:
        stats = run_cluster(paths, job, writer, p["cluster"], p.get("ship_bytes", False),
                            p.get("chunk_size", 16), advance)
    return stats, f"the cluster {p['cluster']}"


def _writer(layout: Any, fmt, p: dict, models: tuple):
    """The results (stdout or --output): --resume appends only to results of `models` (the
    paths this run's records name; a compiled model and its CPU twin count as one)."""
    from edgeapp.flows.batch import check_resumed_model

    ours = [str(m) for m in models if m]
    return layout.writer(fmt, p.get("output"), p.get("resume", False),
                         check_models=lambda recorded: check_resumed_model(recorded, *ours),
                         overwrite=p.get("overwrite", False))


def _check_output(fmt, p: dict) -> None:
    """The results file's options, before a model is opened: --resume and --overwrite
    contradict each other, and the rest is the records sink's rule."""
    from edgeapp.sinks.records import check_output

    if p.get("resume") and p.get("overwrite"):
        raise UsageError("--resume and --overwrite contradict each other (one goes on, one "
                         "replaces): give one")
    check_output(fmt, p.get("output"), p.get("resume", False), p.get("overwrite", False))
