"""Options shared by several commands, and the one place errors become exit codes."""

import functools
import os
import sys
import traceback
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Callable, Optional, Tuple, TypeVar

import typer
from typing_extensions import Annotated

from edgeapp.core.limits import MAX_THREADS
from edgeapp.errors import EdgeappError, ExitCode
from edgeapp.hw.runtime import RUNTIMES

F = TypeVar("F", bound=Callable)


def choices(name: str, values) -> type:
    """A str Enum for Typer from a library's tuple of allowed values (the library owns them)."""
    return Enum(name, [(v.replace("-", "_"), v) for v in values], type=str)


RuntimeName = choices("RuntimeName", RUNTIMES)


class ReportFormat(str, Enum):
    table = "table"
    json = "json"


ReportFormatOpt = Annotated[ReportFormat, typer.Option("--format", "-f", help="Output format.")]


class CpuKernels(str, Enum):
    fast = "fast"
    reference = "reference"


CpuKernelsOpt = Annotated[CpuKernels, typer.Option(
    "--cpu-kernels", help="CPU int8 kernels: fast (the runtime's default, XNNPACK with "
                          "ai-edge-litert) or reference (TFLite's builtin kernels: the rounding of "
                          "tflite-runtime and Coral's published CPU results; slower, see README).")]


@dataclass
class Globals:
    """Values of the global options (`edgeapp --device usb:0 classify ...`)."""

    device: str = "auto"
    runtime: Optional[str] = None


DeviceOpt = Annotated[Optional[str], typer.Option(
    "--device", "-d", metavar="DEVICE",
    help="auto (Edge TPU if usable, else CPU), cpu, edgetpu, usb, usb:N, pci, pci:N or :N; or "
         "several Edge TPUs side by side: a list (usb:0,usb:1) or all (every one found), plus "
         ",auto to let the CPU twin take over when no TPU is left. Default: the global --device, "
         "else auto.", show_default=False)]
RuntimeOpt = Annotated[Optional[RuntimeName], typer.Option(
    "--runtime", help="Force a TFLite runtime (default: the global --runtime, else the best installed).",
    show_default=False)]
CpuModelOpt = Annotated[Optional[Path], typer.Option(
    "--cpu-model", help="CPU twin to run when a *_edgetpu.tflite model cannot use the Edge TPU "
                        "(default: X.tflite beside X_edgetpu.tflite).", show_default=False)]
ThreadsOpt = Annotated[Optional[int], typer.Option(
    "--threads", min=1, max=MAX_THREADS, help="Interpreter threads for CPU inference (default: the runtime's).",
    show_default=False)]
NoProbeOpt = Annotated[bool, typer.Option(
    "--no-probe", envvar="EDGEAPP_NO_PROBE",
    help="Load the Edge TPU delegate without first trying it in a child process (the probe "
         "that turns a runtime/libedgetpu build mismatch crash into a message).")]


LabelsOpt = Annotated[Optional[Path], typer.Option(
    "--labels", "-l", help="Labels file (`0 cat`, `0:cat` or one label per line). "
                           "Default: the model's sidecar JSON or embedded metadata.",
    show_default=False)]
MeanOpt = Annotated[Optional[float], typer.Option(
    "--mean", help="Input normalization: the float model takes (pixel − mean)/std. "
                   "Default: the model's metadata, else 128.", show_default=False)]
StdOpt = Annotated[Optional[float], typer.Option(
    "--std", help="See --mean. Default: the model's metadata, else 128.", show_default=False)]
OutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Write results to FILE instead of stdout.", show_default=False)]
ResumeOpt = Annotated[bool, typer.Option(
    "--resume", help="Skip inputs already in --output (after a killed or failed run).")]
WorkersOpt = Annotated[Optional[int], typer.Option(
    "--workers", min=0, help="Threads decoding images ahead of inference (0: none). Default: one "
                             "per usable core, at least 2.", show_default=False)]

ClusterOpt = Annotated[Optional[str], typer.Option(
    "--cluster", metavar="ADDRESS",
    help="Run on a Dask cluster: tcp://SCHEDULER:8786, or local[:N] for N local worker processes "
         "(pip install 'edgeapp[cluster]').", show_default=False)]
ShipBytesOpt = Annotated[bool, typer.Option(
    "--ship-bytes", help="With --cluster: send image (and model) bytes to the workers instead of "
                         "paths on shared storage.")]
ChunkSizeOpt = Annotated[int, typer.Option(
    "--chunk-size", min=1, help="With --cluster: images per task.")]


def cluster_job(ctx: typer.Context, task: str, model: Path, device: Optional[str],
                cpu_model: Optional[Path], runtime: Optional[RuntimeName], threads: Optional[int],
                no_probe: bool, labels: Optional[Path], mean: Optional[float], std: Optional[float],
                workers: int, fast_decode: bool = False, **options):
    """The options of a classify/detect run, as the plain data the cluster's workers rebuild it from."""
    from edgeapp.core.labels import read_labels
    from edgeapp.flows.cluster import Job

    model, _ = resolve_model(model, "all")  # a Coral model's name: both files, the workers choose
    return Job(task, str(model), resolve_device(ctx, device), str(cpu_model) if cpu_model else None,
               resolve_runtime(ctx, runtime), threads, not no_probe,
               labels=read_labels(labels) if labels else None, mean=mean, std=std,
               fast_decode=fast_decode, options=options, decode_workers=workers)


def resolve_device(ctx: typer.Context, device: Optional[str]) -> str:
    if device:
        return device
    g = ctx.find_object(Globals)
    return g.device if g else "auto"


def resolve_runtime(ctx: typer.Context, runtime: Optional[RuntimeName]) -> Optional[str]:
    if runtime is not None:
        return runtime.value
    g = ctx.find_object(Globals)
    return g.runtime if g else None


def open_engine(ctx: typer.Context, model: Path, device: Optional[str], cpu_model: Optional[Path],
                runtime: Optional[RuntimeName], threads: Optional[int], no_probe: bool,
                cpu_kernels: CpuKernels = CpuKernels.fast):
    """The inference commands' way into the runtime layer: resolve the global options, open the
    model on its device, and tell the user in one line when it runs somewhere unexpected."""
    from edgeapp.core.pose import POSENET_OP, posenet_refusal
    from edgeapp.core.tflite.model import load_model
    from edgeapp.errors import InvalidModel
    from edgeapp.hw.runtime import open_model

    device = resolve_device(ctx, device)
    model, notice = resolve_model(model, device)  # a Coral model's name: its cached file
    parsed = load_model(model)
    try:
        engine = open_model(parsed, device, cpu_model=cpu_model,
                            runtime=resolve_runtime(ctx, runtime), threads=threads,
                            probe=not no_probe, cpu_kernels=CpuKernels(cpu_kernels).value)
    except InvalidModel:
        if POSENET_OP in {op.op for op in parsed.operators}:  # the runtime lacks Coral's op
            raise InvalidModel(posenet_refusal(str(model))) from None
        raise
    if notice or engine.notice:
        say(notice or engine.notice)
    return engine


def resolve_model(model: Path, device: str = "auto") -> Tuple[Path, Optional[str]]:
    """A MODEL that is no file but a Coral model's name (`edgeapp models list`) becomes its cached
    file, pulled and verified first when absent: the twin for `device`, and a notice when auto
    picked the CPU model because no Edge TPU is attached."""
    if model.exists():
        return model, None
    from edgeapp.cli.download import resolve_name

    return resolve_name(model, device)


def results_writer(fmt, columns: list, rows: Callable, table_line: Callable, output: Optional[Path],
                   resume: bool, models: tuple):
    """A batch's results (stdout or --output), for classify/detect/pose/segment alike: --resume
    appends only to results of `models` (the paths this run's records name; a compiled model and
    its CPU twin count as one)."""
    from edgeapp.flows.batch import check_resumed_model
    from edgeapp.flows.records import RecordWriter

    ours = [str(m) for m in models if m]
    return RecordWriter(fmt, columns, rows, table_line, output, resume,
                        check_models=lambda recorded: check_resumed_model(recorded, *ours))


def decode_workers(workers: Optional[int]) -> int:
    """--workers, else one decoding thread per usable core (at least 2): with the invoke off
    the CPU (Edge TPUs) or on its own threads, decoding is what has to keep up."""
    from edgeapp.hw.hostinfo import usable_cores

    return workers if workers is not None else max(2, usable_cores())


def open_runner(ctx: typer.Context, model: Path, device: Optional[str], cpu_model: Optional[Path],
                runtime: Optional[RuntimeName], threads: Optional[int], no_probe: bool,
                cpu_kernels: CpuKernels = CpuKernels.fast, **kw):
    """open_engine for the commands that also run on several Edge TPUs or a segment pipeline
    (flows/runners.py); notices (fallbacks, a TPU lost mid-run) go to stderr as they happen."""
    from edgeapp.core.pose import POSENET_OP, posenet_refusal
    from edgeapp.core.tflite.model import load_model
    from edgeapp.errors import InvalidModel
    from edgeapp.core.segments import find_segment_files
    from edgeapp.flows.runners import open_runner as open_on_devices

    device = resolve_device(ctx, device)
    if find_segment_files(model) is None:
        model, notice = resolve_model(model, device)  # a Coral model's name: its cached file
        if notice:
            say(notice)
    try:
        return open_on_devices(model, device, cpu_model=cpu_model,
                               runtime=resolve_runtime(ctx, runtime), threads=threads,
                               probe=not no_probe, on_notice=say,
                               cpu_kernels=CpuKernels(cpu_kernels).value, **kw)
    except InvalidModel:
        parsed = None
        if Path(model).is_file():
            try:
                parsed = load_model(model)
            except InvalidModel:
                pass
        if parsed is not None and POSENET_OP in {op.op for op in parsed.operators}:
            raise InvalidModel(posenet_refusal(str(model))) from None  # the runtime lacks Coral's op
        raise


def finite(name: str, value: Optional[float]) -> Optional[float]:
    """Typer accepts nan and inf for floats; no option of ours means them."""
    import math

    from edgeapp.errors import UsageError

    if value is not None and not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number, not {value}")
    return value


def say(message: str) -> None:
    """One line for the user on stderr (notices, summaries): stdout stays for results."""
    typer.echo(f"edgeapp: {message}", err=True)


def cli_errors(fn: F) -> F:
    """Map library errors to a one-line message and the documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EdgeappError as e:
            say(f"error: {e}")
            raise typer.Exit(int(e.exit_code)) from None
        except KeyboardInterrupt:
            say("interrupted")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except BrokenPipeError:  # `edgeapp classify ... | head`
            _silence_stdout()
            raise typer.Exit(0) from None
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except Exception as e:  # a bug: one line unless asked for the traceback
            if os.environ.get("EDGEAPP_DEBUG"):
                traceback.print_exc()
            say(f"internal error: {type(e).__name__}: {e} (set EDGEAPP_DEBUG=1 for the traceback "
                "and please report it)")
            raise typer.Exit(int(ExitCode.ERROR)) from None

    return wrapper  # type: ignore[return-value]


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


class progress_bar:
    """A progress bar on stderr when it is a terminal and there is more than one item.

    Used as `with progress_bar(n, "classify") as advance: ... advance()`; `advance` is None
    when no bar is shown, so callers pay nothing in scripts and pipes.
    """

    def __init__(self, total: int, label: str) -> None:
        self.total, self.label, self._progress = total, label, None

    def __enter__(self) -> Optional[Callable[[], None]]:
        if self.total <= 1 or not sys.stderr.isatty() or os.environ.get("EDGEAPP_NO_PROGRESS"):
            return None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        self._progress = Progress("[progress.description]{task.description}", BarColumn(),
                                  MofNCompleteColumn(), TimeRemainingColumn(),
                                  console=Console(stderr=True), transient=True)
        self._progress.start()
        task = self._progress.add_task(self.label, total=self.total)
        return lambda: self._progress.advance(task)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
