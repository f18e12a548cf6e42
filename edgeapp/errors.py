"""Typed errors raised by the library; only the CLI turns them into exit codes.

Every error carries a one-line message meant for the user, ideally with the fix.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Optional


class ExitCode(IntEnum):
    """Process exit codes, documented in docs/exit-codes.md."""

    OK = 0
    ERROR = 1  # unexpected failure (a bug): please report it
    USAGE = 2  # bad flags or arguments (Click uses 2 as well)
    INPUTS_FAILED = 3  # some inputs (images, frames) failed; the rest were processed
    MODEL_INVALID = 4  # model file missing, truncated, not TFLite, wrong shapes
    DEVICE_UNAVAILABLE = 5  # the requested device (Edge TPU, camera) cannot be used
    CONVERT_FAILED = 6  # conversion/quantization failed or produced a non-int8 model
    MISSING_DEPENDENCY = 7  # an optional package or tool is not installed
    NOT_MAPPABLE = 8  # check/compile: the model does not fully map to the Edge TPU
    COMPILE_FAILED = 9  # edgetpu_compiler failed
    CHECKS_FAILED = 10  # doctor: at least one check failed
    CLUSTER_LOST = 11  # --cluster: the Dask scheduler cannot be reached or went away
    DOWNLOAD_FAILED = 12  # models: no network, HTTP error, connection cut (run again to resume)
    VERIFY_FAILED = 13  # models: a downloaded file is not the published one (it was removed)
    OVER_BUDGET = 14  # convert --max-drop: no trial kept the loss within the budget (best file kept)
    INTERRUPTED = 130  # Ctrl-C, for every command (128 + SIGINT, as shells report it)


class EdgeappError(Exception):
    """Base class: a user-facing failure with a one-line message and an exit code."""

    exit_code: ExitCode = ExitCode.ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(EdgeappError):
    exit_code = ExitCode.USAGE


class InputError(EdgeappError):
    """One input (image, frame) cannot be used; batch jobs record it and go on."""

    exit_code = ExitCode.INPUTS_FAILED


class InvalidModel(EdgeappError):
    exit_code = ExitCode.MODEL_INVALID


class WrongTask(InvalidModel):
    """A model that is for another task than the one asked. `task` names the task its outputs
    fit (None: no task edgeapp knows); each face says how to run that task in its own words:
    `worded(hint)`. Plain `str()` is the Python API's wording."""

    def __init__(self, message: str, task: Optional[str] = None) -> None:
        super().__init__(message)
        self.task = task

    def worded(self, hint) -> str:
        """The message with `hint(task)`, how this face runs the task that fits."""
        return f"{self.message}: {hint(self.task)}" if self.task else self.message

    def __str__(self) -> str:
        return self.worded(lambda task: f"use model.{task}(...) or open_model(..., task={task!r})")


class DeviceUnavailable(EdgeappError):
    exit_code = ExitCode.DEVICE_UNAVAILABLE


class DeviceFailed(DeviceUnavailable):
    """An Edge TPU stopped working mid-run (unplugged, delegate error); `device` names it."""

    def __init__(self, message: str, device: str = "edgetpu") -> None:
        super().__init__(message)
        self.device = device


class ConvertError(EdgeappError):
    exit_code = ExitCode.CONVERT_FAILED


class MissingDependency(EdgeappError):
    exit_code = ExitCode.MISSING_DEPENDENCY


class CompileError(EdgeappError):
    exit_code = ExitCode.COMPILE_FAILED


class ClusterError(EdgeappError):
    """The Dask scheduler is unreachable or was lost mid-run (the output so far is kept)."""

    exit_code = ExitCode.CLUSTER_LOST


def error_for_exit_code(code: int, message: str) -> EdgeappError:
    """The typed error that has this exit code (errors that crossed a process boundary)."""
    for cls in (UsageError, InputError, InvalidModel, DeviceUnavailable, ConvertError,
                MissingDependency, CompileError, ClusterError, DownloadError, VerificationError):
        if int(cls.exit_code) == code:
            return cls(message)
    return EdgeappError(message)


class DownloadError(EdgeappError):
    exit_code = ExitCode.DOWNLOAD_FAILED


class VerificationError(EdgeappError):
    exit_code = ExitCode.VERIFY_FAILED


def interrupt_of(error: Optional[BaseException]) -> Optional[KeyboardInterrupt]:
    """The Ctrl-C behind `error`: itself, or the one it was raised while unwinding (Python 3.9
    can turn a KeyboardInterrupt that lands inside a lock's wait into "RuntimeError: release
    unlocked lock", and closing a runner on the way out can fail the same way)."""
    seen = 0
    while error is not None and seen < 20:
        if isinstance(error, KeyboardInterrupt):
            return error
        error, seen = error.__context__, seen + 1
    return None


def is_interrupt(error: BaseException) -> bool:
    return interrupt_of(error) is not None
