"""What the user sees while models are pulled: byte progress bars on a terminal, else one line
per download; and the resolution of a MODEL argument that names a Coral model.

Kept apart from options.py (which resolves names for every command) and models.py (the
`models` command), so neither imports the other.
"""

import os
import sys
from pathlib import Path
from typing import Optional, Tuple

import typer

from edgeapp.core.units import format_bytes


def _say(message: str) -> None:
    typer.echo(f"edgeapp: {message}", err=True)


class DownloadReporter:
    """flows.models.Reporter for the CLI: a rich bar per file when stderr is a terminal."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty() and not os.environ.get("EDGEAPP_NO_PROGRESS")
        self._progress = None
        self._task = None

    def __enter__(self) -> "DownloadReporter":
        return self

    def __exit__(self, *exc) -> None:
        self.finish()

    def note(self, message: str) -> None:
        if self._progress is not None:
            self._progress.console.print(f"edgeapp: {message}", markup=False, highlight=False)
        else:
            _say(message)

    def start(self, name: str, total: Optional[int], done: int) -> None:
        if not self.tty:
            resumed = f", resuming at {format_bytes(done)}" if done else ""
            _say(f"downloading {name} ({format_bytes(total)}{resumed})")
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress("{task.description}", BarColumn(), DownloadColumn(),
                                  TransferSpeedColumn(), TimeRemainingColumn(),
                                  console=Console(stderr=True), transient=True)
        self._progress.start()
        self._task = self._progress.add_task(Path(name).name, total=total, completed=done)

    def advance(self, nbytes: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, nbytes)

    def finish(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def resolve_name(model: Path, device: str) -> Tuple[Path, Optional[str]]:
    """A MODEL argument naming a registry model -> (its cached file, a notice); else unchanged."""
    from edgeapp.flows.models import resolve

    with DownloadReporter() as rep:
        found = resolve(str(model), device, rep)
    if found is None:
        return model, None
    return found.path, found.notice
