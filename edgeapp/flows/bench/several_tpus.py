"""`bench` on several Edge TPUs: data-parallel throughput and its scaling, segment pipelines.

Data parallel: the same DevicePool that classify uses (execution/parallel.py), fed one random input
over and over, first with one TPU, then two, ... up to all of them: the scaling curve, and the
scaling efficiency (throughput with N TPUs ÷ N × one TPU through the same pool, so the pool's
own overhead is in both). Each TPU's mean latency inside the pool shows contention (two USB
accelerators behind one hub share its bandwidth).

Pipeline: the SegmentPipeline of execution/pipeline.py; per segment its mean invoke time, the
slowest one (the bottleneck, which bounds throughput at 1000 ÷ its ms) and how close the
pipeline gets to that bound.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, Iterator, List, Optional

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core import stats
from edgeapp.core.edgetpu.pipeline_segments import HopJson, check_chain, set_label
from edgeapp.core.tflite.model import load_model
from edgeapp.errors import DeviceUnavailable
from edgeapp.execution.parallel import DevicePool
from edgeapp.execution.pipeline import SegmentPipeline, SegmentStat
from edgeapp.hw.device_choice import find_tpus, parse_devices, resolve_tpus
from edgeapp.hw.runtime import open_engine


class DeviceShare(TypedDict):
    runs: int
    mean_ms: float


class ScalingPoint(TypedDict, total=False):
    """Throughput on the first `tpus` TPUs together, and its efficiency against one."""
    tpus: int
    throughput_ips: float
    runs: int
    efficiency: Optional[float]


class ParallelSection(TypedDict, total=False):
    """bench's `parallel`: one model on 1..N Edge TPUs at once (`available: false`: why not)."""
    mode: str  # data-parallel
    model: str
    devices: List[str]
    available: bool
    reason: str
    runs: int
    window_s: float
    throughput_ips: float
    latency_ms: stats.LatencyJson
    per_device: Dict[str, DeviceShare]  # by device name
    scaling: List[ScalingPoint]
    scaling_efficiency: Optional[float]
    notes: List[str]


class PerSegment(SegmentStat):
    bottleneck: bool


class PipelineSection(TypedDict, total=False):
    """bench's `pipeline`: a segment set over as many Edge TPUs (`available: false`: why not)."""
    mode: str  # pipeline
    model: str
    segments: int
    chain: List[HopJson]
    available: bool
    reason: str
    devices: List[str]
    runs: int
    window_s: float
    throughput_ips: float
    end_to_end_ms: stats.LatencyJson
    per_segment: List[PerSegment]
    bottleneck_segment: Optional[int]
    bound_ips: Optional[float]
    share_of_bound: Optional[float]


def _round(v: Optional[float], digits: int = 3) -> Optional[float]:
    return None if v is None else round(v, digits)


def _timed_items(tensor: np.ndarray, runs: int, duration: Optional[float]) -> Iterator:
    """(i, tensor) until `runs` items, or until `duration` seconds have passed."""
    deadline = time.perf_counter() + duration if duration else None
    i = 0
    while (deadline is None and i < runs) or (deadline is not None and time.perf_counter() < deadline):
        yield i, tensor
        i += 1


def _drain(runner, items) -> tuple[list, dict, float, int]:
    """Run `items` through `runner`: (latencies, latencies per device, wall seconds, count)."""
    latencies: list[float] = []
    per_device: dict[str, list[float]] = {}
    t0 = time.perf_counter()
    for _, done in runner.imap(items):
        latencies.append(done.latency_ms)
        per_device.setdefault(done.device, []).append(done.latency_ms)
    return latencies, per_device, time.perf_counter() - t0, len(latencies)


def bench_parallel(model_path: str, names: list, opts, make_input: Callable,
                   samples: Optional[dict] = None) -> ParallelSection:
    """Throughput of `model_path` on 1..N of the TPUs `names` at once, and the scaling.
    `make_input(shape, dtype, seed)` gives the input tensor (bench.random_input)."""
    engines, skipped = [], []
    for name in names:
        try:
            engines.append(open_engine(model_path, name, runtime=opts.runtime, probe=opts.probe,
                                      cpu_kernels=opts.cpu_kernels, performance=opts.performance,
                                      usb_queue=opts.usb_queue))
        except DeviceUnavailable as e:
            skipped.append(f"{name}: {e}")
    section: ParallelSection = {"mode": "data-parallel", "model": model_path, "devices": [e.name for e in engines]}
    if len(engines) < 2:
        return {**section, "available": False,
                "reason": "fewer than 2 Edge TPUs usable" + (f" ({'; '.join(skipped)})" if skipped else "")}
    x = make_input(engines[0].input_shape, engines[0].input_dtype, opts.seed)
    for e in engines:
        e.run(x)  # cold: the model goes into each TPU's memory
    curve: List[ScalingPoint] = []
    last = None
    for k in range(1, len(engines) + 1):
        with DevicePool(engines[:k]) as pool:
            _drain(pool, _timed_items(x, max(opts.warmup, 1) * k, None))
            lat, per_device, window, count = _drain(pool, _timed_items(x, opts.runs * k, opts.duration))
        ips = stats.throughput(count, window)
        curve.append({"tpus": k, "throughput_ips": round(ips, 3), "runs": count})
        last = (lat, per_device, window, count, ips)
    one = curve[0]["throughput_ips"]
    for point in curve:
        point["efficiency"] = _round(stats.scaling_efficiency(point["throughput_ips"], point["tpus"], one), 4)
    lat, per_device, window, count, ips = last
    if samples is not None:
        samples[f"{len(engines)} TPUs together"] = lat
    return {**section, "available": True, "runs": count, "window_s": round(window, 4),
            "throughput_ips": round(ips, 3), "latency_ms": stats.latency_stats(lat).to_dict(),
            "per_device": {d: {"runs": len(v), "mean_ms": round(float(np.mean(v)), 4)}
                           for d, v in sorted(per_device.items())},
            "scaling": curve, "scaling_efficiency": curve[-1]["efficiency"],
            "notes": [f"skipped {s}" for s in skipped]}


def bench_pipeline(paths: list, device: str, opts, make_input: Callable,
                   samples: Optional[dict] = None) -> PipelineSection:
    """A segment set as a pipeline over as many TPUs: throughput, end-to-end latency, and the
    mean invoke time of each segment with the bottleneck marked."""
    chain = check_chain([load_model(p) for p in paths])
    n = len(paths)
    section: PipelineSection = {"mode": "pipeline", "model": set_label(paths), "segments": n,
                                "chain": chain.to_json()["segments"]}
    choice = parse_devices(device)
    if choice.single is not None and choice.single.kind not in ("auto",):
        return {**section, "available": False,
                "reason": f"{n} segments need {n} Edge TPUs: use --device all or a list of {n}"}
    try:
        names = find_tpus() if choice.single is not None else resolve_tpus(choice)
    except DeviceUnavailable:  # `all` and no Edge TPU: a reason, as for any device in bench
        names = []
    if len(names) < n:
        return {**section, "available": False,
                "reason": f"{n} segments need {n} Edge TPUs, {len(names)} found"}
    try:
        engines = [open_engine(p, name, runtime=opts.runtime, probe=opts.probe,
                              cpu_kernels=opts.cpu_kernels, performance=opts.performance,
                              usb_queue=opts.usb_queue)
                   for p, name in zip(paths, names)]
    except DeviceUnavailable as e:
        return {**section, "available": False, "reason": str(e)}
    first = engines[0]
    x = make_input(first.input_shape, first.input_dtype, opts.seed)
    with SegmentPipeline(engines, chain, label=section["model"], source=str(paths[0])) as pipe:
        _drain(pipe, _timed_items(x, max(opts.warmup, 1) + n, None))
        for ms in pipe.segment_ms:
            ms.clear()
        submitted: dict[int, float] = {}
        ends: list[float] = []

        def items():
            for i, t in _timed_items(x, opts.runs, opts.duration):
                submitted[i] = time.perf_counter()
                yield i, t

        t0 = time.perf_counter()
        for i, _ in pipe.imap(items()):
            ends.append((time.perf_counter() - submitted.pop(i)) * 1000.0)
        window = time.perf_counter() - t0
        per_segment: List[PerSegment] = pipe.segment_stats()  # type: ignore[assignment]  # marked below
    means = [s["mean_ms"] for s in per_segment]
    slow = stats.bottleneck(means)
    ips = stats.throughput(len(ends), window)
    bound = 1000.0 / means[slow] if slow is not None and means[slow] else None
    for s in per_segment:
        s["bottleneck"] = s["segment"] == slow
    if samples is not None:
        samples["pipeline end to end"] = ends
        for s, ms in zip(per_segment, pipe.segment_ms):
            samples[f"segment {s['segment']} ({s['device']})"] = list(ms)
    return {**section, "available": True, "devices": [e.name for e in engines], "runs": len(ends),
            "window_s": round(window, 4), "throughput_ips": round(ips, 3),
            "end_to_end_ms": stats.latency_stats(ends).to_dict(), "per_segment": per_segment,
            "bottleneck_segment": slow, "bound_ips": _round(bound),
            "share_of_bound": _round(ips / bound if bound else None, 4)}
