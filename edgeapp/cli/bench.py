"""`edgeapp bench`: latency, throughput, achieved TOPS and TOPS per watt, per device."""

import json
import os
from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.options import CpuKernels, CpuKernelsOpt
from edgeapp.cli.options import (CpuModelOpt, NoProbeOpt, ReportFormat, ReportFormatOpt, RuntimeOpt,
                          choices, cli_errors, finite, resolve_device, resolve_model, resolve_runtime,
                          say)
from edgeapp.hw.power import POWER_MODES
from edgeapp.errors import UsageError

app = typer.Typer()


PowerMode = choices("PowerMode", POWER_MODES)



@app.command("bench")
@cli_errors
def bench_command(
    ctx: typer.Context,
    model: Annotated[Optional[Path], typer.Argument(
        help="A .tflite model, or its *_edgetpu.tflite build, or a Coral model's name (omit "
             "with --synthetic).",
        show_default=False)] = None,
    device: Annotated[Optional[str], typer.Option(
        "--device", "-d", metavar="DEVICE",
        help="auto, cpu, edgetpu, usb[:N], pci[:N], or all (every device side by side). "
             "Default: the global --device, else auto (all with --synthetic).",
        show_default=False)] = None,
    runs: Annotated[int, typer.Option("--runs", "-n", min=1, help="Timed inferences.")] = 100,
    warmup: Annotated[int, typer.Option("--warmup", min=0,
                                        help="Untimed inferences after the first (cold) one.")] = 10,
    duration: Annotated[Optional[float], typer.Option(
        "--duration", min=0.01, help="Run the timed loop for S seconds instead of --runs.",
        show_default=False)] = None,
    threads: Annotated[Optional[str], typer.Option(
        "--threads", metavar="N|auto",
        help="CPU interpreter threads; auto sweeps 1..cores and marks the best. "
             "Default: the runtime's.", show_default=False)] = None,
    power_mode: Annotated[PowerMode, typer.Option(
        "--power", help="Power source: auto tries rapl, hwmon, vcgencmd (Edge TPU: nominal 2 W).")
    ] = PowerMode.auto,
    watts: Annotated[Optional[float], typer.Option(
        "--watts", min=0.001, max=100000.0, help="Power draw you measured (e.g. a USB power meter); used for "
                                   "TOPS/W instead of any sensor.", show_default=False)] = None,
    fmt: ReportFormatOpt = ReportFormat.table,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Also append the JSON document, one line per run, to FILE.",
        show_default=False)] = None,
    synthetic: Annotated[bool, typer.Option(
        "--synthetic", help="Benchmark a generated int8 CONV_2D stack that fits the Edge TPU "
                            "cache: the achievable int8 TOPS of each device (remembered as the "
                            "CPU's peak).")] = False,
    cpu_model: CpuModelOpt = None,
    cpu_kernels: CpuKernelsOpt = CpuKernels.fast,
    runtime: RuntimeOpt = None,
    no_probe: NoProbeOpt = False,
) -> None:
    """Benchmark a model: cold and warm latency, throughput, achieved TOPS, TOPS per watt.

    Also load time, ops per inference and power (with its source named), CPU and Edge TPU side
    by side, with the context needed to trust the numbers.
    """
    finite("--watts", watts)
    finite("--duration", duration)

    from edgeapp.flows.bench import BenchOptions, run_bench, save_peaks
    from edgeapp.hw.runtime import parse_device

    dev = resolve_device(ctx, device)
    if synthetic and device is None and dev == "auto":
        dev = "all"
    if dev != "all":
        parse_device(dev)  # UsageError for a bad device string
    if synthetic and model is not None:
        raise UsageError("give a MODEL or --synthetic, not both")
    if not synthetic and model is None:
        raise UsageError("missing MODEL (or use --synthetic)")
    opts = BenchOptions(runs=runs, warmup=warmup, duration=duration, power_mode=power_mode.value,
                        watts=watts, runtime=resolve_runtime(ctx, runtime),
                        cpu_model=str(cpu_model) if cpu_model else None, synthetic=synthetic,
                        probe=not no_probe, cpu_kernels=cpu_kernels.value)
    progress = _progress if fmt == ReportFormat.table or os.environ.get("EDGEAPP_VERBOSE") else None

    if synthetic:
        import tempfile

        from edgeapp.errors import CompileError, MissingDependency
        from edgeapp.flows.synthetic import DEFAULT_SPEC, compile_for_edgetpu, write_synthetic

        with tempfile.TemporaryDirectory(prefix="edgeapp-synthetic-") as tmp:
            path = write_synthetic(Path(tmp) / "synthetic_int8.tflite", DEFAULT_SPEC)
            say(DEFAULT_SPEC.describe())
            reason = None
            if dev != "cpu":
                try:
                    compile_for_edgetpu(path)
                except (MissingDependency, CompileError) as e:
                    if dev not in ("all", "auto"):
                        raise  # an Edge TPU was asked for explicitly
                    reason = str(e)
            doc = run_bench(str(path), dev, threads, opts, progress, no_tpu_reason=reason)
        doc["model"] = {"synthetic": True, "description": DEFAULT_SPEC.describe(),
                        "macs": DEFAULT_SPEC.macs, "parameter_bytes": DEFAULT_SPEC.parameter_bytes}
        note = save_peaks(doc["results"])
        if note:
            doc.setdefault("notes", []).append(note)
    else:
        model, notice = resolve_model(model, dev)  # a Coral model's name: pulled when absent
        if notice:
            say(notice)
        doc = run_bench(str(model), dev, threads, opts, progress)

    if output is not None:
        try:
            with open(output, "a", encoding="utf-8") as f:
                f.write(json.dumps(doc, separators=(",", ":")) + "\n")
        except OSError as e:
            raise UsageError(f"cannot write {output}: {e.strerror or e}") from None
    if fmt == ReportFormat.json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(format_table(doc))
    if output is not None:
        say(f"appended to {output}")


def _progress(result: dict) -> None:
    if result.get("available"):
        threads = result["threads"] if result["threads"] else "default"
        say(f"{result['device']} ({threads} threads): mean {result['latency_ms']['mean']:.3f} ms "
            f"over {result['runs']} runs")


def _fmt(v, spec: str = ".2f", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def format_table(doc: dict) -> str:
    """The human-readable report: one row per device/thread count, then comparison and notes."""
    host, model = doc["host"], doc["model"]
    lines = []
    if model.get("synthetic"):
        lines.append(f"model: {model['description']}")
    else:
        lines.append(f"model: {model['path']}")
    runtimes = ", ".join(host.get("runtimes") or []) or "-"
    lines.append(f"host: {host.get('cpu') or 'unknown CPU'}, {host.get('cores')} cores "
                 f"({host.get('usable_cores')} usable), governor {host.get('governor') or 'n/a'}, "
                 f"load {_fmt(host.get('loadavg_1m'))}; {runtimes}")
    header = (f"{'device':<8} {'thr':>4} {'load ms':>8} {'first ms':>9} {'mean ms':>8} {'std':>7} "
              f"{'min':>7} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} {'inf/s':>8} {'GOPS/inf':>8} "
              f"{'TOPS':>8} {'%peak':>6} {'W':>6} {'source':>8} {'TOPS/W':>7} {'mJ/inf':>7}")
    lines += ["", header]
    notes: List[str] = []
    for r in doc["results"]:
        for n in r.get("notes", []):
            if n not in notes:
                notes.append(n)
        if not r.get("available"):
            lines.append(f"{r['device']:<8} unavailable: {r['reason']}")
            continue
        lat = r["latency_ms"]
        thr = str(r["threads"]) if r["threads"] else "def"
        share = r.get("share_of_peak")
        row = (f"{r['device']:<8} {thr:>4} {r['load_ms']:>8.1f} {r['first_ms']:>9.3f} "
               f"{lat['mean']:>8.3f} {lat['std']:>7.3f} {lat['min']:>7.3f} {lat['p50']:>7.3f} "
               f"{lat['p90']:>7.3f} {lat['p99']:>7.3f} {lat['max']:>7.3f} "
               f"{r['throughput_ips']:>8.1f} "
               f"{_fmt(r['ops_per_inference'] / 1e9 if r['ops_per_inference'] else None, '.3f'):>8} "
               f"{_fmt(r['tops'], '.4f'):>8} {_fmt(share * 100 if share else None, '.1f'):>6} "
               f"{_fmt(r['power_w'], '.2f'):>6} {r['power_source']:>8} "
               f"{_fmt(r['tops_per_watt'], '.4f'):>7} {_fmt(r['mj_per_inference'], '.2f'):>7}")
        if r.get("best"):
            row += "  <- best"
        lines.append(row)
    for dev, c in (doc.get("comparison") or {}).items():
        lines.append(f"{dev} speed-up over CPU: cold {_fmt(c['cold_speedup'])}×, "
                     f"warm {_fmt(c['warm_speedup'])}×")
    if host.get("governor_warning"):
        notes.insert(0, "warning: " + host["governor_warning"])
    notes += doc.get("notes", [])
    if notes:
        lines.append("")
        lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)
