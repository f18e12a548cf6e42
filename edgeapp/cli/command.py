"""Help texts and usage errors as a reader expects them, whichever Typer renders them.

Typer 0.29 writes required arguments as `{MODEL} {INPUTS}...` in the usage line, a list
argument's Python type (`INPUTS <list[str]>`) in the Arguments section, and a bad choice in
pydantic's words (`Value error, 'xml' is not one of 'table', 'jsonl', 'csv'.`). Every edgeapp
command uses `Command` (and its groups `Group`), which say `MODEL INPUTS...`, `INPUTS`, and
`'xml' is not one of table, jsonl, csv`; older Typers already did, and are left as they are.
"""

import re
from typing import Any, List

import typer
from typer.core import TyperCommand, TyperGroup

_CHOICE = re.compile(r"^(?:Value error, )?(?P<value>.+?) is not one of (?P<choices>.+?)\.?$", re.S)


def tidy_error(message: str) -> str:
    """A usage error's message without the validation library's wording."""
    m = _CHOICE.match(message)
    if m:
        choices = ", ".join(c.strip().strip("'\"") for c in m.group("choices").split(","))
        return f"{m.group('value')} is not one of {choices}"
    return re.sub(r"^Value error, ", "", message)


def argument_name(param: Any) -> str:
    """MODEL, INPUTS...: the metavar (else the name in capitals), `...` when it takes several."""
    name = param.metavar or (param.name or "").upper()
    return name + ("..." if param.nargs != 1 and not name.endswith("...") else "")


def _parse_args(parse: Any, ctx: Any, args: List[str]) -> List[str]:
    try:
        return parse(ctx, args)
    except typer.BadParameter as e:
        e.message = tidy_error(e.message)
        raise


class Command(TyperCommand):
    """A command whose usage line, Arguments section and choice errors read plainly."""

    def collect_usage_pieces(self, ctx: Any) -> List[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
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

    def parse_args(self, ctx: Any, args: List[str]) -> List[str]:
        return _parse_args(super().parse_args, ctx, args)


class Group(TyperGroup):
    """The `edgeapp` and `edgeapp models` groups: their own options' errors read plainly too."""

    def parse_args(self, ctx: Any, args: List[str]) -> List[str]:
        return _parse_args(super().parse_args, ctx, args)


def use_everywhere(*apps: typer.Typer) -> None:
    """Make `Command` the class of every command registered on `apps` (and their groups)."""
    for app in apps:
        for info in app.registered_commands:
            if info.cls in (None, TyperCommand):  # Typer's default, not a command's own class
                info.cls = Command
        for group in app.registered_groups:
            if group.typer_instance is not None:
                use_everywhere(group.typer_instance)
