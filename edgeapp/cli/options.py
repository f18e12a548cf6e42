"""Options shared by several commands, `say`, progress bars and the resume hint (errors become exit
codes in cli/command.exit_codes)."""

import contextlib
import os
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, List, Optional, Tuple, Union

import typer
from typing_extensions import Annotated

from edgeapp.cli.download import resolve_name
from edgeapp.core.limits import MAX_THREADS
from edgeapp.errors import EdgeappError, UsageError, is_interrupt
from edgeapp.hw.cocompiled import CHECK_MODES
from edgeapp.hw.runtime import RUNTIMES, EngineOptions
from edgeapp.hw.worker import RECOVER
from edgeapp.sinks.records import Format, format_for_path

if TYPE_CHECKING:
    from edgeapp.flows.open_task import Placement
    from edgeapp.sinks.records import RecordWriter



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
                          "tflite-runtime and Coral's published CPU results; slower, see docs/choosing-a-device.md).")]


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
    "--cpu-model", metavar="FILE",
    help="CPU twin to run when a *_edgetpu.tflite model cannot use the Edge TPU (default: "
         "X.tflite beside X_edgetpu.tflite).", show_default=False)]
ThreadsOpt = Annotated[Optional[int], typer.Option(
    "--threads", min=1, max=MAX_THREADS,
    help="Interpreter threads for CPU inference. Default: one single-thread interpreter per usable "
         "core, side by side (each decoding thread invokes the images it decoded).",
    show_default=False)]
ThreadsOneOpt = Annotated[Optional[int], typer.Option(
    "--threads", min=1, max=MAX_THREADS,
    help="Interpreter threads for CPU inference. Default: the runtime's.", show_default=False)]
NoProbeOpt = Annotated[bool, typer.Option(
    "--no-probe", envvar="EDGEAPP_NO_PROBE",
    help="Load the Edge TPU delegate without first trying it in a child process (the probe "
         "that turns a runtime/libedgetpu build mismatch crash into a message).")]

Performance = choices("Performance", ("low", "medium", "high", "max"))  # core/clock.PERFORMANCE_LEVELS
PerformanceOpt = Annotated[Optional[Performance], typer.Option(
    "--performance", help="Edge TPU clock (libedgetpu's Performance option): max 500 MHz, high "
                          "250, medium 125, low 62.5. Default: the libedgetpu build's (max "
                          "build: max; std build: high on USB). max needs libedgetpu1-max on USB.",
    show_default=False)]
TpuReconnectOpt = Annotated[float, typer.Option(
    "--reconnect", min=0.0, metavar="SECONDS",
    help="An Edge TPU that vanishes mid-run (a USB Accelerator re-enumerating) is waited for this "
         "long, then its work goes to the other TPUs or, with auto, the CPU twin. 0: at once.")]
IsolateOpt = Annotated[Optional[bool], typer.Option(
    "--isolate/--no-isolate",
    help="Run the model in a worker process that a watchdog replaces when an invoke hangs, the "
         "worker dies or the device is lost (docs/recovery.md). Default: whenever an Edge TPU "
         "is used.", show_default=False)]
InvokeTimeoutOpt = Annotated[Optional[float], typer.Option(
    "--invoke-timeout", min=0.001, metavar="SECONDS",
    help="With a worker: an invoke that takes longer is a hang (the worker is replaced). "
         "Default: 10 x the p99 of the latencies so far, at least 1 s.", show_default=False)]
Recover = choices("Recover", RECOVER)
RecoverOpt = Annotated[Recover, typer.Option(
    "--recover", help="How far the recovery ladder climbs for a lost engine: none, restart (a new "
                      "worker), reset (+ USB reset or PCIe rescan), power (+ uhubctl power cycle), "
                      "all.")]
RetryTpuOpt = Annotated[float, typer.Option(
    "--retry-tpu", min=1.0, metavar="SECONDS",
    help="While the CPU twin stands in for a lost Edge TPU (auto), try the TPU again this often.")]
CocompiledCheck = choices("CocompiledCheck", CHECK_MODES)
CocompiledCheckOpt = Annotated[CocompiledCheck, typer.Option(
    "--cocompiled-check", envvar="EDGEAPP_COCOMPILED_CHECK",
    help="A co-compiled model's first run on an Edge TPU is compared with its CPU twin, once per "
         "model file (docs/check-and-compile.md): warn on a mismatch and run, strict (a mismatch "
         "ends the command, exit 4), or off.")]


LabelsOpt = Annotated[Optional[Path], typer.Option(
    "--labels", "-l", metavar="FILE",
    help="Labels file (`0 cat`, `0:cat` or one label per line). Default: the model's sidecar "
         "JSON or embedded metadata.", show_default=False)]
MeanOpt = Annotated[Optional[float], typer.Option(
    "--mean", help="Input normalization: the float model takes (pixel − mean)/std. "
                   "Default: the model's metadata, else 128.", show_default=False)]
StdOpt = Annotated[Optional[float], typer.Option(
    "--std", help="See --mean. Default: the model's metadata, else 128.", show_default=False)]
OutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", metavar="FILE", help="Write results to FILE instead of stdout.",
    show_default=False)]
ResumeOpt = Annotated[bool, typer.Option(
    "--resume", help="Skip inputs already in --output (after a killed or failed run).")]
OverwriteOpt = Annotated[bool, typer.Option(
    "--overwrite", help="Replace an --output file that already holds results (without it, such "
                        "a file is refused unless --resume is given).")]
FormatOpt = Annotated[Optional[Format], typer.Option(
    "--format", "-f", help="Output format: table, jsonl or csv. Default: what the --output "
                           "file's extension says (.csv, .jsonl), else table.", show_default=False)]
class Decode(str, Enum):
    scaled = "scaled"
    full = "full"


DecodeOpt = Annotated[Optional[Decode], typer.Option(
    "--decode", help="How JPEGs are decoded: scaled (at the smallest of libjpeg's 1/2, 1/4, 1/8 "
                     "scales still at least the model's input: several times faster on photos) "
                     "or full. Default: what the model was calibrated with (its sidecar), else "
                     "the task's own: full for classify, scaled for the others. See "
                     "docs/performance.md.", show_default=False)]
FastDecodeOpt = Annotated[bool, typer.Option("--fast-decode", hidden=True,
                                             help="The old name of --decode scaled.")]


def decode_choice(decode: Optional[Decode], fast_decode: bool = False) -> Optional[str]:
    """--decode's value, with --fast-decode (hidden, kept for old scripts) as --decode scaled;
    None: the model's sidecar decides, else the task."""
    chosen = getattr(decode, "value", decode)
    if fast_decode:
        if chosen == "full":
            raise UsageError("--fast-decode is --decode scaled: not with --decode full")
        return "scaled"
    return chosen

AnnotateOpt = Annotated[Optional[Path], typer.Option(
    "--annotate", help="Write each image with its results drawn into DIR.", metavar="DIR",
    show_default=False)]
ModelArg = Annotated[Path, typer.Argument(
    metavar="MODEL", show_default=False,
    help="A .tflite model, or its *_edgetpu.tflite build, or a Coral model's name (`edgeapp "
         "models list`).")]
InputsArg = Annotated[List[str], typer.Argument(
    metavar="INPUTS", show_default=False,
    help="Image files, folders (recursive), globs, or - to read paths from stdin.")]
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


def resolve_device(ctx: typer.Context, device: Optional[str]) -> str:
    if device:
        return device
    g = ctx.find_object(Globals)
    return g.device if g else "auto"


def choice_value(value):
    """An option's value as its plain string when it is a choice (Typer hands the command an
    Enum; the task options' values are plain strings)."""
    return value.value if isinstance(value, Enum) else value



def resolve_runtime(ctx: typer.Context, runtime: Optional[RuntimeName]) -> Optional[str]:
    if runtime is not None:
        return choice_value(runtime)
    g = ctx.find_object(Globals)
    return g.runtime if g else None


def resolve_model(model: Path, device: str = "auto") -> Tuple[Path, Optional[str]]:
    """A MODEL that is no file but a Coral model's name (`edgeapp models list`) becomes its cached
    file, pulled and verified first when absent: the twin for `device`, and a notice when auto
    picked the CPU model because no Edge TPU is attached."""
    if model.exists():
        return model, None
    return resolve_name(model, device)


def placement(ctx: typer.Context, *, device: Optional[str], cpu_model: Optional[Path] = None,
              runtime: Optional[RuntimeName] = None, threads: Optional[int] = None,
              no_probe: bool = False, cpu_kernels: Union[CpuKernels, str] = CpuKernels.fast,
              performance: Union[Performance, str, None] = None,
              reconnect: float = 0.0, isolate: Optional[bool] = None,
              invoke_timeout: Optional[float] = None, recover: Union[Recover, str, None] = None,
              retry_tpu: float = 60.0, cocompiled_check: Union[CocompiledCheck, str, None] = None
              ) -> "Placement":
    """Where and how to run (flows.open_task.Placement), from an inference command's options:
    --device and --runtime fall back on the global ones."""
    from edgeapp.flows.open_task import Placement

    engine = EngineOptions(str(cpu_model) if cpu_model else None, resolve_runtime(ctx, runtime), threads,
                           not no_probe, CpuKernels(choice_value(cpu_kernels) or "fast").value,
                           choice_value(performance), isolate=isolate, invoke_timeout=invoke_timeout,
                           recover=choice_value(recover) or "reset", retry_tpu=float(retry_tpu),
                           cocompiled_check=choice_value(cocompiled_check) or "warn")
    return Placement(resolve_device(ctx, device), engine, float(reconnect or 0.0))


def resolved(model: Path, place: "Placement") -> Tuple[Path, "Placement"]:
    """MODEL as a file before anything opens it: a Coral model's name is pulled (with a
    progress bar) and, when auto finds no Edge TPU, its CPU build runs on the CPU (said once).
    A segment set's base name is left to the pipeline."""
    from dataclasses import replace

    from edgeapp.core.edgetpu.pipeline_segments import find_segment_files

    if model.exists() or find_segment_files(model) is not None:
        return model, place
    path, notice = resolve_model(model, place.device)
    if notice:
        say(notice)
        place = replace(place, device="cpu")
    return path, place


def check_common(options: dict, *, model: Optional[Path], mean: Optional[float], std: Optional[float],
                 device: Optional[str], cpu_model: Optional[Path], labels: Optional[Path] = None) -> None:
    """The checks every inference command makes of its numbers before opening anything."""
    finite("--threshold", options.get("threshold"))
    finite("--mean", mean)
    finite("--std", std)
    if std is not None and std <= 0:
        raise UsageError(f"--std must be greater than 0, not {std:g} (the model takes (pixel - mean) / std)")
    threshold = options.get("threshold")
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        say(f"warning: --threshold {threshold:g} is outside 0..1, where scores are: "
            + ("nothing will pass it" if threshold > 1 else "everything passes it"))
    if device is not None and not str(device).strip():
        raise UsageError("--device is empty: give auto, cpu, edgetpu, usb, usb:N, pci:N, a list or all")
    if labels is not None:  # not found, not text: said before the model is opened
        from edgeapp.core.labels import read_labels

        read_labels(labels)
    ignored = ignored_cpu_model(model, cpu_model)
    if ignored:
        say(f"warning: {ignored}")


def ignored_cpu_model(model: Optional[Path], cpu_model: Optional[Path]) -> Optional[str]:
    """--cpu-model is the CPU twin of a compiled model: given with a model that is not compiled
    for the Edge TPU it changes nothing, which the user should hear."""
    if cpu_model is None or model is None or not Path(model).is_file():
        return None  # a Coral model's name: its twin is pulled with it
    from edgeapp.core.tflite.model import load_model

    try:
        compiled = load_model(model).is_edgetpu_compiled
    except EdgeappError:
        return None  # said when it is opened
    if compiled:
        return None
    return (f"--cpu-model {cpu_model} is ignored: {model} is not compiled for the Edge TPU, so "
            "it runs itself on the CPU (--cpu-model is the CPU twin of a *_edgetpu.tflite model)")


def check_exclusive(ctx: typer.Context, first: str, second: str, why: str) -> None:
    """A usage error when both options were typed (a default is no contradiction), e.g. bench's
    `check_exclusive(ctx, "runs", "duration", "--duration times the loop instead of --runs")`."""
    if given(ctx, first) and given(ctx, second):
        raise UsageError(f"{_flag(first)} and {_flag(second)} contradict each other ({why}): "
                         "give one")


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the user gave option `name` (command line or environment), not its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def results_format(fmt, output: Optional[Path]):
    """--format, else what the --output file's extension says (.csv, .jsonl/.ndjson; .json
    is written as JSON lines), else table; a --format that contradicts the extension is said."""
    by_name = format_for_path(output) if output is not None else None
    if fmt is None:
        if by_name is not None and output is not None and output.suffix.lower() == ".json":
            say(f"writing JSON lines (one record per line) to {output}")
        return by_name or Format.table
    fmt = Format(fmt)
    if by_name is not None and by_name != fmt:
        say(f"warning: --format {fmt.value} into {output}, whose extension says {by_name.value}")
    return fmt


def finite(name: str, value: Optional[float]) -> Optional[float]:
    """Typer accepts nan and inf for floats; no option of ours means them."""
    import math

    if value is not None and not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number, not {value}")
    return value


def say(message: str) -> None:
    """One line for the user on stderr (notices, summaries): stdout stays for results."""
    typer.echo(f"edgeapp: {message}", err=True)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with what the user needs to hear: what was kept and how to go on."""




@contextlib.contextmanager
def resumable(writer: "RecordWriter", output: Optional[Path]) -> Iterator[None]:
    """A batch writing through `writer`: Ctrl-C says how many results it wrote, and where, and
    how to go on without redoing them."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - only what Ctrl-C caused is turned into Interrupted
        if not is_interrupt(e):
            raise
        raise Interrupted(_written_hint(writer, output)) from None
    except KeyboardInterrupt:
        raise Interrupted(_written_hint(writer, output)) from None


def _written_hint(writer: "RecordWriter", output: Optional[Path]) -> str:
    """The resume hint, once the records produced so far are written (they are counted then)."""
    try:
        writer.flush()
    except (OSError, EdgeappError):  # a full disk: the message says what did get written
        pass
    return resume_hint(writer.written, output, writer.fmt, writer.kept)


def resume_hint(written: int, output: Optional[Path], fmt: Optional[Format], kept: int = 0) -> str:
    """`12 result(s) written to out.jsonl; run the same command with --resume to go on`."""
    if output is None:
        return (f"{written} result(s) written to stdout; to be able to resume a batch, write its "
                "results to a file: --output results.jsonl (or .csv), then run the same command "
                "with --resume")
    where = f"{written} result(s) written to {output}" + (f" ({kept} from before)" if kept else "")
    if Format(fmt) == Format.table:
        return (f"{where}; the table format cannot be resumed: next time use --output with a "
                ".jsonl or .csv name (or --format jsonl), then --resume goes on where it stopped")
    return f"{where}; run the same command with --resume to go on without redoing them"


class progress_bar:
    """A progress bar on stderr when it is a terminal and there is more than one item.

    Used as `with progress_bar(n, "calibrating") as advance: ... advance()`; `advance` is None
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


@contextlib.contextmanager
def elapsed_spinner(label: str) -> Iterator[None]:
    """A spinner with the elapsed time on stderr while one long step runs (a compile under
    emulation); nothing in scripts and pipes."""
    if not sys.stderr.isatty() or os.environ.get("EDGEAPP_NO_PROGRESS"):
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TimeElapsedColumn

    progress = Progress(SpinnerColumn(), "{task.description}", TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    with progress:
        progress.add_task(label, total=None)
        yield
