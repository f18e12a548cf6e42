"""`edgeapp doctor`: diagnose the install (runtimes, libedgetpu, devices, drivers, compiler)."""

import json

import typer
from typing_extensions import Annotated

from edgeapp.cli.devices import RootOpt
from edgeapp.cli.options import ReportFormat, ReportFormatOpt, say
from edgeapp.errors import ExitCode

app = typer.Typer()


@app.command("doctor")
def doctor_command(
    fmt: ReportFormatOpt = ReportFormat.table,
    forget_probes: Annotated[bool, typer.Option(
        "--forget-probes", help="Delete the cached delegate-probe verdicts first, so each "
                                "(runtime, libedgetpu) pair is probed again on next use.")] = False,
    root: RootOpt = "/",
) -> None:
    """One line per check: ok, warn or fail, with the fix; then the plan for this platform.

    The plan lists, verbatim, the commands that give this OS, architecture and Python a working
    (Edge TPU runtime, TFLite runtime) pair. edgeapp prints them; it never runs them.
    Exit 0 when nothing fails.
    """
    from edgeapp.core.userdirs import cache_dir
    from edgeapp.flows.doctor.install import FAIL, exit_ok, install_plan, run_checks
    from edgeapp.hw.verdicts import VerdictCache

    cache = VerdictCache(cache_dir())
    if forget_probes:
        say(f"forgot {cache.clear()} cached probe verdict(s)")
    plan = install_plan(root)
    checks = run_checks(root, plan=plan)
    if fmt is ReportFormat.json:
        summary = {s: sum(c.status == s for c in checks) for s in ("ok", "warn", "fail")}
        typer.echo(json.dumps({"checks": [c.to_dict() for c in checks], "summary": summary,
                               "probe_verdicts": list(cache.entries().values()),
                               "model_verdicts": list(cache.model_entries().values()),
                               "plan": plan.to_dict()}, indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            typer.echo(f"{c.status:<4}  {c.name:<{width}}  {c.detail}" + (f"  -> {c.fix}" if c.fix else ""))
        typer.echo("")
        for line in plan.lines():
            typer.echo(line)
    if not exit_ok(checks):
        failed = [c.name for c in checks if c.status == FAIL]
        say(f"{len(failed)} check(s) failed: {', '.join(failed)}")
        raise typer.Exit(int(ExitCode.CHECKS_FAILED))
