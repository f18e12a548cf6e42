"""`edgeapp bench`: latency, throughput, achieved TOPS and TOPS per watt, per device."""

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.options import (
    CpuKernels,
    CpuKernelsOpt,
    CpuModelOpt,
    IsolateOpt,
    NoProbeOpt,
    PerformanceOpt,
    ReportFormat,
    ReportFormatOpt,
    RuntimeOpt,
    check_exclusive,
    choice_value,
    choices,
    finite,
    resolve_device,
    resolve_model,
    resolve_runtime,
    say,
)
from edgeapp.core.units import counted
from edgeapp.errors import CompileError, MissingDependency, UsageError
from edgeapp.hw.power import POWER_MODES
from edgeapp.sinks.records import append_line

if TYPE_CHECKING:
    from edgeapp.flows.bench.plan import PlanReport
    from edgeapp.flows.bench.run import BenchDoc

app = typer.Typer()


PowerMode = choices("PowerMode", POWER_MODES)
BenchModelArg = Annotated[Optional[Path], typer.Argument(
    help="A .tflite model, or its *_edgetpu.tflite build, or a Coral model's name (omit "
         "with --synthetic).",
    show_default=False)]
BenchDeviceOpt = Annotated[Optional[str], typer.Option(
    "--device", "-d", metavar="DEVICE",
    help="auto, cpu, edgetpu, usb[:N], pci[:N]; a list of Edge TPUs (usb:0,usb:1: each alone, "
         "then together); or all (the CPU and every Edge TPU found, each alone, then the TPUs "
         "together). A list ending in auto (usb:0,auto) also measures the CPU twin when none of "
         "its TPUs can run. A segment set runs as a pipeline. Default: the global --device, else "
         "auto (all with --synthetic).",
    show_default=False)]
RunsOpt = Annotated[int, typer.Option("--runs", "-n", min=1, help="Timed inferences.")]
WarmupOpt = Annotated[int, typer.Option("--warmup", min=0,
                                        help="Untimed inferences after the first (cold) one.")]
DurationOpt = Annotated[Optional[float], typer.Option(
    "--duration", min=0.01, help="Run the timed loop for S seconds instead of --runs; the warm "
                                 "latency is also reported per time window (drift: throttling).",
    show_default=False)]
SweepOpt = Annotated[Optional[str], typer.Option(
    "--threads", metavar="N|auto",
    help="CPU interpreter threads; auto times 1..cores in interleaved rounds and marks the best "
         "by the median of round medians (or says they are within noise). Default: the runtime's.",
    show_default=False)]
PowerOpt = Annotated[PowerMode, typer.Option(
    "--power", help="Power source: auto tries rapl, hwmon, vcgencmd (Edge TPU: nominal 2 W).")]
WattsOpt = Annotated[Optional[float], typer.Option(
    "--watts", min=0.001, max=100000.0, help="Power draw you measured (e.g. a USB power meter); used for "
                                             "TOPS/W instead of any sensor.", show_default=False)]
AppendOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Also append the JSON document, one line per run, to FILE.",
    show_default=False)]
SyntheticOpt = Annotated[bool, typer.Option(
    "--synthetic", help="Benchmark a generated int8 CONV_2D stack that fits the Edge TPU "
                        "cache: the achievable int8 TOPS of each device (remembered as the "
                        "CPU's peak).")]
PlotOpt = Annotated[Optional[Path], typer.Option(
    "--plot", metavar="FILE.png",
    help="Also draw the thread sweep, the latency distributions (outliers shown), the latency per "
         "window of a --duration run and the multi-TPU scaling or per-segment times, into FILE "
         "(its folder is made; needs matplotlib: pip install 'edgeapp[plot]').",
    show_default=False)]
PlanOpt = Annotated[Optional[str], typer.Option(
    "--plan", metavar="COUNTxRES@FPS[,...]",
    help="How many cameras: measure what a frame of each resolution costs here (decode, the "
         "task's host work, the inference on DEVICE) and how much CPU this process gets, and say "
         "whether the plan fits, which part bounds it (decode, the device's thread, the CPU) and "
         "the frame rate each stream gets, "
         "e.g. 4x1080p@10 or 2x720p@15,1x1280x960@5.",
    show_default=False)]
UsbQueueOpt = Annotated[Optional[int], typer.Option(
    "--usb-queue", metavar="N", help="libedgetpu's Usb.MaxBulkInQueueLength (0-255; its default "
                                     "is 32): USB bulk-in transfers kept queued.",
    show_default=False)]


@app.command("bench")
def bench_command(
    ctx: typer.Context,
    model: BenchModelArg = None,
    device: BenchDeviceOpt = None,
    runs: RunsOpt = 100,
    warmup: WarmupOpt = 10,
    duration: DurationOpt = None,
    threads: SweepOpt = None,
    power_mode: PowerOpt = PowerMode.auto,
    watts: WattsOpt = None,
    fmt: ReportFormatOpt = ReportFormat.table,
    output: AppendOpt = None,
    synthetic: SyntheticOpt = False,
    plot: PlotOpt = None,
    cpu_model: CpuModelOpt = None,
    cpu_kernels: CpuKernelsOpt = CpuKernels.fast,
    runtime: RuntimeOpt = None,
    no_probe: NoProbeOpt = False,
    performance: PerformanceOpt = None,
    usb_queue: UsbQueueOpt = None,
    isolate: IsolateOpt = None,
    plan: PlanOpt = None,
) -> None:
    """Benchmark a model: cold and warm latency, throughput, achieved TOPS, TOPS per watt.

    Also load time, ops per inference and power (with its source named), CPU and Edge TPU side
    by side, with the context needed to trust the numbers: the Edge TPU's clock mode and
    temperature before and after; with --duration, the warm latency per time window, and
    "throttling" when it drifts up by more than 15% or the card passes its first trip point.
    """
    finite("--watts", watts)
    finite("--duration", duration)
    check_exclusive(ctx, "runs", "duration", "--duration times the loop instead of counting --runs")
    from edgeapp.flows.bench.run import BenchOptions

    dev = _device(ctx, device, synthetic)
    _check(model, synthetic, plot, usb_queue)
    if plan is not None:
        return _run_plan(ctx, model, dev, plan, fmt, output, cpu_model, runtime, no_probe, cpu_kernels)
    opts = BenchOptions(runs=runs, warmup=warmup, duration=duration, power_mode=choice_value(power_mode),
                        watts=watts, runtime=resolve_runtime(ctx, runtime),
                        cpu_model=str(cpu_model) if cpu_model else None, synthetic=synthetic,
                        probe=not no_probe, cpu_kernels=choice_value(cpu_kernels),
                        samples={} if plot is not None else None,
                        performance=choice_value(performance), usb_queue=usb_queue, isolate=isolate)
    progress = _progress if fmt == ReportFormat.table or os.environ.get("EDGEAPP_VERBOSE") else None
    doc = _run_synthetic(dev, threads, opts, progress) if synthetic else \
        _run_model(model, dev, threads, opts, progress)
    _report(doc, fmt, output)
    _plot(doc, opts, plot)


def _plot(doc: dict, opts: Any, plot: Optional[Path]) -> None:
    """--plot: the latencies kept while benchmarking, drawn."""
    if plot is not None:
        from edgeapp.sinks.plots import plot_bench

        plot_bench(doc, opts.samples or {}, plot)
        say(f"plot written to {plot}")


def _run_model(model: Path, dev: str, threads: Optional[str], opts, progress) -> "BenchDoc":
    from edgeapp.flows.bench.run import run_bench

    model, notice = resolve_model(model, dev)  # a Coral model's name: pulled when absent
    if notice:
        say(notice)
    return run_bench(str(model), dev, threads, opts, progress)


def _run_plan(ctx: typer.Context, model: Optional[Path], dev: str, plan: str, fmt, output: Optional[Path],
              cpu_model, runtime, no_probe: bool, cpu_kernels) -> None:
    """`--plan`: the camera plan's costs measured here and its fit predicted."""
    from edgeapp.core.capacity import parse_plan
    from edgeapp.flows.bench.plan import run_plan
    from edgeapp.flows.open_task import Placement
    from edgeapp.hw.runtime import EngineOptions

    try:
        groups = parse_plan(plan)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if "," in dev or dev == "all":
        raise UsageError("--plan measures one device: give --device cpu, usb:0, pci:0 or auto")
    model, notice = resolve_model(model, dev)
    if notice:
        say(notice)
    place = Placement(dev, EngineOptions(str(cpu_model) if cpu_model else None, resolve_runtime(ctx, runtime),
                                         probe=not no_probe, cpu_kernels=choice_value(cpu_kernels)))
    doc = run_plan(str(model), groups, place, progress=(lambda text: say(text)) if fmt == ReportFormat.table else None)
    if output is not None:
        append_line(output, json.dumps(doc))
    if fmt == ReportFormat.json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(render_plan(doc))


def render_plan(doc: "PlanReport") -> str:
    """The plan's verdict, each part's load and each group's frame rate, for a terminal."""
    pred = doc["prediction"]
    parts = {"decode": "decode (the busiest stream's capture thread)",
             "device": f"the device's thread on {doc['device']} (prepare, invoke, interpret)",
             "cpu": f"all CPU work over the {doc['cpu_share']['total']:.2f} cores this process gets"}
    verdict = (f"fits: {pred['bound']} is the busiest at {pred['load']:.0%}, {pred['headroom']:.0%} headroom"
               if pred["fits"] else f"does not fit: {pred['bound']} is asked {pred['load']:.0%}; each stream "
                                 "gets its share of the frame rate asked")
    lines = [f"plan on {doc['device']} ({Path(doc['model']).name}, {doc['task']}): {verdict}", ""]
    lines += [f"  {parts[k]:<60} {v:>6.0%}" + ("  <- bound" if k == pred["bound"] else "")
              for k, v in pred["loads"].items()]
    lines += ["", f"  {'streams':<22} {'asked fps':>9} {'gets fps':>9}"]
    lines += [f"  {str(g['streams']) + ' x ' + str(g['width']) + 'x' + str(g['height']):<22} "
              f"{g['fps']:>9g} {g['predicted_fps']:>9.1f}" for g in doc["plan"]]
    lines += ["", f"  {'frame':<10} {'decode ms':>10} {'host ms':>8} {'infer ms':>9} {'its CPU ms':>10} "
                  f"{'loop ms':>8} {'one stream max fps':>19}"]
    lines += [f"  {size:<10} {c['decode_ms']:>10.2f} {c['host_ms']:>8.2f} {c['infer_ms']:>9.2f} "
              f"{c['infer_cpu_ms']:>10.2f} {c['loop_ms']:>8.2f} {c['one_stream_max_fps']:>19.1f}"
              for size, c in doc["costs"].items()]
    share = doc["cpu_share"]
    lines += ["", f"  CPU this process gets now: {share['total']:.2f} of {doc['cores']} cores together, "
                  f"{share['thread']:.0%} of a core for one thread (other programs' load takes the rest)"]
    lines += [""] + [f"note: {n}" for n in doc["notes"]]
    return "\n".join(lines)


def _check(model: Optional[Path], synthetic: bool, plot: Optional[Path], usb_queue: Optional[int]) -> None:
    """Contradictions and impossible values, before any work."""
    from edgeapp.core.edgetpu.clock import check_usb_queue

    if plot is not None:
        from edgeapp.sinks.plots import check_plot_target

        check_plot_target(plot)
    if synthetic and model is not None:
        raise UsageError("give a MODEL or --synthetic, not both")
    if not synthetic and model is None:
        raise UsageError("missing MODEL (or use --synthetic)")
    problem = check_usb_queue(usb_queue)
    if problem:
        raise UsageError(problem)


def _device(ctx: typer.Context, device: Optional[str], synthetic: bool) -> str:
    """--device, else the global one; --synthetic measures everything by default."""
    from edgeapp.hw.device_choice import parse_devices

    dev = resolve_device(ctx, device)
    if synthetic and device is None and parse_devices(dev).text == "auto":
        dev = "all"
    parse_devices(dev)  # UsageError for a bad device string or list, before any work
    return dev


def _run_synthetic(dev: str, threads: Optional[str], opts, progress) -> "BenchDoc":
    """The generated int8 model, compiled for the Edge TPU when one is asked for and there."""
    import tempfile

    from edgeapp.flows.bench.run import run_bench, save_peaks
    from edgeapp.flows.bench.synthetic import DEFAULT_SPEC, compile_for_edgetpu, edge_tpu_present, write_synthetic
    from edgeapp.flows.bench.which_devices import plan_devices

    plan = plan_devices(dev)
    with tempfile.TemporaryDirectory(prefix="edgeapp-synthetic-") as tmp:
        path = write_synthetic(Path(tmp) / "synthetic_int8.tflite", DEFAULT_SPEC)
        say(DEFAULT_SPEC.describe())
        reason = None
        if plan.tpu_optional and not edge_tpu_present():
            reason = "no Edge TPU found, so edgetpu_compiler was not run on the synthetic model"
        elif not plan.cpu_only:
            try:
                compile_for_edgetpu(path)
            except (MissingDependency, CompileError) as e:
                if not plan.tpu_optional:
                    raise  # an Edge TPU was asked for explicitly
                reason = str(e)
        doc = run_bench(str(path), dev, threads, opts, progress, no_tpu_reason=reason)
    doc["model"] = {"synthetic": True, "description": DEFAULT_SPEC.describe(),
                    "macs": DEFAULT_SPEC.macs, "parameter_bytes": DEFAULT_SPEC.parameter_bytes}
    note = save_peaks(doc["results"])
    if note:
        doc.setdefault("notes", []).append(note)
    return doc


def _report(doc: dict, fmt: ReportFormat, output: Optional[Path]) -> None:
    """The document on stdout (table or JSON), and appended to --output as one line."""
    if fmt == ReportFormat.json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        from edgeapp.cli.table import output_width

        typer.echo(format_table(doc, output_width()))
    if output is None:
        return
    line = json.dumps(doc, separators=(",", ":")) + "\n"
    try:
        append_line(output, line)
    except (OSError, UsageError) as e:  # a full disk, a file for a folder: keep the measurement
        if fmt != ReportFormat.json:
            typer.echo(line, nl=False)
        why = str(e) if isinstance(e, UsageError) else f"cannot append to {output}: {e.strerror or e}"
        raise UsageError(f"{why}; the JSON document is on stdout instead") from None
    say(f"appended to {output}")


def _progress(result: dict) -> None:
    if result.get("available"):
        threads = counted(result["threads"], "thread") if result["threads"] else "default threads"
        name = result.get("device_name") or result["device"]
        lat = result["latency_ms"]
        say(f"{name} ({threads}): median {lat['p50']:.3f} ms, mean {lat['mean']:.3f} ms "
            f"over {result['runs']} runs")


def _fmt(v, spec: str = ".2f", none: str = "-") -> str:
    return none if v is None else format(v, spec)


# The results table's columns: (header, right-aligned), and which a narrow terminal keeps first
COLUMNS = (("device", False), ("thr", True), ("load ms", True), ("first ms", True), ("mean ms", True),
           ("std", True), ("min", True), ("p50", True), ("p90", True), ("p99", True), ("max", True),
           ("inf/s", True), ("GOPS/inf", True), ("TOPS", True), ("%peak", True), ("W", True),
           ("source", True), ("TOPS/W", True), ("mJ/inf", True))
KEPT_FIRST = ("device", "thr", "mean ms", "p50", "p99", "inf/s", "first ms", "TOPS", "TOPS/W", "W",
              "load ms", "std", "min", "max", "p90", "GOPS/inf", "%peak", "source", "mJ/inf")


def _cells(r: dict) -> List[str]:
    lat = r["latency_ms"]
    share = r.get("share_of_peak")
    gops = r["ops_per_inference"] / 1e9 if r["ops_per_inference"] else None
    return [r.get("device_name") or r["device"], str(r["threads"]) if r["threads"] else "def",
            f"{r['load_ms']:.1f}", f"{r['first_ms']:.3f}"] + [
        f"{lat[k]:.3f}" for k in ("mean", "std", "min", "p50", "p90", "p99", "max")] + [
        f"{r['throughput_ips']:.1f}", _fmt(gops, ".3f"), _fmt(r["tops"], ".4f"),
        _fmt(share * 100 if share else None, ".1f"), _fmt(r["power_w"], ".2f"), str(r["power_source"]),
        _fmt(r["tops_per_watt"], ".4f"), _fmt(r["mj_per_inference"], ".2f")]


def _results_lines(doc: dict, width: Optional[int]) -> tuple:
    """The results table (each row one line, the columns a narrow terminal has room for), the
    columns left out."""
    from edgeapp.cli.table import render

    headers = [h for h, _ in COLUMNS]
    measured = [r for r in doc["results"] if r.get("available")]
    lines, left_out = render(headers, [_cells(r) for r in measured],
                             priority=[headers.index(h) for h in KEPT_FIRST],
                             right=[i for i, (_, right) in enumerate(COLUMNS) if right], width=width)
    rows = iter(lines[1:])
    out = [lines[0]]
    for r in doc["results"]:
        if not r.get("available"):
            out.append(f"{r.get('device_name') or r['device']:<8} unavailable: {r['reason']}")
            continue
        row = next(rows)
        if r.get("best"):
            row += "  <- best" + (" (within noise)" if (doc.get("thread_sweep") or {}).get("within_noise")
                                  else "")
        out.append(row)
    return out, left_out


def format_table(doc: dict, width: Optional[int] = None) -> str:
    """The human-readable report: one row per device/thread count, then comparison and notes;
    within `width` columns when given (the least important columns left out, prose wrapped)."""
    from edgeapp.cli.table import left_out_note

    host, model = doc["host"], doc["model"]
    lines = [f"model: {model['description']}" if model.get("synthetic") else f"model: {model['path']}"]
    runtimes = ", ".join(host.get("runtimes") or []) or "-"
    lines.append(f"host: {host.get('cpu') or 'unknown CPU'}, {host.get('cores')} cores "
                 f"({host.get('usable_cores')} usable), governor {host.get('governor') or 'n/a'}, "
                 f"load {_fmt(host.get('loadavg_1m'))}; {runtimes}")
    notes: List[str] = []
    for r in doc["results"]:
        notes += [n for n in r.get("notes", []) if n not in notes]
    if doc["results"]:
        table, left_out = _results_lines(doc, width)
        lines += [""] + table
        note = left_out_note(left_out, width, "`--format json`")
        if note:
            notes.append(note)
    for dev, c in (doc.get("comparison") or {}).items():
        lines.append(f"{dev} speed-up over CPU: cold {_fmt(c['cold_speedup'])}×, "
                     f"warm {_fmt(c['warm_speedup'])}×")
    lines += multi_tpu_lines(doc, notes)
    lines += _clock_lines(doc)
    if host.get("governor_warning"):
        notes.insert(0, "warning: " + host["governor_warning"])
    if doc.get("thread_sweep"):
        from edgeapp.flows.bench.threads import sweep_note

        notes.insert(0, sweep_note(doc["thread_sweep"]))
    notes += doc.get("notes", [])
    if notes:
        lines.append("")
        lines += [f"note: {n}" for n in notes]
    return "\n".join(_wrapped(lines, width))


def _wrapped(lines: List[str], width: Optional[int]) -> List[str]:
    """Prose lines (model, host, notes) wrapped to `width`; table rows are already within it."""
    import textwrap

    if width is None:
        return lines
    out: List[str] = []
    for line in lines:
        if len(line) <= width or ":" not in line.split(" ", 1)[0] + " ":
            out.append(line)
        else:
            out += textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False,
                                 break_long_words=False) or [line]
    return out


def _clock_lines(doc: dict) -> list:
    from edgeapp.flows.bench.thermal import table_lines

    found = table_lines(doc["results"])
    return [""] + found if found else []


def multi_tpu_lines(doc: dict, notes: list) -> list:
    """The data-parallel and pipeline sections of the table."""
    lines = []
    par = doc.get("parallel")
    if par and not par.get("available"):
        lines += ["", f"together: unavailable: {par['reason']}"]
    elif par:
        lat = par["latency_ms"]
        lines += ["", f"together on {', '.join(par['devices'])}: {par['throughput_ips']:.1f} inf/s over "
                      f"{par['runs']} runs (p50 {lat['p50']:.3f} ms, p99 {lat['p99']:.3f} ms); scaling "
                      f"efficiency {_fmt(par['scaling_efficiency'])} "
                      f"(1.00 = {len(par['devices'])}× one TPU)",
                  f"{'TPUs':>6} {'inf/s':>9} {'efficiency':>10}"]
        lines += [f"{p['tpus']:>6} {p['throughput_ips']:>9.1f} {_fmt(p['efficiency']):>10}"
                  for p in par["scaling"]]
        lines.append("per device in the pool: " + ", ".join(
            f"{d} {v['runs']} runs, mean {v['mean_ms']:.3f} ms" for d, v in par["per_device"].items()))
        notes += [n for n in par.get("notes", []) if n not in notes]
    pipe = doc.get("pipeline")
    if pipe and not pipe.get("available"):
        lines += ["", f"pipeline of {pipe['segments']} segments: unavailable: {pipe['reason']}"]
    elif pipe:
        e2e = pipe["end_to_end_ms"]
        lines += ["", f"pipeline of {pipe['segments']} segments on {', '.join(pipe['devices'])}: "
                      f"{pipe['throughput_ips']:.1f} inf/s over {pipe['runs']} runs; end to end p50 "
                      f"{e2e['p50']:.3f} ms, p99 {e2e['p99']:.3f} ms; {_fmt(pipe['share_of_bound'])} of "
                      f"the bottleneck's bound ({_fmt(pipe['bound_ips'], '.1f')} inf/s)",
                  f"{'segment':>7} {'device':<8} {'mean ms':>8}"]
        for s in pipe["per_segment"]:
            mark = "  <- bottleneck" if s["bottleneck"] else ""
            lines.append(f"{s['segment']:>7} {s['device']:<8} {_fmt(s['mean_ms'], '.3f'):>8}{mark}")
    return lines
