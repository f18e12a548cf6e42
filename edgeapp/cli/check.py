"""`edgeapp check`: which operators will run on the Edge TPU, predicted without the compiler."""

import json
from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.options import ReportFormat, ReportFormatOpt, choices, resolve_model
from edgeapp.core.units import format_bytes
from edgeapp.errors import ExitCode

app = typer.Typer()

CompilerVersion = choices("CompilerVersion", ["14", "16"])


@app.command("check")
def check_command(
    models: Annotated[List[Path], typer.Argument(
        metavar="MODEL...", help="A .tflite model (the CPU model you would compile), or a Coral model's "
                                 "name (`edgeapp models list`); several: how they share one Edge TPU's "
                                 "parameter cache compiled together, in this order (or, compiled "
                                 "models, whether they were).", show_default=False)],
    fmt: ReportFormatOpt = ReportFormat.table,
    compiler_version: Annotated[Optional[CompilerVersion], typer.Option(
        "--compiler-version", help="Predict for this compiler: 14 (Google's GitHub files; emits "
                                   "Edge TPU runtime 13) or 16 (the last release; runtime 14). "
                                   "Default: the installed one, else 16.",
        show_default=False)] = None,
) -> None:
    """Predict which operations the Edge TPU compiler will map, from the model file alone.

    Works on any OS, without edgetpu_compiler. Says which compiler version it predicts for,
    and how many parameter bytes stay cached on the chip (on-chip) or are streamed on every
    inference (off-chip). With several models: their shares of one Edge TPU's cache when
    compiled together (`edgeapp compile A B`), in the order given; for compiled models, read
    from the files, and whether they were compiled together. Exit code 0 when every model is
    predicted to run wholly on the Edge TPU, 8 when part or none of one is (see the reasons and
    advice).
    """
    from edgeapp.flows.check import check_files, predicted_compiler

    version, why = predicted_compiler(int(compiler_version.value) if compiler_version else None)
    # a Coral model's name: its CPU model
    checked = check_files([resolve_model(m, "cpu")[0] for m in models], version)
    for result in checked.results:
        result.summary["compiler_version_why"] = why
    if fmt == ReportFormat.json:
        typer.echo(json.dumps(checked.to_json(), indent=2))
    else:
        typer.echo("\n\n".join(render_check(r) for r in checked.results))
        if len(checked.results) > 1:
            typer.echo("\n" + render_one_tpu(checked))
    if not checked.fully_mapped:
        raise typer.Exit(int(ExitCode.NOT_MAPPABLE))


def _bytes(n) -> str:
    return "?" if n is None else format_bytes(n)


def render_one_tpu(checked) -> str:
    """The models side by side: where each one's parameters go on one Edge TPU."""
    together = {True: "compiled together: their parameters stay cached side by side",
                False: "compiled apart: each evicts the others' parameters when it runs; "
                       "compile them in one `edgeapp compile A B` call",
                None: "compiled together in this order (predicted): the first takes the cache it needs"}
    rows = [("model", "parameters", "on-chip", "off-chip", "mapping")]
    for r in checked.results:
        s = r.summary
        rows.append((Path(r.model).name, s["parameters"], _bytes(s["on_chip_bytes"]),
                     _bytes(s["off_chip_bytes"]), s["verdict"].replace("_", " ")))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [f"one Edge TPU: {together[checked.together]}"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _count(n: int) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return str(n)


def verdict_line(result) -> str:
    """One line: the verdict and the shares on the TPU (used by `convert` too)."""
    from edgeapp.core.edgetpu.check_report import VERDICT_TEXT

    s = result.summary
    line = (f"{VERDICT_TEXT[s['verdict']]}: {s['ops_tpu']}/{s['ops_total']} ops on the Edge TPU, "
            f"{_pct(s['macs_tpu_share'])} of {_count(s['macs_total'])} MACs")
    if s["verdict"] != "fully_mapped" and s["first_cpu_op"] is not None:
        first = next(o for o in result.ops if o.index == s["first_cpu_op"])
        head = s.get("detection_head")
        why = "where the detection head's decode begins (see advice)" \
            if head and head["first_op"] == first.index else first.reason
        line += f"; first CPU op #{first.index} {first.op}: {why}"
    return line


def _io_text(entries: List[dict]) -> str:
    parts = []
    for e in entries:
        shape = ",".join(str(d) for d in e["shape"])
        q = f" (scale {e['scale']:.6g}, zero {e['zero_point']})" if e["scale"] else ""
        parts.append(f"{e['dtype']}[{shape}]{q}")
    return "; ".join(parts)


def render_check(result) -> str:
    """The per-operator table and the summary, for a terminal."""
    rows = [("#", "op", "inputs", "outputs", "TPU", "reason")]
    for o in result.ops:
        ins = " ".join(o.inputs) + (f" +{o.constants} const" if o.constants else "")
        rows.append((str(o.index), o.op, ins, " ".join(o.outputs), "yes" if o.mapped else "NO",
                     o.reason or ""))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [f"{result.model}"]
    for r in rows:
        lines.append("  ".join([r[0].rjust(widths[0])] + [c.ljust(w) for c, w in zip(r[1:5], widths[1:])]
                               + [r[5]]).rstrip())
    s = result.summary
    lines += ["", f"verdict     {verdict_line(result)}"]
    if "compiler_version" in s:
        lines.append(f"compiler    edgetpu_compiler {s['compiler_version']} (Edge TPU runtime "
                     f"{s['runtime_needed']}): {s.get('compiler_version_why', '')}".rstrip(": "))
    lines.append(f"operations  {s['ops_tpu']} of {s['ops_total']} on the Edge TPU ({_pct(s['ops_tpu_share'])}), "
                 f"{s['ops_cpu']} on the CPU")
    lines.append(f"MACs        {_count(s['macs_tpu'])} of {_count(s['macs_total'])} on the Edge TPU "
                 f"({_pct(s['macs_tpu_share'])})")
    lines.append(f"parameters  {format_bytes(s['parameter_bytes_tpu'])} on the Edge TPU of ~8 MiB on-chip "
                 f"cache ({format_bytes(s['parameter_bytes'])} in the file)")
    if s.get("on_chip_bytes") is not None:
        lines.append(f"cache       {format_bytes(s['on_chip_bytes'])} on-chip, "
                     f"{format_bytes(s['off_chip_bytes'])} off-chip (streamed every inference), "
                     f"{'read from the compiled file' if s['parameters'] == 'read' else 'predicted'}")
    lines.append(f"input       {_io_text(s['inputs'])}")
    lines.append(f"output      {_io_text(s['outputs'])}")
    for w in s["warnings"]:
        lines.append(f"warning     {w}")
    for a in s["advice"]:
        lines.append(f"advice      {a}")
    return "\n".join(lines)
