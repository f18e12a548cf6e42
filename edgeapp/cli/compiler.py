"""`edgeapp compiler`: get Google's Edge TPU compiler (install, show, remove), on any machine."""

import json
from pathlib import Path
from typing import Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.command import Group
from edgeapp.cli.download import DownloadReporter
from edgeapp.cli.options import ReportFormat, ReportFormatOpt, say

app = typer.Typer(
    name="compiler", no_args_is_help=True, cls=Group,
    short_help="Google's Edge TPU compiler in one verified command: install, show, remove",
    help="Google's Edge TPU compiler in one verified command: fetched from Google's own "
         "repository (or taken from Coral's .deb you have), kept in your data folder, run "
         "natively on x86-64 Linux, through QEMU on ARM Linux, in Docker on macOS.")

NOTICE_LINES = 12  # of NOTICE, shown after an install (the whole file's path is given)


@app.command("install")
def install_command(
    from_path: Annotated[Optional[Path], typer.Option(
        "--from", metavar="PATH",
        help="Install what you have instead: Coral's edgetpu-compiler_*.deb, its .tar.gz, or an "
             "unpacked folder (no dpkg, no root).", show_default=False)] = None,
    fmt: ReportFormatOpt = ReportFormat.table,
) -> None:
    """Fetch Google's compiler files (github.com/google-coral/edgetpu, compiler/x86_64 at a
    pinned commit; $EDGEAPP_COMPILER_URL for a mirror), verify each against its pinned git blob
    id, and install them into your data folder, one folder per version.

    Exit 13 when a file does not verify (the whole download is removed), 12 when the download
    fails (run again to resume).
    """
    from edgeapp.flows import compiler as flow

    with DownloadReporter() as rep:
        record = flow.install(from_path, reporter=rep)
    if fmt is ReportFormat.json:
        typer.echo(json.dumps(record, indent=2))
    else:
        typer.echo(f"installed edgetpu_compiler {record['version']} in {record['path']}")
        typer.echo(f"verification: {record['verification']}")
    _show_notices(record)


def _show_notices(record: dict) -> None:
    """Google's NOTICE (its first lines) and where LICENSES is: read before first use."""
    from edgeapp.flows.compiler import notices

    for path in notices(record):
        if path.name == "NOTICE":
            lines = path.read_text(errors="replace").splitlines()
            say(f"Google's NOTICE for these files ({path}), read it before use:")
            for line in lines[:NOTICE_LINES]:
                typer.echo(f"  {line}", err=True)
            if len(lines) > NOTICE_LINES:
                typer.echo(f"  ... ({len(lines) - NOTICE_LINES} more lines in {path})", err=True)
        else:
            say(f"the licenses of the compiler and its libraries: {path}")


@app.command("show")
def show_command(fmt: ReportFormatOpt = ReportFormat.table) -> None:
    """The installed compilers (version, path, how they run here, source, verification) and
    the one `edgeapp compile` runs now."""
    from edgeapp.flows import compiler as flow

    report = flow.show()
    if fmt is ReportFormat.json:
        typer.echo(json.dumps(report, indent=2))
        return
    if not report["installed"]:
        typer.echo(f"no compiler installed in {report['folder']} (`edgeapp compiler install`)")
    for i, c in enumerate(report["installed"]):
        src = c["source"]
        where = src.get("url") or src.get("path") or "?"
        rows = [("version", f"{c['version']}" + ("  (used: the newest)" if i == 0 else "")),
                ("read from", str(c["version_from"])), ("path", c["path"]), ("runs", c["runs"]),
                ("source", f"{src.get('kind')}: {where}" + (f" (sha256 {src['sha256']})"
                                                            if src.get("sha256") else "")),
                ("verification", str(c["verification"]))]
        rows += [(f"sha256 {name}", str(digest)) for name, digest in c["sha256"].items()]
        width = max(len(k) for k, _ in rows)
        typer.echo("\n".join(f"{k:<{width}}  {v}" for k, v in rows) + "\n")
    uses = report.get("compile_uses")
    typer.echo(f"compile uses: {uses['path']} ({uses['source']})" if uses
               else f"compile uses: nothing: {report['missing']}")


@app.command("remove")
def remove_command(
    version: Annotated[Optional[str], typer.Argument(
        help="The version to remove (default: every installed version).", show_default=False)] = None,
) -> None:
    """Remove installed compiler versions from your data folder."""
    from edgeapp.flows import compiler as flow

    removed = flow.remove(version)
    if not removed:
        say("no compiler installed: nothing removed")
    for path in removed:
        typer.echo(f"removed {path}")
