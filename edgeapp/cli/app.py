"""The `edgeapp` command: one Typer app per command module, joined here, and one command per
task of tasks/ (cli/task_commands.py), built when first asked for.

Command modules import their heavy dependencies (runtimes, OpenCV, TensorFlow) inside the
command function, and task commands and the camera (whose options come from every task) are
built only when run or asked for help: `edgeapp --help` reads the tasks' names and one-line
summaries from their folder and imports none of them.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

import click
import typer
from typing_extensions import Annotated

from edgeapp import tasks
from edgeapp.cli import bench, camera, check, compile, compiler, convert, devices, doctor, models, retrain
from edgeapp.cli import eval as eval_cli
from edgeapp.cli.command import CLICK_ERRORS, Group, show_version, summary_line, usage_error, use_everywhere
from edgeapp.cli.options import Globals, RuntimeName, say
from edgeapp.errors import ExitCode


class EdgeappGroup(Group):
    """The top-level group: the registered commands, plus the lazily built ones (each task's
    command and the camera), listed in the order a user meets them."""

    _built: Dict[str, Any] = {}  # name -> command, built once per process (tests invoke many times)
    _lazy_commands: Optional[Dict[str, Tuple[Callable[[], Any], Callable[[], str]]]] = None

    def _lazy(self) -> Dict[str, Tuple[Callable[[], Any], Callable[[], str]]]:
        """name -> (build the command, its one-line summary), for each task and the camera."""
        if self._lazy_commands is None:
            lazy: Dict[str, Tuple[Callable[[], Any], Callable[[], str]]] = {
                name: ((lambda n=name: _task_command(n)), (lambda n=name: tasks.summary(n)))
                for name in tasks.names()}
            lazy["camera"] = (camera.command, lambda: camera.SUMMARY)
            self._lazy_commands = lazy
        return self._lazy_commands

    def list_commands(self, ctx: click.Context) -> List[str]:
        static = list(super().list_commands(ctx))
        lazy = [n for n in self._lazy() if n not in static]
        at = static.index("compile") + 1 if "compile" in static else len(static)
        return static[:at] + lazy + static[at:]

    def get_command(self, ctx: click.Context, name: str) -> Any:
        found = super().get_command(ctx, name)
        if found is None and name in self._lazy():
            if name not in self._built:
                self._built[name] = self._lazy()[name][0]()
            found = self._built[name]
        return found

    def invoke(self, ctx: click.Context) -> Any:
        """Ctrl-C while a command is looked up or built (its modules importing) is exit 130 and
        one line, as in the command itself (cli/command.exit_codes), not click's "Aborted!"
        and exit 1; a command that does not exist (here or in `models`) is one line and exit 2,
        as the commands' own usage errors (cli/command.usage_error)."""
        try:
            return super().invoke(ctx)
        except CLICK_ERRORS as e:
            usage_error(e, ctx)
        except KeyboardInterrupt:
            say("interrupted")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None

    def command_summaries(self, ctx: click.Context) -> List[Tuple[str, str]]:
        """The commands and their one-line help, without building the lazy ones."""
        lazy = self._lazy()
        listed = dict(super().command_summaries(ctx))
        return [(name, summary_line(lazy[name][1]()) if name in lazy else listed[name])
                for name in self.list_commands(ctx) if name in lazy or name in listed]


def _task_command(name: str) -> Any:
    """Task `name`'s command: its module is imported only when the command is run or its help
    asked for, not for `edgeapp --help`."""
    from edgeapp.cli.task_commands import task_command

    return task_command(name)


app = typer.Typer(
    name="edgeapp",
    help="From a Keras or ONNX model to fast inference on the Google Coral Edge TPU "
         "(with CPU fallback when no Edge TPU is usable).",
    no_args_is_help=True,
    cls=EdgeappGroup,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
for module in (convert, check, compile, eval_cli, bench, devices, doctor, retrain):
    app.add_typer(module.app)
app.add_typer(models.app)  # a group: models list | pull | path
app.add_typer(compiler.app)  # a group: compiler install | show | remove
use_everywhere(app)  # usage lines, argument rows and choice errors as a reader expects (cli/command.py)


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
    version: Annotated[bool, typer.Option("--version", callback=show_version, is_eager=True,
                                          help="Show the version and exit.")] = False,
) -> None:
    ctx.obj = Globals(device=device, runtime=runtime.value if runtime else None)


def main() -> None:
    """The app, as `edgeapp` and `python -m edgeapp` run it (edgeapp/__main__.py guards Ctrl-C
    around it, the imports of this module included)."""
    import faulthandler

    try:  # if a runtime still dies natively in this process, the user gets a line, not silence
        if not faulthandler.is_enabled():
            faulthandler.enable()
    except (ValueError, OSError, AttributeError, RuntimeError):  # no usable stderr
        pass
    app()
