"""`edgeapp compile`: run Google's edgetpu_compiler, parse and judge what it did."""

import json
from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.options import ReportFormat, ReportFormatOpt, elapsed_spinner, say
from edgeapp.core.units import format_bytes
from edgeapp.errors import EdgeappError, UsageError

app = typer.Typer()


CompilerOpt = Annotated[Optional[str], typer.Option(
    "--compiler", help="The edgetpu_compiler executable, or a folder laid out as Google's "
                       "(default: $EDGETPU_COMPILER, else PATH, else the one `edgeapp compiler "
                       "install` installed).", show_default=False)]


@app.command("compile")
def compile_command(
    models: Annotated[List[Path], typer.Argument(
        metavar="MODEL...", help="A full-integer .tflite model (from `edgeapp convert`); several are "
                                 "co-compiled in one call, so one Edge TPU keeps all their parameters "
                                 "cached (the first ones given get the cache first).",
        show_default=False)],
    out_dir: Annotated[Optional[Path], typer.Option(
        "--out-dir", "-o", help="Folder for X_edgetpu.tflite and X_edgetpu.log (default: beside "
                                "the model).", show_default=False)] = None,
    segments: Annotated[Optional[int], typer.Option(
        "--segments", "-n", min=1, help="Split into N segments to pipeline over N Edge TPUs "
                                        "(X_segment_I_of_N_edgetpu.tflite).", show_default=False)] = None,
    min_runtime: Annotated[Optional[int], typer.Option(
        "--min-runtime", "-m", min=10, help="Oldest Edge TPU runtime version to support.",
        show_default=False)] = None,
    timeout: Annotated[Optional[float], typer.Option(
        "--timeout", "-t", min=1, help="Seconds before the compilation is stopped (default 180, "
                                       "5x that when the compiler runs emulated).",
        show_default=False)] = None,
    search_delegate: Annotated[bool, typer.Option(
        "--search-delegate", help="Retry with earlier stopping points when the compiler fails "
                                  "on an unsupported operation (what Ultralytics' YOLO export "
                                  "does).")] = False,
    search_step: Annotated[Optional[int], typer.Option(
        "--delegate-search-step", min=1, metavar="N",
        help="With --search-delegate: move the stopping point by N operations per try (the "
             "compiler's default 1; Ultralytics uses 30).", show_default=False)] = None,
    fmt: ReportFormatOpt = ReportFormat.table,
    compiler: CompilerOpt = None,
) -> None:
    """Compile MODEL for the Edge TPU with Google's edgetpu_compiler; several models are
    co-compiled in one call (their parameters stay cached together on one Edge TPU).

    The compiler is an x86-64 Linux program: edgeapp runs it natively there, through QEMU
    user-mode emulation on ARM Linux, in a linux/amd64 Docker container on macOS; `edgeapp
    compiler install` gets it. The report names the compiler version that ran and the Edge TPU
    runtime version the output needs. Exit code 0 when every operation is mapped, 8 when some
    or none run on the Edge TPU, 9 when the compiler fails or times out, 7 when it is not
    installed (`edgeapp check` predicts the mapping without it).
    """
    from edgeapp.flows.compile import compile_file

    if search_step is not None and not search_delegate:
        raise UsageError("--delegate-search-step goes with --search-delegate")
    model = models[0]
    try:
        with elapsed_spinner(f"compiling {', '.join(m.name for m in models)}"):
            report = compile_file(model, out_dir=out_dir, segments=segments, min_runtime=min_runtime,
                                  timeout=timeout, search_delegate=search_delegate,
                                  search_step=search_step, compiler=compiler, cocompile=models[1:],
                                  log=say)
    except EdgeappError as e:
        if fmt is ReportFormat.json:  # scripts read stdout: an error object, then the exit code
            typer.echo(json.dumps({"model": str(model), "error": str(e),
                                   "exit_code": int(e.exit_code)}, indent=2))
        raise
    emit(report, fmt.value)
    finish_compile(report)


def emit(report, fmt: str) -> None:
    if fmt == "json":
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        typer.echo(render_compile(report))


def finish_compile(report) -> None:
    """Errors and warnings on stderr, then the exit code of the judgement."""
    j = report.judgement
    for w in j.warnings:
        say(f"warning: {w}")
    for e in j.errors:
        say(f"error: {e}")
    if j.verdict == "failed" and not report.result.failures:  # an unknown failure: show its words
        tail = [ln for ln in (report.stdout + "\n" + report.stderr).splitlines() if ln.strip()][-5:]
        for line in tail:
            say(f"edgetpu_compiler: {line}")
    if j.exit_code:
        raise typer.Exit(j.exit_code)



VERDICTS = {"fully_mapped": "fully mapped to the Edge TPU",
            "partially_mapped": "partially mapped (some operations run on the CPU)",
            "not_mapped": "nothing mapped to the Edge TPU",
            "failed": "compilation failed"}


def _size(n) -> str:
    return "?" if n is None else format_bytes(n)


def render_compile(report) -> str:
    r = report.result
    from edgeapp.core.edgetpu.compiler_files import runtime_text

    runs = "" if report.runs == "native" else f", run through {report.runs}"
    rows = [("verdict", VERDICTS[report.judgement.verdict]),
            ("compiler", f"{report.compiler} (version {report.compiler_version or '?'}{runs})")]
    if report.judgement.verdict != "failed":
        rows.append(("needs runtime", runtime_text(report.runtime_needed)))
    if r.compile_ms is not None:
        rows.append(("compile time", f"{r.compile_ms} ms"))
    rows.append(("input", f"{r.input_model or report.model} ({format_bytes(r.input_size_bytes)})"))
    for o in report.outputs:
        if o["exists"]:
            rows.append(("output", f"{o['model']}" + (f" ({format_bytes(r.output_size_bytes)})"
                                                     if len(report.outputs) == 1 else "")))
    if report.cpu_model:
        rows.append(("CPU twin", report.cpu_model))
    if r.on_chip_used_bytes is not None:
        rows.append(("on-chip memory", f"{format_bytes(r.on_chip_used_bytes)} used, "
                                       f"{format_bytes(r.on_chip_remaining_bytes)} remaining"))
    if r.off_chip_bytes is not None:
        rows.append(("off-chip (streamed)", format_bytes(r.off_chip_bytes)))
    if r.subgraphs is not None:
        rows.append(("Edge TPU subgraphs", str(r.subgraphs)))
    if r.total_ops is not None:
        rows.append(("operations", f"{r.ops_tpu if r.ops_tpu is not None else '?'} of {r.total_ops} "
                                   f"on the Edge TPU, {r.ops_cpu if r.ops_cpu is not None else '?'} "
                                   "on the CPU"))
    for m in report.models:  # co-compiled: where each one's parameters went
        how = {"read": "read from the compiled file", "printed": "as the compiler printed"}.get(m["parameters"], "")
        rows.append((f"  {Path(m['model']).name}",
                     f"{_size(m['on_chip_bytes'])} on-chip, {_size(m['off_chip_bytes'])} off-chip"
                     + (f" ({how})" if how else "")))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    if r.operators:
        w = max(len("operator"), *(len(o.operator) for o in r.operators))
        lines += ["", f"{'operator':<{w}}  {'count':>5}  status"]
        lines += [f"{o.operator:<{w}}  {o.count:>5}  {o.status}" for o in r.operators]
    return "\n".join(lines)
