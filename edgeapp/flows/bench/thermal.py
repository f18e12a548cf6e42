"""What a benchmark says about the accelerator it ran on: its clock and heat before and after,
and, over a `--duration` run, whether the warm latency drifted up (throttling).

The Edge TPU's state comes from hw/tpu_state.py (clock mode of the libedgetpu build, a PCIe
card's temperature and trip points); the meaning of drift and trip points from core/edgetpu/thermal.py.
TOPS and TOPS/W are only comparable at a known clock: the result says which one it ran at.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from typing_extensions import TypedDict

from edgeapp.core.edgetpu import thermal
from edgeapp.core.stats import median
from edgeapp.hw.tpu_state import TpuState, state_of


class EdgeTpuHeat(TypedDict):
    """Clock mode and heat of a run's Edge TPU, before the timed runs and after them."""
    clock_mode: Optional[str]
    clock_mode_source: Optional[str]
    performance: Optional[str]
    link: Optional[str]
    usb_state: Optional[str]
    clock_mhz_before: Optional[float]
    clock_mhz: Optional[float]
    temperature_before_c: Optional[float]
    temperature_after_c: Optional[float]
    trip_point0_c: Optional[float]
    sensor_fault: bool


class LatencyWindow(TypedDict):
    start_s: float
    runs: int
    p50_ms: float
    mean_ms: float


class WindowsSection(TypedDict, total=False):
    """A --duration run's latency per time window and its drift (none when too short)."""
    windows: List[LatencyWindow]
    drift: Optional[float]


class Throttling(TypedDict):
    throttling: bool
    throttling_reasons: List[str]


def engine_tpu_state(engine, performance: Optional[str] = None) -> Optional[TpuState]:
    """The state of the Edge TPU `engine` runs on now (None on the CPU)."""
    if engine.device != "edgetpu":
        return None
    return state_of(engine.name, performance=performance)


def edgetpu_section(before: Optional[TpuState], after: Optional[TpuState]) -> EdgeTpuHeat:
    """Clock mode and heat of the run's Edge TPU, read before the timed runs and after them."""
    state: TpuState = after or before or {}  # type: ignore[assignment]
    heat = state.get("thermal") or {}
    trips = heat.get("trip_points_c") or []
    return {"clock_mode": state.get("clock_mode"), "clock_mode_source": state.get("clock_mode_source"),
            "performance": state.get("performance"), "link": state.get("link"),
            "usb_state": state.get("usb_state"),
            "clock_mhz_before": (before or {}).get("clock_mhz"), "clock_mhz": state.get("clock_mhz"),
            "temperature_before_c": (before or {}).get("temperature_c"),
            "temperature_after_c": (after or {}).get("temperature_c"),
            "trip_point0_c": trips[0] if trips else None,
            "sensor_fault": bool(heat.get("sensor_fault"))}


def windows_section(starts_s: Sequence[float], latencies_ms: Sequence[float]) -> WindowsSection:
    """The warm latency per time window of a --duration run, and its drift first to last."""
    groups = thermal.split_windows(starts_s, latencies_ms)
    if len(groups) < 2:
        return {}
    t0 = starts_s[0]
    windows: List[LatencyWindow] = []
    offset = 0
    for g in groups:
        windows.append({"start_s": round(starts_s[offset] - t0, 3), "runs": len(g),
                        "p50_ms": round(median(g), 4), "mean_ms": round(sum(g) / len(g), 4)})
        offset += len(g)
    d = thermal.drift(windows[0]["p50_ms"], windows[-1]["p50_ms"])
    return {"windows": windows, "drift": None if d is None else round(d, 4)}


def throttling_of(result: dict) -> Throttling:
    """`throttling` and its reasons for one result: drift past 15% or heat past trip point 0."""
    tpu = result.get("edgetpu") or {}
    reasons: List[str] = thermal.throttling(result.get("drift"), tpu.get("temperature_after_c"),
                                            tpu.get("trip_point0_c"))
    if tpu.get("sensor_fault"):
        reasons.append("the temperature sensor reads a fault value: heat unknown")
    flagged = any("rose" in r or "trip point" in r for r in reasons)
    return {"throttling": flagged, "throttling_reasons": reasons}


def table_lines(results: Sequence[dict]) -> List[str]:
    """Clock, heat and drift lines under bench's table."""
    lines = []
    for r in results:
        if not r.get("available"):
            continue
        name = r.get("device_name") or r["device"]
        tpu = r.get("edgetpu") or {}
        if tpu:
            lines.append(f"{name}: " + _clock_text(tpu))
        if r.get("windows"):
            w = r["windows"]
            lines.append(f"{name} over {len(w)} windows: p50 {w[0]['p50_ms']:.3f} -> {w[-1]['p50_ms']:.3f} ms "
                         f"({r['drift'] * 100:+.0f}%)")
        if r.get("throttling"):
            lines.append(f"{name}: THROTTLING: " + "; ".join(r["throttling_reasons"]))
    return lines


def _clock_text(tpu: dict) -> str:
    parts = [f"libedgetpu {tpu['clock_mode']} build" if tpu.get("clock_mode") else "libedgetpu build unknown"]
    if tpu.get("performance"):
        parts.append(f"performance {tpu['performance']}")
    if tpu.get("clock_mhz") is not None:
        parts.append(f"{tpu['clock_mhz']:g} MHz")
    before, after = tpu.get("temperature_before_c"), tpu.get("temperature_after_c")
    if before is not None or after is not None:
        parts.append(f"{_deg(before)} -> {_deg(after)}")
    if tpu.get("sensor_fault"):
        parts.append("temperature sensor fault")
    return ", ".join(parts)


def _deg(value: Optional[float]) -> str:
    return "?" if value is None else f"{value:.1f} °C"
