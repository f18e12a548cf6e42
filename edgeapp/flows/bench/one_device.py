"""One device in `bench`: open, load, the cold first inference, warm-up, timed runs under the
power meter; then ops, TOPS, power and energy: one result dict of the documented JSON schema.

Devices that cannot be used give a result with `"available": false` and the reason instead of
an exception, so `--device all` always shows every device. Only `runtime.open_engine` touches
the TFLite runtime. Whole runs (devices, thread counts, segment sets) are flows/bench/run.py's.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core import stats
from edgeapp.core.edgetpu.opcount import OpCount, count_ops
from edgeapp.core.edgetpu.specs import PEAK_TOPS
from edgeapp.core.naming import cpu_twin_path
from edgeapp.core.tflite.model import TfliteModel, load_model
from edgeapp.core.units import counted
from edgeapp.core.userdirs import cache_dir  # the CPU peak measured by --synthetic is kept there
from edgeapp.errors import DeviceUnavailable, EdgeappError, UsageError
from edgeapp.flows.bench import thermal as bench_thermal
from edgeapp.hw import hostinfo, power
from edgeapp.hw.hostinfo import UsbLink
from edgeapp.hw.libedgetpu import edgetpu_library
from edgeapp.hw.runtime import Engine, find_runtime, open_engine
from edgeapp.hw.tpu_state import TpuState


@dataclass
class BenchOptions:
    runs: int = 100
    warmup: int = 10
    duration: Optional[float] = None  # seconds of timed runs; overrides `runs` when given
    power_mode: str = "auto"
    watts: Optional[float] = None
    runtime: Optional[str] = None
    cpu_model: Optional[str] = None
    synthetic: bool = False
    probe: bool = True  # try the Edge TPU delegate in a child process first (probe.py)
    cpu_kernels: str = "fast"  # runtime.CPU_KERNELS
    seed: int = 0
    extra_notes: list[str] = field(default_factory=list)
    samples: Optional[dict] = None  # label -> latencies (ms), kept for --plot when a dict
    performance: Optional[str] = None  # libedgetpu's Performance (core/edgetpu/clock.py)
    usb_queue: Optional[int] = None  # libedgetpu's Usb.MaxBulkInQueueLength
    isolate: Optional[bool] = None  # the engine in a worker process (hw/worker/); None: on an Edge TPU


def random_input(shape: tuple[int, ...], dtype: np.dtype, seed: int = 0) -> np.ndarray:
    """A deterministic input of the model's own type: timings do not depend on values, but
    saturated or all-zero tensors could take shortcuts in some kernels."""
    rng = np.random.RandomState(seed)  # not default_rng: numpy 1.16 (Coral Dev Board) lacks it
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.randint(info.min, int(info.max) + 1, size=shape, dtype=dtype)
    if dtype == np.bool_:
        return rng.randint(0, 2, size=shape).astype(bool)
    return rng.standard_normal(size=shape).astype(dtype)


def time_invocations(invoke, runs: int, duration: Optional[float],
                     starts: Optional[list] = None) -> tuple[np.ndarray, float]:
    """Per-call latencies (ms) of `invoke()` and the wall-clock window (s) they took; each
    call's start time (s) is appended to `starts` when given (for per-window latency)."""
    latencies: list[float] = []
    clock = time.perf_counter
    start = clock()
    deadline = start + duration if duration else None
    while True:
        t = clock()
        invoke()
        latencies.append((clock() - t) * 1000.0)
        if starts is not None:
            starts.append(t - start)
        if deadline is not None:
            if clock() >= deadline:
                break
        elif len(latencies) >= runs:
            break
    return np.asarray(latencies), clock() - start


class EdgeTpuSection(bench_thermal.EdgeTpuHeat):
    """A result's `edgetpu` object: library version, USB links, clock mode, heat."""
    runtime_version: Optional[str]
    device: str
    usb: List[UsbLink]


class DeviceResult(TypedDict, total=False):
    """One row of bench's `results`: a device measured (`available`), or why it could not be
    (`available: false`, `reason`). docs/bench.md documents each field."""
    device: str  # cpu or edgetpu
    device_name: str  # usb:0, pci:0, the CPU's name
    available: bool
    reason: str
    model: str
    requested_model: Optional[str]
    runtime: str
    runtime_version: Optional[str]
    threads: Optional[int]
    cpu_kernels: str
    warmup: int
    runs: int
    window_s: float
    latency_ms: stats.LatencyJson
    throughput_ips: float
    macs_per_inference: Optional[int]
    ops_per_inference: Optional[int]
    other_ops: Optional[Dict[str, int]]
    tops: Optional[float]
    peak_tops: Optional[float]
    peak_source: Optional[str]
    share_of_peak: Optional[float]
    power_w: Optional[float]
    power_source: str
    power_detail: str
    tops_per_watt: Optional[float]
    inferences_per_joule: Optional[float]
    mj_per_inference: Optional[float]
    load_ms: float
    first_ms: float
    windows: List[bench_thermal.LatencyWindow]
    drift: Optional[float]
    edgetpu: EdgeTpuSection
    throttling: bool
    throttling_reasons: List[str]
    notes: List[str]
    round_p50_ms: List[float]  # a thread sweep's rounds (threads.py)
    best: bool  # a thread sweep's fastest count


def unavailable(device: str, reason: str, model: str) -> DeviceResult:
    return {"device": device, "available": False, "reason": reason, "model": model}


@dataclass
class Ready:
    """An engine opened, run once cold and warmed up: where its timed runs start from."""

    engine: Engine
    device: str
    threads: Optional[int]
    load_ms: float
    first_ms: float
    notes: list
    before: Optional[TpuState]  # the Edge TPU's state before the timed runs


@dataclass
class Timed:
    """Timed runs under the power meter: latencies (ms), their start times (s), the window (s)."""

    latencies: np.ndarray
    starts: list
    window: float
    watts: Optional[float]
    meter: Any


def bench_device(model: Union[str, TfliteModel], device: str, threads: Optional[int], opts: BenchOptions,
                 strict: bool = True) -> DeviceResult:
    """Benchmark one device. An unusable Edge TPU raises (strict) or gives an
    `available: false` result with the reason (for `--device all`)."""
    prepared = ready(model, device, threads, opts, strict)
    if isinstance(prepared, dict):
        return prepared
    return finish(prepared, opts, timed(prepared, opts))


def ready(model: Union[str, TfliteModel], device: str, threads: Optional[int], opts: BenchOptions,
          strict: bool = True) -> Union[Ready, DeviceResult]:
    """Open, load, the cold first inference and the warm-up; or an `available: false` result."""
    opened = _open(model, device, threads, opts, strict)
    if isinstance(opened, dict):
        return opened
    engine, load_ms = opened
    notes = list(opts.extra_notes) + ([engine.notice] if engine.notice else [])
    engine.set_input(random_input(engine.input_shape, engine.input_dtype, opts.seed))
    t = time.perf_counter()
    engine.invoke()  # cold: on the Edge TPU this uploads the model into its memory
    first_ms = (time.perf_counter() - t) * 1000.0
    for _ in range(opts.warmup):
        engine.invoke()
    return Ready(engine, device, threads, load_ms, first_ms, notes,
                 bench_thermal.engine_tpu_state(engine, opts.performance))


def finish(r: Ready, opts: BenchOptions, t: Timed) -> DeviceResult:
    """The result of one device from its timed runs."""
    engine = r.engine
    after = bench_thermal.engine_tpu_state(engine, opts.performance)
    if opts.samples is not None:
        opts.samples[f"{engine.name}" + (f" ({counted(r.threads, 'thread')})" if r.threads else "")] = \
            list(t.latencies)
    notes = r.notes
    result = _figures(engine, r.threads, opts, t.latencies, t.window, t.watts, t.meter, notes)
    result.update(load_ms=round(r.load_ms, 3), first_ms=round(r.first_ms, 3))
    if opts.duration:
        result.update(bench_thermal.windows_section(t.starts, list(t.latencies)))
    if engine.device == "edgetpu":
        result["edgetpu"] = _edgetpu(r.device, r.before, after, notes)
    result.update(bench_thermal.throttling_of(result))
    result["notes"] = list(dict.fromkeys(notes))
    return result


def _open(model, device: str, threads: Optional[int], opts: BenchOptions, strict: bool):
    """(engine, load ms), or an `available: false` result when the TPU cannot be used."""
    find_runtime(opts.runtime)  # import the runtime first: load_ms is the model's, not Python's
    t0 = time.perf_counter()
    try:
        engine = open_engine(model, device, cpu_model=opts.cpu_model, runtime=opts.runtime,
                            threads=threads, probe=opts.probe, cpu_kernels=opts.cpu_kernels,
                            performance=opts.performance, usb_queue=opts.usb_queue, isolate=opts.isolate)
    except (DeviceUnavailable, UsageError) as e:
        if strict or device in ("cpu", "auto"):
            raise
        return {**unavailable(_kind(device), str(e), getattr(model, "path", str(model))),
                "device_name": device}
    return engine, (time.perf_counter() - t0) * 1000.0


def timed(r: Ready, opts: BenchOptions, runs: Optional[int] = None,
          duration: Optional[float] = None) -> Timed:
    """`runs` (default --runs) or `duration` seconds of timed runs under the power meter."""
    engine, notes = r.engine, r.notes
    meter = power.open_meter(opts.power_mode, engine.device, watts=opts.watts)
    notes.extend(meter.notes)
    try:
        meter.start()
    except power.SensorUnavailable as e:
        notes.append(f"{meter.source}: {e}")
        meter = power.PowerMeter("none")
    starts: list[float] = []
    if runs is None and duration is None:
        runs, duration = opts.runs, opts.duration
    latencies, window = time_invocations(engine.invoke, runs or 0, duration, starts)
    try:
        watts = meter.stop()
    except power.SensorUnavailable as e:  # a sensor that vanished mid-run: no figure, no error
        notes.append(f"{meter.source}: {e}")
        watts = None
    return Timed(latencies, starts, window, watts, meter)


def _figures(engine, threads: Optional[int], opts: BenchOptions, latencies, window: float,
             watts: Optional[float], meter, notes: list) -> DeviceResult:
    """Latency, throughput, ops, TOPS, power and energy of one measured device."""
    lat = stats.latency_stats(latencies)
    ips = stats.throughput(len(latencies), window)
    counted, count_note = _ops_for(engine)
    if count_note:
        notes.append(count_note)
    ops = counted.ops if counted and counted.macs else None
    tops = stats.achieved_tops(ops, ips)
    peak, peak_source = _peak(engine, threads, opts)
    result: DeviceResult = {
        "device": engine.device, "device_name": engine.name, "available": True,
        "model": engine.model_path, "requested_model": engine.requested_model,
        "runtime": engine.runtime.name, "runtime_version": engine.runtime.version,
        "threads": threads, "cpu_kernels": engine.cpu_kernels, "warmup": opts.warmup,
        "runs": int(lat.count), "window_s": round(window, 4), "latency_ms": lat.to_dict(),
        "throughput_ips": round(ips, 3),
        "macs_per_inference": counted.macs if counted else None, "ops_per_inference": ops,
        "other_ops": counted.other_ops if counted else None, "tops": _round(tops, 6),
        "peak_tops": peak, "peak_source": peak_source,
        "share_of_peak": _round(tops / peak, 4) if tops and peak else None,
        "power_w": _round(watts, 3), "power_source": meter.source if watts is not None else "none",
        "power_detail": meter.detail,
    }
    energy = stats.energy_figures(tops, ips, watts)
    result.update({k: _round(v, 6) for k, v in energy.items()})
    return result


def _edgetpu(device: str, before: Optional[TpuState], after: Optional[TpuState], notes: list) -> EdgeTpuSection:
    """The `edgetpu` object: library version, USB links, clock mode, heat before and after."""
    section: EdgeTpuSection = {"runtime_version": hostinfo.edgetpu_runtime_version(edgetpu_library()),
                               "device": device, "usb": hostinfo.usb_accelerator_links(),
                               **bench_thermal.edgetpu_section(before, after)}
    if any(u.get("speed_mbps") == "480" for u in section["usb"]):
        notes.append("the USB Accelerator is on a USB 2 link: expect 3–4× slower inference; "
                     "use a USB 3 port and cable")
    return section


def _kind(device: str) -> str:
    return "cpu" if device == "cpu" else "edgetpu"


def _round(v: Optional[float], digits: int) -> Optional[float]:
    return None if v is None else round(v, digits)


def _ops_for(engine) -> tuple[Optional[OpCount], Optional[str]]:
    """Count ops on the graph that describes the work: the CPU twin of a compiled model."""
    model = engine.model
    if model.is_edgetpu_compiled:

        twin = cpu_twin_path(model.path)
        try:
            model = load_model(twin)
        except EdgeappError:
            return None, (f"ops not counted: {Path(model.path).name} hides its graph in the "
                          f"edgetpu-custom-op and its CPU twin {twin.name} is not beside it")
        if model.is_edgetpu_compiled:
            return None, "ops not counted: the CPU twin is itself compiled"
    counted = count_ops(model)
    note = None
    if counted.unknown:
        note = f"{len(counted.unknown)} MAC operator(s) with unknown shapes not counted"
    elif not counted.macs:
        note = "no MAC operators (CONV_2D, FULLY_CONNECTED, ...): TOPS not applicable"
    return counted, note


# -- peaks -------------------------------------------------------------------------------------

def peak_key(runtime: str, version: str, threads: Optional[int], cpu_kernels: str = "fast") -> str:
    """Peaks are per CPU, runtime build, thread count and kernels: each changes the speed."""
    kernels = "" if cpu_kernels == "fast" else f"|{cpu_kernels}"
    return f"{hostinfo.cpu_model() or 'cpu'}|{runtime} {version}|threads={threads or 'default'}{kernels}"


def _peak(engine, threads: Optional[int], opts: BenchOptions) -> tuple[Optional[float], Optional[str]]:
    if engine.device == "edgetpu":
        return PEAK_TOPS, "datasheet"
    if opts.synthetic:
        return None, None
    peaks = load_peaks()
    value = peaks.get(peak_key(engine.runtime.name, engine.runtime.version, threads,
                               engine.cpu_kernels))
    return (round(value, 6), "synthetic") if value else (None, None)


def load_peaks() -> dict[str, float]:
    try:
        data = json.loads((cache_dir() / "peaks.json").read_text())
        return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError, TypeError):
        return {}


def save_peaks(results: List[DeviceResult]) -> Optional[str]:
    """Remember the CPU TOPS the synthetic model reached, per CPU, runtime and thread count.
    Returns a note when the cache cannot be written (never an error)."""
    peaks = load_peaks()
    for r in results:
        if not r.get("available") or r.get("device") != "cpu" or not r.get("tops"):
            continue
        key = peak_key(r["runtime"], r["runtime_version"], r["threads"], r.get("cpu_kernels", "fast"))
        peaks[key] = max(peaks.get(key, 0.0), r["tops"])
    path = cache_dir() / "peaks.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(peaks, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError as e:
        return f"CPU peak not saved to {path}: {e.strerror or e}"
    return None
