"""`edgeapp models`: Coral's published models (list, pull, path), and model names as MODEL."""

import json
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.command import Group
from edgeapp.cli.download import DownloadReporter
from edgeapp.cli.eval import run_eval
from edgeapp.cli.options import ReportFormat, ReportFormatOpt, choices, placement, say
from edgeapp.core.units import format_bytes
from edgeapp.errors import InvalidModel
from edgeapp.hw.runtime import available_runtimes, runtime_version
from edgeapp.tasks import internal_names as internal_task_names
from edgeapp.tasks import names as task_names

if TYPE_CHECKING:
    from edgeapp.flows.models import ModelDoc

app = typer.Typer(
    name="models", no_args_is_help=True, cls=Group,
    short_help="Coral's published models by name: list, pull (verified), path",
    help="Coral's published models (classification, detection, pose, segmentation), each a CPU "
         "model and its Edge TPU build: pulled, verified, usable by name as any command's MODEL.")


TaskName = choices("TaskName", task_names() + internal_task_names())  # the tasks registry's


NamesArg = Annotated[List[str], typer.Argument(help="Model names (see `edgeapp models list`).",
                                               show_default=False)]


@app.command("list")
def list_command(
    task: Annotated[Optional[TaskName], typer.Option("--task", help="Only models for this task.",
                                                     show_default=False)] = None,
    fmt: ReportFormatOpt = ReportFormat.table,
) -> None:
    """Every model: task, input size, files, download size, how it is verified, whether cached."""
    from edgeapp.cli.table import left_out_note, output_width, render
    from edgeapp.flows import models as m

    reg = m.registry()
    entries = [e for e in reg.models.values() if task is None or e.task == task.value]
    rows = [_model_doc(e, reg) for e in entries]
    if fmt is ReportFormat.json:
        typer.echo(json.dumps({"source": reg.source, "commit": reg.commit, "registry": reg.origin,
                               "url_template": m.url_template(reg), "cache": str(m.models_dir()),
                               "models": rows}, indent=2))
        return
    table = [("NAME", "TASK", "INPUT", "SIZE", "PUBLISHED", "CACHED", "VERIFIED BY", "FILES")]
    for e, r in zip(entries, rows):
        w_h = r["input"]
        table.append((r["name"], r["task"], f"{w_h[0]}x{w_h[1]}" if w_h else "?",
                      format_bytes(r["size"]), published_text(r["published"]), m.cached_text(e),
                      _verification(r["files"]),
                      _files_text([f["path"] for f in r["files"]])))
    width = output_width()
    lines, left_out = render(table[0], table[1:], priority=(0, 1, 2, 4, 5, 3, 6, 7), width=width)
    typer.echo("\n".join(lines))
    note = left_out_note(left_out, width, "`edgeapp models list --format json`")
    if note:
        say(f"note: {note}")
    lacking = [r["name"] for r in rows if r["needs_ops"]]
    if lacking:
        ops = sorted({op for r in rows for op in r["needs_ops"]})
        several = len(lacking) > 1
        say(f"note: {', '.join(lacking)} need{'' if several else 's'} the custom operator(s) "
            f"{', '.join(ops)}, which the installed TFLite runtime ({', '.join(_runtimes()) or 'none'}) "
            f"lacks: {'they' if several else 'it'} will not run here")
    say(f"{len(rows)} model(s) from {reg.source}@{reg.commit[:12]}; cache: {m.models_dir()}; "
        "`edgeapp models pull NAME` fetches one, or name it as MODEL in any command; "
        "PUBLISHED: Coral's own accuracy (coral.ai/models), `edgeapp models eval NAME --data DATA` "
        "measures it on yours")


@app.command("pull")
def pull_command(
    names: NamesArg,
    edgetpu: Annotated[bool, typer.Option(
        "--edgetpu/--cpu-only",
        help="Also fetch the compiled *_edgetpu.tflite twin (default), or only the CPU model.")] = True,
    fmt: ReportFormatOpt = ReportFormat.table,
) -> None:
    """Download models into the cache, verify every file, and print where they are.

    Also writes each model's sidecar JSON (labels, preprocessing), so classify and detect need
    no flags. Resumes after a cut connection; honours http_proxy/https_proxy/no_proxy; EDGEAPP_MODELS_URL
    points it at a mirror or a file:// copy.
    """
    from edgeapp.flows import models as m

    reg = m.registry()
    entries = [m.lookup(reg, n) for n in dict.fromkeys(names)]  # every name checked before any download
    docs = []
    for entry in entries:
        with DownloadReporter() as rep:
            pulled = m.pull(entry, reg, edgetpu=edgetpu, reporter=rep)
        lacking = m.missing_ops(entry)
        if lacking:
            say("warning: " + m.missing_ops_note(entry, lacking, _runtimes()))
        files = [{"role": f.role, "path": str(f.path), "how": f.how, "verified_by": f.ref.verified_by}
                 for f in pulled.files]
        docs.append({"name": entry.name, "task": entry.task, "files": files,
                     "sidecar": str(pulled.sidecar) if pulled.sidecar else None})
        if fmt is ReportFormat.table:
            typer.echo(f"{entry.name} ({entry.task})")
            for f in files:
                how = "SHA-256" if f["verified_by"] == "sha256" else "git object id"
                typer.echo(f"  {f['role']:<9} {f['path']}  ({f['how']}, {how} verified)")
            if pulled.sidecar:
                typer.echo(f"  {'sidecar':<9} {pulled.sidecar}")
    if fmt is ReportFormat.json:
        typer.echo(json.dumps({"models": docs}, indent=2))


@app.command("path")
def path_command(
    name: Annotated[str, typer.Argument(help="A model name (see `edgeapp models list`).",
                                        show_default=False)],
    edgetpu: Annotated[bool, typer.Option(
        "--edgetpu", help="The compiled *_edgetpu.tflite twin instead of the CPU model.")] = False,
    fmt: ReportFormatOpt = ReportFormat.table,
) -> None:
    """Print the local path of a pulled model (segments: one per line); exit 4 when not pulled.

    JSON shows every file (CPU model, twin, labels, sidecar) and whether it is there.
    """
    from edgeapp.flows import models as m

    reg = m.registry()
    entry = m.lookup(reg, name)
    if fmt is ReportFormat.json:
        files = {role: {"path": str(m.local_path(ref)), "cached": m.local_path(ref).is_file()}
                 for role, ref in entry.files()}
        side = m.sidecar_of(entry)
        if side is not None:
            files["sidecar"] = {"path": str(side), "cached": side.is_file()}
        typer.echo(json.dumps({"name": entry.name, "task": entry.task, "files": files}, indent=2))
        return
    if entry.is_pipeline:
        refs = list(entry.segments)
    else:
        ref = entry.edgetpu if edgetpu else entry.cpu
        if ref is None:
            raise InvalidModel(f"{name} has no {'Edge TPU' if edgetpu else 'CPU'} model")
        refs = [ref]
    paths = [m.local_path(r) for r in refs]
    absent = [p for p in paths if not p.is_file()]
    if absent:
        flag = "" if edgetpu or entry.is_pipeline else " --cpu-only"
        raise InvalidModel(f"{name} is not pulled ({absent[0]} is absent): run "
                           f"`edgeapp models pull{flag} {name}`")
    for p in paths:
        typer.echo(str(p))


def _model_doc(entry, reg) -> "ModelDoc":
    from edgeapp.flows import models as m

    files = []
    for role, ref in entry.files():
        local = m.local_path(ref)
        files.append({"role": role, "path": ref.path, "size": ref.size, "sha256": ref.sha256,
                      "git_blob_sha1": ref.git_blob_sha1 or None, "verified_by": ref.verified_by,
                      "url": m.url_of(reg, ref), "local": str(local), "cached": local.is_file()})
    size = entry.size
    if size is None and all(f["cached"] for f in files):
        size = sum(Path(f["local"]).stat().st_size for f in files)
    roles = m.cached_roles(entry)
    return {"name": entry.name, "task": entry.task, "description": entry.description,
            "input": list(entry.input) if entry.input else _cached_input(entry),
            "size": size, "cached": m.cached_text(entry) == "yes", "cached_models": roles,
            "needs_ops": m.missing_ops(entry), "published": dict(entry.published) or None,
            "files": files}


PUBLISHED_NAMES = (("top1", "top-1"), ("map", "mAP"), ("miou", "mIoU"), ("oks_ap", "OKS AP"))


def published_text(published: Optional[dict]) -> str:
    """The headline accuracy Coral published ("top-1 81.2%", "mAP 25.6%"), or "-"."""
    for key, words in PUBLISHED_NAMES:
        if published and key in published:
            return f"{words} {published[key] * 100:.1f}%"
    return "-"


@app.command("eval")
def models_eval_command(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="A model's name (`edgeapp models list`).",
                                        show_default=False)],
    data: Annotated[Path, typer.Option("--data", metavar="DATA", show_default=False,
                                       help="Labelled data, as `edgeapp eval` reads it.")],
    images: Annotated[Optional[Path], typer.Option(
        "--images", metavar="DIR", show_default=False, help="A COCO JSON's images.")] = None,
    fmt: ReportFormatOpt = ReportFormat.table,
    save_predictions: Annotated[Optional[Path], typer.Option(
        "--save-predictions", metavar="DIR", show_default=False,
        help="Write the predictions into DIR (see `edgeapp eval`).")] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", min=0, show_default=False,
                                                   help="Threads decoding images ahead.")] = None,
) -> None:
    """Run `edgeapp eval` on one of Coral's models (pulled when not cached), beside the accuracy
    Coral published for it."""
    from edgeapp.flows import models as m

    entry = m.lookup(m.registry(), name)
    run_eval([entry.name], placement(ctx, device=None), data, images, None, None, None, fmt,
             save_predictions, None, workers, published=dict(entry.published) or None)


def _runtimes() -> List[str]:
    """The installed TFLite runtimes, named with their versions (none is imported)."""
    return [f"{name} {runtime_version(name)}" for name in available_runtimes()]


def _cached_input(entry) -> Optional[List[int]]:
    """Input (width, height) of a cached model when the registry does not know it."""
    from edgeapp.flows import models as m

    ref = entry.cpu or entry.edgetpu or (entry.segments[0] if entry.segments else None)
    if ref is None or not m.local_path(ref).is_file():
        return None
    from edgeapp.core.tflite.model import load_model

    try:
        shape = load_model(m.local_path(ref)).input_tensors[0].shape
    except (InvalidModel, IndexError):
        return None
    return [int(shape[2]), int(shape[1])] if len(shape) == 4 else None


def _verification(files: List[dict]) -> str:
    """SHA-256 or git id; when mixed, the method of most files and the roles that differ."""
    sha = [f["role"] for f in files if f["verified_by"] == "sha256"]
    git = [f["role"] for f in files if f["verified_by"] != "sha256"]
    if not git or not sha:
        return "SHA-256" if sha else "git id"
    def roles(rs: List[str]) -> str:
        segs = [r for r in rs if r.startswith("segment")]
        return ",".join([r for r in rs if not r.startswith("segment")] + (["segments"] if segs else []))
    if len(sha) >= len(git):
        return f"SHA-256; git id: {roles(git)}"
    return f"git id; SHA-256: {roles(sha)}"


def _files_text(paths: List[str]) -> str:
    """mobilenet_v2_1.0_224_quant{,_edgetpu}.tflite imagenet_labels.txt: short, still exact."""
    models = [p for p in paths if p.endswith(".tflite")]
    rest = [p for p in paths if not p.endswith(".tflite")]
    if len(models) == 2 and models[1] == models[0][: -len(".tflite")] + "_edgetpu.tflite":
        models = [models[0][: -len(".tflite")] + "{,_edgetpu}.tflite"]
    elif len(models) >= 2:
        import os.path

        head = os.path.commonprefix(models)
        tails = [p[len(head):] for p in models]
        tail = os.path.commonprefix([t[::-1] for t in tails])[::-1]
        middles = [t[: len(t) - len(tail)] for t in tails]
        models = [f"{head}{{{','.join(middles)}}}{tail}"]
    return " ".join(models + rest)
