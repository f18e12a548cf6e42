"""What every command shares: library errors as one line and their exit code (`exit_codes`),
`--version`, and help texts and usage errors as a reader expects them, whichever Typer renders them.

Typer 0.29 writes required arguments as `{MODEL} {INPUTS}...` in the usage line, a list
argument's Python type (`INPUTS <list[str]>`) in the Arguments section, and a bad choice in
pydantic's words (`Value error, 'xml' is not one of 'table', 'jsonl', 'csv'.`). Every edgeapp
command uses `Command` (and its groups `Group`), which say `MODEL INPUTS...`, `INPUTS`, and
`'xml' is not one of table, jsonl, csv`; older Typers already did, and are left as they are.

Typer 0.29 also checks every value through a pydantic TypeAdapter, and importing pydantic costs
a command more than the rest of its start-up but numpy. A parameter without a click type (such
a Typer's) gets `PlainValues` as its `process_value` (Click's public method): the plainly valid
values of edgeapp's plain option types are converted here, as Typer would, from the type and
`typer.Option`/`typer.Argument` the command's function declares; anything else (an error to
word, a value Typer might read otherwise) goes to the parameter's own `process_value`. A Typer
on click's types (0.23, say) converts cheaply itself and is left alone.
tests/test_cli_option_values.py checks both ways agree on every parameter of every command.
"""

import contextlib
import inspect
import os
import re
import sys
import traceback
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, NoReturn, Optional, Tuple, Union

import click
import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import ParameterInfo
from typing_extensions import Annotated, get_args, get_origin

from edgeapp import __version__
from edgeapp.cli.options import Interrupted, say
from edgeapp.errors import EdgeappError, ExitCode, WrongTask, interrupt_of, is_interrupt

_CHOICE = r"^(?:Value error, )?(?P<value>.+?) is not one of (?P<choices>.+?)\.?$"  # compiled when used


def tidy_error(message: str) -> str:
    """A usage error's message without the validation library's wording."""
    m = re.match(_CHOICE, message, re.S)
    if m:
        choices = ", ".join(c.strip().strip("'\"") for c in m.group("choices").split(","))
        return f"{m.group('value')} is not one of {choices}"
    return re.sub(r"^Value error, ", "", message)


def argument_name(param: click.Parameter) -> str:
    """MODEL, INPUTS...: the metavar (else the name in capitals), `...` when it takes several."""
    name = param.metavar or (param.name or "").upper()
    return name + ("..." if param.nargs != 1 and not name.endswith("...") else "")


class _NotPlain(Exception):
    """A value for Typer's own checks (to word its error, or convert it as only Typer knows)."""


def _text(value: Any, ctx: click.Context) -> str:
    if isinstance(value, str):
        return value
    raise _NotPlain


def _flag(value: Any, ctx: click.Context) -> bool:
    if isinstance(value, bool):
        return value
    raise _NotPlain


def _is_int(text: str) -> bool:
    """Plain decimal digits with an optional sign: the integers every reading agrees on."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    return digits.isascii() and digits.isdigit()


def _is_float(text: str) -> bool:
    """Digits with an optional sign, point and exponent (1.5, -.5, 2e-3); not nan, inf or 1_0."""
    mantissa, mark, exponent = text.replace("E", "e").partition("e")
    if mark and not _is_int(exponent):
        return False
    whole, _, fraction = (mantissa[1:] if mantissa[:1] in ("+", "-") else mantissa).partition(".")
    return bool(whole or fraction) and all(not part or (part.isascii() and part.isdigit())
                                            for part in (whole, fraction))


def _number(kind: type, low: Optional[float], high: Optional[float]) -> Callable[[Any, Any], Any]:
    def convert(value: Any, ctx: click.Context) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise _NotPlain
        if isinstance(value, str):
            if not (_is_int if kind is int else _is_float)(value):
                raise _NotPlain  # nan, 1e3 for an int, spaces, underscores: Typer decides
            value = kind(value)
        elif kind is int and not isinstance(value, int):
            raise _NotPlain
        if (low is not None and value < low) or (high is not None and value > high):
            raise _NotPlain  # out of range: Typer's words
        return kind(value)
    return convert


def _choice(kind: type) -> Callable[[Any, Any], Any]:
    by_value = {str(member.value): member for member in kind}  # type: ignore[attr-defined]

    def convert(value: Any, ctx: click.Context) -> Any:
        if isinstance(value, kind):
            return value
        if isinstance(value, str) and value in by_value and getattr(ctx, "token_normalize_func", None) is None:
            return by_value[value]
        raise _NotPlain
    return convert


def _path(value: Any, ctx: click.Context) -> Path:
    """A Path as Typer makes it with default path settings: an existing path must be readable."""
    if isinstance(value, str) and value:
        value = Path(value)
    if not isinstance(value, Path):
        raise _NotPlain
    try:
        os.stat(value)
    except OSError:
        return value
    if not os.access(value, os.R_OK):
        raise _NotPlain
    return value


def _plain_path(info: ParameterInfo) -> bool:
    return not (info.exists or info.resolve_path or info.allow_dash or info.path_type is not None
                or info.writable or not info.readable or not info.file_okay or not info.dir_okay)


def _converter(kind: Any, info: Optional[ParameterInfo]) -> Optional[Callable[[Any, Any], Any]]:
    """How to convert one value of a parameter of this type, or None: only Typer knows."""
    if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None:
        return None
    if kind is bool:
        return _flag
    if kind is str:
        return _text
    if info is None:
        return None
    if kind in (int, float) and not info.clamp:
        return _number(kind, info.min, info.max)
    if isinstance(kind, type) and issubclass(kind, Enum) and info.case_sensitive:
        return _choice(kind)
    if kind is Path and _plain_path(info):
        return _path
    return None


def declared(command: click.Command, ctx: click.Context) -> Dict[str, Tuple[Any, Any]]:
    """{parameter name: (its type, Optional removed; its typer.Option or typer.Argument)} as the
    command's function declares them (`Annotated[type, typer.Option(...)]`), and --help."""
    help_option = command.get_help_option(ctx)
    found: Dict[str, Tuple[Any, Any]] = {help_option.name: (bool, None)} if help_option is not None else {}
    try:
        signature = inspect.signature(command.callback)
    except (TypeError, ValueError):  # no callback, or none Python can read
        return found
    for p in signature.parameters.values():
        if get_origin(p.annotation) is not Annotated:
            continue
        kind, *extras = get_args(p.annotation)
        info = next((e for e in extras if isinstance(e, ParameterInfo)), None)
        if info is not None:
            found[p.name] = (_required(kind), info)
    return found


def _required(kind: Any) -> Any:
    """Optional[X] -> X."""
    args = get_args(kind)
    if get_origin(kind) is Union and len(args) == 2 and type(None) in args:
        return args[0] if args[1] is type(None) else args[1]
    return kind


class PlainValues:
    """A parameter's `process_value`: values converted as Typer 0.29's checks would, without
    pydantic; anything else goes to the parameter's own (its class's) `process_value`."""

    def __init__(self, param: click.Parameter, convert: Callable[[Any, Any], Any], many: bool) -> None:
        self.param, self.convert, self.many = param, convert, many

    def __call__(self, ctx: click.Context, value: Any) -> Any:
        param = self.param
        try:
            converted = self.plain(value, ctx)
        except _NotPlain:
            return self.typers(ctx, value)
        if param.required and param.value_is_missing(converted):
            return self.typers(ctx, value)  # Typer's words for what is missing
        if param.callback is not None:
            converted = param.callback(ctx, param, converted)
        return converted

    def plain(self, value: Any, ctx: click.Context) -> Any:
        if value is None:
            return () if self.many else None
        if not self.many:
            return self.convert(value, ctx)
        if not isinstance(value, (list, tuple)):
            raise _NotPlain
        return [self.convert(v, ctx) for v in value]

    def typers(self, ctx: click.Context, value: Any) -> Any:
        """What Typer makes of `value`: the parameter class's own process_value."""
        return type(self.param).process_value(self.param, ctx, value)


def plain_values(param: click.Parameter, declaration: Optional[Tuple[Any, Any]]) -> Optional[PlainValues]:
    """The plain conversion for a parameter without a click type (a Typer that converts values
    itself) declared as `declaration` (see `declared`), None when it is left to Typer."""
    if declaration is None or getattr(param, "type", None) is not None:
        return None  # click's types convert cheaply; or a parameter we did not declare
    kind, info = declaration
    many = param.multiple or param.nargs == -1
    if many:
        if get_origin(kind) is not list or len(get_args(kind)) != 1:
            return None
        kind = get_args(kind)[0]
    try:
        convert = _converter(kind, info)
    except AttributeError:  # a Typer whose Option says other things
        return None
    return PlainValues(param, convert, many) if convert is not None else None


def _parse_args(parse: Callable[[click.Context, List[str]], List[str]], ctx: click.Context,
                args: List[str]) -> List[str]:
    command = ctx.command
    names: Optional[Dict[str, Tuple[Any, Any]]] = None
    for param in command.get_params(ctx):  # once per parameter: its own process_value, or ours
        if getattr(param, "type", None) is None and "process_value" not in vars(param):
            names = declared(command, ctx) if names is None else names
            plain = plain_values(param, names.get(param.name))
            param.process_value = plain or type(param).process_value.__get__(param)
    try:
        return parse(ctx, args)
    except CLICK_ERRORS as e:
        usage_error(e, ctx)


# Click's errors, and Typer's when it carries a click of its own (its public base class)
CLICK_ERRORS = (click.ClickException,) + ((typer.TyperException,) if hasattr(typer, "TyperException") else ())


def usage_error(error: Exception, ctx: click.Context) -> NoReturn:
    """A usage error (exit code 2: no such option or command, a missing argument, a bad value)
    as one line, as every other error (click prints the usage, a hint and the error on three);
    any other click error is raised again as it is."""
    if getattr(error, "exit_code", None) != ExitCode.USAGE:
        raise error
    ctx = getattr(error, "ctx", None) or ctx
    if isinstance(error, (click.BadParameter, typer.BadParameter)):
        error.message = tidy_error(error.message)
    say(f"error: {error.format_message().rstrip('.')}; see `{ctx.command_path} --help`")
    raise typer.Exit(int(ExitCode.USAGE))


class Command(TyperCommand):
    """A command whose usage line, Arguments section and choice errors read plainly, and whose
    errors end as one line and their exit code (`exit_codes`)."""

    def collect_usage_pieces(self, ctx: click.Context) -> List[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        args, opts = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                args.append((argument_name(param), record[1]))
            else:
                opts.append(record)
        for title, rows in (("Arguments", args), ("Options", opts)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        return _parse_args(super().parse_args, ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        """The command's function run, its errors mapped to one line and their exit code."""
        with exit_codes():
            return super().invoke(ctx)


class Group(TyperGroup):
    """The `edgeapp` and `edgeapp models` groups: their own options' errors read plainly too, and
    each command's line in the help is its first sentence, whole."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        return _parse_args(super().parse_args, ctx, args)

    def command_summaries(self, ctx: click.Context) -> List[Tuple[str, str]]:
        """(name, one-line help) of each command the help lists."""
        rows = []
        for name in self.list_commands(ctx):
            command = TyperGroup.get_command(self, ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.short_help or summary_line(command.help or "")))
        return rows

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = self.command_summaries(ctx)
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)  # wraps the summaries to the terminal's width


_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)\.(?=\s|$)")


def summary_line(text: str) -> str:
    """The first sentence of a help text, whole and without its full stop: click would cut it at
    a width, mid-sentence; the help formatter wraps it instead."""
    lines = [ln for ln in inspect.cleandoc(text).split("\n\n", 1)[0].splitlines() if ln.strip() != "\b"]
    paragraph = " ".join(" ".join(lines).split())
    end = _SENTENCE_END.search(paragraph)
    return paragraph[:end.start()] if end else paragraph.rstrip(".")


def use_everywhere(*apps: typer.Typer) -> None:
    """Make `Command` the class of every command registered on `apps` (and their groups)."""
    for app in apps:
        for info in app.registered_commands:
            if info.cls in (None, TyperCommand):  # Typer's default, not a command's own class
                info.cls = Command
        for group in app.registered_groups:
            if group.typer_instance is not None:
                use_everywhere(group.typer_instance)


def _say_interrupted(e: Optional[BaseException]) -> None:
    say(f"interrupted: {e}" if isinstance(e, Interrupted) and str(e) else "interrupted")


@contextlib.contextmanager
def exit_codes() -> Iterator[None]:
    """Library errors as one line and their documented exit code (edgeapp/errors.py); Ctrl-C
    as 130 with what was kept; a closed pipe (`edgeapp classify ... | head`) as 0; a bug as
    one line (EDGEAPP_DEBUG=1: the traceback). The one place the CLI maps them: around every
    command's run (`Command.invoke`; Ctrl-C while a command is looked up: cli/app.py)."""
    try:
        yield
    except EdgeappError as e:
        say(f"error: {_worded(e)}")
        raise typer.Exit(int(e.exit_code)) from None
    except KeyboardInterrupt as e:
        _say_interrupted(e)
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    except BrokenPipeError:
        _silence_stdout()
        raise typer.Exit(0) from None
    except (typer.Exit, typer.Abort, SystemExit):
        raise
    except Exception as e:  # a bug: one line unless asked for the traceback
        if is_interrupt(e):  # what Ctrl-C broke on its way out is still Ctrl-C
            _say_interrupted(interrupt_of(e))
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        if os.environ.get("EDGEAPP_DEBUG"):
            traceback.print_exc()
        say(f"internal error: {type(e).__name__}: {e} (set EDGEAPP_DEBUG=1 for the traceback "
            "and please report it)")
        raise typer.Exit(int(ExitCode.ERROR)) from None


def _worded(error: EdgeappError) -> str:
    """The error's line in the CLI's words: a model for another task names that task's command."""
    if isinstance(error, WrongTask):
        return error.worded(lambda task: f"use `edgeapp {task}` (camera: --task {task})")
    return str(error)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def show_version(value: bool) -> None:
    """`--version`'s callback (eager: it answers before a command is needed)."""
    if value:
        typer.echo(f"edgeapp {__version__}")
        raise typer.Exit()
