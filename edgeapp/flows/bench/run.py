"""The benchmark as a whole run: the devices and thread counts asked for, a segment set's
pipeline, the comparison with the CPU; the JSON document (docs/bench.md).

One device is measured by flows/bench/one_device.py, a thread sweep by flows/bench/threads.py,
several Edge TPUs together by flows/bench/several_tpus.py; which devices, by flows/bench/which_devices.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional

from typing_extensions import TypedDict

from edgeapp.core import stats
from edgeapp.core.edgetpu.pipeline_segments import find_segment_files, set_label
from edgeapp.core.limits import MAX_THREADS
from edgeapp.core.naming import edgetpu_twin_path, segment_source
from edgeapp.core.tflite.model import TfliteModel, load_model
from edgeapp.errors import DeviceUnavailable, EdgeappError, UsageError
from edgeapp.flows.bench.one_device import (  # noqa: F401 - importers of the benchmark find them here
    BenchOptions,
    DeviceResult,
    bench_device,
    random_input,
    save_peaks,
    time_invocations,
    unavailable,
)
from edgeapp.flows.bench.several_tpus import ParallelSection, PipelineSection, bench_parallel, bench_pipeline
from edgeapp.flows.bench.threads import ThreadSweep, mark_best, sweep
from edgeapp.flows.bench.which_devices import check_measured, plan_devices
from edgeapp.hw import hostinfo
from edgeapp.hw.hostinfo import HostInfo
from edgeapp.hw.worker import events as engine_events
from edgeapp.hw.worker.events import OutageCounts, Tally

SCHEMA = "edgeapp.bench/1"


class HostSection(HostInfo):
    loadavg_1m: Optional[float]
    runtimes: List[str]  # "name version" of each runtime that measured something


class ModelSection(TypedDict, total=False):
    """bench's `model`: the file measured (a segment set: its name and count; --synthetic: the
    generated model, described)."""
    path: str
    bytes: int
    edgetpu_compiled: bool
    input_shape: List[int]
    input_dtype: str
    segments: int
    synthetic: bool
    description: str
    macs: int
    parameter_bytes: int


class Speedup(TypedDict):
    """An accelerator against the (best) CPU result: first inference, and warm median."""
    cold_speedup: Optional[float]
    warm_speedup: Optional[float]
    cpu_threads: Optional[int]


class BenchDoc(TypedDict, total=False):
    """`bench --format json` (schema edgeapp.bench/1, docs/bench.md)."""
    schema: str
    host: HostSection
    model: ModelSection
    results: List[DeviceResult]
    comparison: Dict[str, Speedup]  # by accelerator name
    parallel: ParallelSection
    pipeline: PipelineSection
    thread_sweep: ThreadSweep
    engine: OutageCounts  # only when an engine was lost and recovered while measuring
    notes: List[str]


def _round(v: Optional[float], digits: int) -> Optional[float]:
    return None if v is None else round(v, digits)


def thread_counts(threads: Optional[str]) -> list[Optional[int]]:
    """--threads: None (runtime default), N, or auto (1..usable cores)."""
    if threads is None or threads == "":
        return [None]
    if threads == "auto":
        return list(range(1, hostinfo.usable_cores() + 1))
    try:
        n = int(threads)
    except ValueError:
        raise UsageError(f"--threads must be a number or auto, not {threads!r}") from None
    if not 1 <= n <= MAX_THREADS:
        raise UsageError(f"--threads must be between 1 and {MAX_THREADS}")
    return [n]


def run_bench(model_path: str, device: str, threads: Optional[str], opts: BenchOptions,
              progress=None, no_tpu_reason: Optional[str] = None) -> BenchDoc:
    """Benchmark `model_path` on the device(s) and thread counts asked for: the JSON document.

    A CPU model X.tflite runs on the Edge TPU as X_edgetpu.tflite when that is beside it; a
    compiled model runs on the CPU as its twin (runtime.open_engine). `no_tpu_reason` says why
    there is no compiled model to run on the Edge TPU (e.g. no compiler for --synthetic).
    A run that measured nothing raises DeviceUnavailable (which_devices.check_measured).
    An engine lost and recovered meanwhile (a worker, docs/recovery.md) is counted in `engine`
    and said in a note: the latencies measured then include the recovery.
    """
    tally = Tally()
    with engine_events.listening(tally):
        doc = _run_bench(model_path, device, threads, opts, progress, no_tpu_reason)
    if tally.events:
        doc["engine"] = tally.summary()
        doc.setdefault("notes", []).append(f"{tally.line()}: the latencies include the recovery")
    return doc


def _run_bench(model_path: str, device: str, threads: Optional[str], opts: BenchOptions,
               progress, no_tpu_reason: Optional[str]) -> BenchDoc:
    plan = plan_devices(device)
    counts = thread_counts(threads)
    segments = None
    if not opts.synthetic:
        segments = find_segment_files(model_path)
    if segments is not None:
        return check_measured(_run_pipeline_bench(segments, plan, counts, opts, progress), plan)
    model = load_model(model_path)  # read once: every device and thread count runs this parse
    compiled_twin = None
    if not model.is_edgetpu_compiled and edgetpu_twin_path(model_path).exists():
        compiled_twin = _load_compiled(edgetpu_twin_path(model_path))
    results: List[DeviceResult] = []
    for dev in plan.devices:
        tpu = dev not in ("cpu", "auto")
        target = compiled_twin if tpu and compiled_twin is not None else model
        if tpu and not target.is_edgetpu_compiled and (no_tpu_reason or plan.choice.every):
            why = no_tpu_reason or (f"{model_path} is not compiled for the Edge TPU: run `edgeapp "
                                    f"compile {model_path}` first (the cpu row measures it as it is)")
            results.append({**unavailable("edgetpu", why, str(model_path)), "device_name": dev})
            continue
        results += _measure(target, dev, [None] if tpu else counts, opts, progress, plan.lenient)
    if plan.cpu_after and not any(r.get("available") for r in results):
        results += _measure(model, "cpu", counts, opts, progress, False)  # the CPU twin takes over
    doc: BenchDoc = {"schema": SCHEMA, "host": host_section(results), "model": _model_section(model),
                     "results": results}
    _mark_best(doc)
    comparison = compare(results)
    if comparison:
        doc["comparison"] = comparison
    tpus = [r for r in results if r.get("available") and r["device"] == "edgetpu"]
    if len(tpus) >= 2:  # several TPUs: together too, and how that scales
        doc["parallel"] = bench_parallel(tpus[0]["model"], [r["device_name"] for r in tpus], opts,
                                         random_input, opts.samples)
    return check_measured(doc, plan)


def _measure(target, dev: str, counts: list, opts: BenchOptions, progress, lenient: bool) -> list:
    """One device; several thread counts are timed in interleaved rounds (threads.py)."""
    if len(counts) > 1:
        return sweep(target, dev, counts, opts, progress)
    r = bench_device(target, dev, counts[0], opts, strict=not lenient)
    if progress:
        progress(r)
    return [r]


def _run_pipeline_bench(segments: list, plan, counts: list, opts: BenchOptions,
                        progress=None) -> BenchDoc:
    """A segment set: the pipeline over as many TPUs, and its whole model on the CPU with all,
    with --device cpu, or when auto lets the CPU take over from a pipeline that cannot run."""
    n = len(segments)
    if plan.one_tpu:
        raise UsageError(f"{n} segments run on {n} Edge TPUs, one each: use --device all or name "
                         f"{n} TPUs (usb:0,usb:1,...), not {plan.text}")
    whole = Path(opts.cpu_model) if opts.cpu_model else segment_source(segments[0])
    results: List[DeviceResult] = []
    if plan.every and whole.exists():
        results += _measure(str(whole), "cpu", counts, opts, progress, False)
    if plan.cpu_only:
        pipe: PipelineSection = {"mode": "pipeline", "available": False, "segments": n,
                                 "reason": f"--device cpu runs the whole model {whole.name} instead"}
    else:
        pipe = bench_pipeline(segments, plan.text, opts, random_input, opts.samples)
    if not results and (plan.cpu_only or plan.tpu_optional and not pipe.get("available")):
        if not whole.exists():
            raise DeviceUnavailable(f"{pipe['reason']}: the whole model's CPU twin {whole} was not "
                                    "found; pass --cpu-model X.tflite (the model that was segmented)")
        results += _measure(str(whole), "cpu", counts, opts, progress, False)
    model: ModelSection = {**_model_section(load_model(segments[0])), "path": set_label(segments), "segments": n}
    doc: BenchDoc = {"schema": SCHEMA, "host": host_section(results), "model": model, "results": results}
    _mark_best(doc)
    doc["pipeline"] = pipe
    return doc


def _mark_best(doc: BenchDoc) -> None:
    """A thread sweep's best row and its `thread_sweep` section (threads.mark_best)."""
    section = mark_best(doc["results"])
    if section:
        doc["thread_sweep"] = section


def compare(results: List[DeviceResult]) -> Optional[Dict[str, Speedup]]:
    """Speed-up of each accelerator over the (best) CPU result, cold and warm; warm by the
    median latency (a stall in the CPU's runs must not make the accelerator look faster)."""
    cpus = [r for r in results if r.get("available") and r["device"] == "cpu"]
    others = [r for r in results if r.get("available") and r["device"] != "cpu"]
    if not cpus or not others:
        return None
    cpu = next((r for r in cpus if r.get("best")), None) or min(cpus, key=lambda r: r["latency_ms"]["p50"])
    out: Dict[str, Speedup] = {}
    for r in others:
        out[r.get("device_name") or r["device"]] = {
            "cold_speedup": _round(stats.speedup(cpu["first_ms"], r["first_ms"]), 2),
            "warm_speedup": _round(stats.speedup(cpu["latency_ms"]["p50"], r["latency_ms"]["p50"]), 2),
            "cpu_threads": cpu["threads"]}
    return out


def host_section(results: List[DeviceResult]) -> HostSection:
    host: HostSection = hostinfo.host_info()  # type: ignore[assignment]  # completed below
    try:
        host["loadavg_1m"] = round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        host["loadavg_1m"] = None
    rts = sorted({f"{r['runtime']} {r['runtime_version']}" for r in results if r.get("available")})
    host["runtimes"] = rts
    return host


def _load_compiled(path: Path) -> Optional[TfliteModel]:
    """The compiled build beside a CPU model, if it is one (else bench runs the CPU model)."""
    try:
        m = load_model(path)
    except EdgeappError:
        return None
    return m if m.is_edgetpu_compiled else None


def _model_section(m: TfliteModel) -> ModelSection:
    return {"path": m.path, "bytes": m.size, "edgetpu_compiled": m.is_edgetpu_compiled,
            "input_shape": list(m.input_tensors[0].shape), "input_dtype": m.input_tensors[0].dtype}
