"""`edgeapp devices`: the Edge TPUs on this machine, the --device string for each, and their state."""

import json

import typer
from typing_extensions import Annotated

from edgeapp.cli.options import ReportFormat, ReportFormatOpt, say
from edgeapp.hw.sysroot import SYSROOT_ENV

app = typer.Typer()

RootOpt = Annotated[str, typer.Option(
    "--root", envvar=SYSROOT_ENV, hidden=True,
    help="Read /sys, /dev, /proc, /boot and /etc under this folder (tests, containers).")]


@app.command("devices")
def devices_command(
    fmt: ReportFormatOpt = ReportFormat.table,
    root: RootOpt = "/",
) -> None:
    """List Edge TPUs without creating an interpreter (libedgetpu's C API, else sysfs).

    Per Edge TPU: the libedgetpu build (std or max clock), a USB Accelerator's link speed and
    firmware state (1a6e:089a bootloader, 18d1:9302 running), a PCIe card's temperature, trip
    points and the clock its driver runs it at. Exit 0 also when there is none: it says so.
    """
    from edgeapp.hw.tpu_state import tpu_states

    states = tpu_states(root)
    if fmt is ReportFormat.json:
        typer.echo(json.dumps({"devices": states}, indent=2))
    else:
        from edgeapp.core.edgetpu.thermal import state_text

        for s in states:
            details = state_text(s)
            typer.echo(f"{s['device']:<7} {s['name']:<42} {s['path']}" + (f"  {details}" if details else ""))
            for warning in s["warnings"]:
                typer.echo(f"{'':<7} warning: {warning}")
    if not states:
        say("no Edge TPU found (USB or PCIe/M.2); `edgeapp doctor` checks the install")
