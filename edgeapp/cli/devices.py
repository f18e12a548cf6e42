"""`edgeapp devices`: the Edge TPUs on this machine and the --device string for each."""

import json

import typer
from typing_extensions import Annotated

from edgeapp.cli.options import ReportFormat, ReportFormatOpt, cli_errors, say

app = typer.Typer()

RootOpt = Annotated[str, typer.Option(
    "--root", envvar="EDGEAPP_SYSROOT", hidden=True,
    help="Read /sys, /dev, /proc and /etc under this folder (tests, containers).")]


@app.command("devices")
@cli_errors
def devices_command(
    fmt: ReportFormatOpt = ReportFormat.table,
    root: RootOpt = "/",
) -> None:
    """List Edge TPUs without creating an interpreter (libedgetpu's C API, else sysfs).

    Exit 0 also when there is none: it says so.
    """
    from edgeapp.hw.devices import list_edge_tpus
    from edgeapp.hw.libedgetpu import edgetpu_library

    tpus = list_edge_tpus(root, edgetpu_library())
    if fmt is ReportFormat.json:
        typer.echo(json.dumps({"devices": [t.to_dict() for t in tpus]}, indent=2))
    else:
        for t in tpus:
            typer.echo(f"{t.device:<7} {t.name:<42} {t.path}{_extra(t)}")
    if not tpus:
        say("no Edge TPU found (USB or PCIe/M.2); `edgeapp doctor` checks the install")


def _extra(t) -> str:
    parts = [t.usb_id] if t.usb_id else []
    if t.speed_mbps is not None:
        parts.append(f"{t.speed_mbps:g} Mb/s" + (" (USB 2: 3-4x slower)" if t.speed_mbps <= 480 else ""))
    if t.temperature_c is not None:
        parts.append(f"{t.temperature_c:.1f} °C")
    return "  " + ", ".join(parts) if parts else ""
