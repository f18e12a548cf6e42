"""The `edgeapp` command: one Typer app per command module, joined here.

Command modules import their heavy dependencies (runtimes, OpenCV, TensorFlow) inside the
command function, so `edgeapp --help` stays fast and light.
"""

from typing import Optional

import typer
from typing_extensions import Annotated

from edgeapp import __version__
from edgeapp.cli import (
    bench,
    camera,
    check,
    classify,
    compile,
    convert,
    detect,
    devices,
    doctor,
    models,
    pose,
    retrain,
    segment,
)
from edgeapp.cli.command import Group, use_everywhere
from edgeapp.cli.options import Globals, RuntimeName

app = typer.Typer(
    name="edgeapp",
    help="From a Keras model to fast inference on the Google Coral Edge TPU "
         "(with CPU fallback when no Edge TPU is usable).",
    no_args_is_help=True,
    cls=Group,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
for module in (convert, check, compile, classify, detect, pose, segment, camera, bench, devices,
               doctor, retrain):
    app.add_typer(module.app)
app.add_typer(models.app)  # a group: models list | pull | path
use_everywhere(app)  # usage lines, argument rows and choice errors as a reader expects (cli/command.py)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"edgeapp {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    device: Annotated[str, typer.Option(
        "--device", "-d", envvar="EDGEAPP_DEVICE", metavar="DEVICE",
        help="Default device for every command: auto, cpu, edgetpu, usb, usb:N, pci, pci:N, :N, "
             "or several Edge TPUs (usb:0,usb:1 or all).")] = "auto",
    runtime: Annotated[Optional[RuntimeName], typer.Option(
        "--runtime", envvar="EDGEAPP_RUNTIME",
        help="Default TFLite runtime (default: the best installed). $EDGEAPP_RUNTIME_PATH: folders "
             "searched first for one (e.g. made by `pip install --no-deps --target`).",
        show_default=False)] = None,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Show the version and exit.")] = False,
) -> None:
    ctx.obj = Globals(device=device, runtime=runtime.value if runtime else None)


def main() -> None:
    import faulthandler

    try:  # if a runtime still dies natively in this process, the user gets a line, not silence
        if not faulthandler.is_enabled():
            faulthandler.enable()
    except (ValueError, OSError, AttributeError, RuntimeError):  # no usable stderr
        pass
    app()
