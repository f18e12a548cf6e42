"""Heat and the Edge TPU's clock: what the apex driver does at its trip points, and what a long
run's latency says about throttling.

The PCIe/M.2 driver (gasket-driver apex_driver.c) polls the die temperature every 5 s and sets
the clock divider to the number of trip points reached (`trip_point{0,1,2}_temp`, 85/90/95 °C
by default): 500 → 250 → 125 → 62.5 MHz. Above those, `hw_temp_warn1` raises an interrupt and
`hw_temp_warn2` the shutdown alarm (both 100 °C by default; warn2 enabled). A reading far
below any real temperature (about −88 °C; the ADC's all-ones value gives −89.7 °C) is a sensor
fault that has preceded PCIe hangs (google-coral/edgetpu#843), not a temperature.

A run throttles when its warm latency drifts up by more than 15% between its first and last
time windows, or when the temperature passes trip point 0. Pure functions, no I/O.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from typing_extensions import TypedDict

from edgeapp.core.edgetpu.clock import MAX_CLOCK_MHZ

DEFAULT_TRIPS_C = (85.0, 90.0, 95.0)
SENSOR_FAULT_BELOW_C = -40.0  # below the Edge TPU's storage range: a broken reading
DRIFT_LIMIT = 0.15  # first to last window, relative
WINDOWS = 10  # a --duration run is cut into this many time windows
MIN_PER_WINDOW = 3  # fewer windows when the run is too short to fill them


class ApexThermal(TypedDict, total=False):
    """What /sys/class/apex/apex_N's heat files say (hw/devices.apex_thermal): °C, the *_en
    switches as 0/1; None where a file is absent or unreadable."""
    temp: Optional[float]
    trip_point0_temp: Optional[float]
    trip_point1_temp: Optional[float]
    trip_point2_temp: Optional[float]
    hw_temp_warn1: Optional[float]
    hw_temp_warn1_en: Optional[float]
    hw_temp_warn2: Optional[float]
    hw_temp_warn2_en: Optional[float]


class PcieHeat(TypedDict):
    """A PCIe card's heat report (pcie_state)."""
    temperature_c: Optional[float]
    sensor_fault: bool
    reading_c: Optional[float]
    trip_points_c: Optional[List[Optional[float]]]
    trip_points_assumed: bool
    trips_reached: Optional[int]
    clock_mhz: Optional[float]
    warn_c: Optional[float]
    warn_enabled: Optional[bool]
    shutdown_c: Optional[float]
    shutdown_enabled: Optional[bool]
    throttling: Optional[bool]


def is_sensor_fault(temp_c: Optional[float]) -> bool:
    return temp_c is not None and temp_c < SENSOR_FAULT_BELOW_C


def trips_reached(temp_c: Optional[float], trips_c: Sequence[Optional[float]]) -> Optional[int]:
    """How many trip points the temperature is at or above (the driver's divider); None unknown."""
    if temp_c is None or is_sensor_fault(temp_c):
        return None
    return sum(1 for t in trips_c if t is not None and temp_c >= t)


def clock_from_temperature(temp_c: Optional[float], trips_c: Sequence[Optional[float]] = DEFAULT_TRIPS_C,
                           top_mhz: float = MAX_CLOCK_MHZ) -> Optional[float]:
    """The clock the driver sets for this temperature: halved at each trip point reached."""
    steps = trips_reached(temp_c, trips_c)
    return None if steps is None else top_mhz / (2 ** steps)


def pcie_state(thermal: ApexThermal) -> PcieHeat:
    """A PCIe card's heat report from its apex files (°C; None where a file is missing)."""
    raw = thermal.get("temp")
    trips = [thermal.get(f"trip_point{i}_temp") for i in range(3)]
    known_trips = [t for t in trips if t is not None] or list(DEFAULT_TRIPS_C)
    fault = is_sensor_fault(raw)
    steps = trips_reached(raw, known_trips)
    return {
        "temperature_c": None if fault else raw,
        "sensor_fault": fault,
        "reading_c": raw,
        "trip_points_c": trips if any(t is not None for t in trips) else None,
        "trip_points_assumed": not any(t is not None for t in trips),
        "trips_reached": steps,
        "clock_mhz": clock_from_temperature(raw, known_trips),
        "warn_c": thermal.get("hw_temp_warn1"),
        "warn_enabled": _flag(thermal.get("hw_temp_warn1_en")),
        "shutdown_c": thermal.get("hw_temp_warn2"),
        "shutdown_enabled": _flag(thermal.get("hw_temp_warn2_en")),
        "throttling": None if steps is None else steps > 0,
    }


def _flag(value: Optional[float]) -> Optional[bool]:
    return None if value is None else value > 0


def thermal_summary(state: dict) -> str:
    """`52.3 °C, 500 MHz (trip points 85/90/95 °C; warning 100 °C, shutdown 100 °C)`."""
    if state.get("sensor_fault"):
        return (f"temperature sensor fault (reads {state['reading_c']:.1f} °C): a reading like this "
                "has preceded PCIe hangs")
    temp = state.get("temperature_c")
    if temp is None:
        return "temperature unknown"
    parts = [f"{temp:.1f} °C"]
    if state.get("clock_mhz") is not None:
        parts.append(f"{state['clock_mhz']:g} MHz")
    limits = []
    trips = state.get("trip_points_c")
    if trips:
        limits.append("trip points " + "/".join("?" if t is None else f"{t:g}" for t in trips) + " °C")
    for key, name in (("warn_c", "warning"), ("shutdown_c", "shutdown")):
        if state.get(key) is not None:
            off = " (off)" if state.get(key.replace("_c", "_enabled")) is False else ""
            limits.append(f"{name} {state[key]:g} °C{off}")
    text = ", ".join(parts)
    return text + (f" ({'; '.join(limits)})" if limits else "")


# -- a long run's latency ------------------------------------------------------------------------

def window_count(runs: int, windows: int = WINDOWS, minimum: int = MIN_PER_WINDOW) -> int:
    """Windows to cut `runs` into: `windows`, fewer when each would hold under `minimum` runs."""
    return max(1, min(windows, runs // minimum))


def split_windows(starts_s: Sequence[float], latencies_ms: Sequence[float],
                  windows: int = WINDOWS) -> List[List[float]]:
    """Latencies grouped by equal slices of the run's time (by each call's start time)."""
    n = window_count(len(latencies_ms), windows)
    if not latencies_ms:
        return []
    t0, t1 = starts_s[0], starts_s[-1]
    span = (t1 - t0) or 1.0
    out: List[List[float]] = [[] for _ in range(n)]
    for t, lat in zip(starts_s, latencies_ms):
        out[min(n - 1, int((t - t0) / span * n))].append(lat)
    return [w for w in out if w]


def drift(first_ms: Optional[float], last_ms: Optional[float]) -> Optional[float]:
    """Relative change from the first window's median to the last one's."""
    if not first_ms or last_ms is None:
        return None
    return (last_ms - first_ms) / first_ms


def throttling(drift_ratio: Optional[float], temp_c: Optional[float] = None,
               trip0_c: Optional[float] = None) -> List[str]:
    """Why this run counts as throttling (empty: it does not)."""
    reasons = []
    if drift_ratio is not None and drift_ratio > DRIFT_LIMIT:
        reasons.append(f"warm latency rose {drift_ratio * 100:.0f}% from the first to the last "
                       f"window (more than {DRIFT_LIMIT * 100:.0f}%)")
    trip = trip0_c if trip0_c is not None else DEFAULT_TRIPS_C[0]
    if temp_c is not None and not is_sensor_fault(temp_c) and temp_c >= trip:
        reasons.append(f"{temp_c:.1f} °C is past trip point 0 ({trip:g} °C): the driver lowered the clock")
    return reasons


# -- one Edge TPU's state, in words --------------------------------------------------------------

def state_warnings(state: dict) -> List[str]:
    """What is wrong or slow with one Edge TPU's state (hw/tpu_state.py), one sentence each."""
    out = []
    thermal = state.get("thermal") or {}
    if thermal.get("sensor_fault"):
        out.append(f"temperature sensor fault (reads {thermal['reading_c']:.1f} °C): this reading has "
                   "preceded PCIe hangs; reseat the card, check its power, reload the apex module")
    elif thermal.get("trips_reached"):
        out.append(f"hot: {thermal['temperature_c']:.1f} °C is past {thermal['trips_reached']} trip "
                   f"point(s); the driver runs it at {thermal['clock_mhz']:g} MHz; improve cooling")
    shutdown = thermal.get("shutdown_c")
    temp = thermal.get("temperature_c")
    if temp is not None and shutdown is not None and temp >= shutdown - 5.0:
        out.append(f"{temp:.1f} °C is within 5 °C of the shutdown alarm ({shutdown:g} °C)")
    speed = state.get("speed_mbps")
    if speed is not None and speed <= 480:
        out.append("USB 2 link: expect 3-4x slower inference; use a USB 3 port and cable")
    if state.get("type") == "usb" and state.get("clock_mode") == "std":
        out.append("std libedgetpu: the USB Accelerator runs at reduced clock (libedgetpu1-max "
                   "for full clock; it runs hotter)")
    return out


def state_text(state: dict) -> str:
    """The details of one Edge TPU for a table row: link and firmware state, or heat and clock."""
    parts = []
    if state.get("usb_id"):
        parts.append(state["usb_id"] + (f" ({state['usb_state']})" if state.get("usb_state") else ""))
    speed = state.get("speed_mbps")
    if speed is not None:
        parts.append(f"{speed:g} Mb/s" + (" (USB 2: 3-4x slower)" if speed <= 480 else ""))
    if state.get("thermal"):
        parts.append(thermal_summary(state["thermal"]))
    mode = state.get("clock_mode")
    if state.get("type") == "usb" and state.get("clock_mhz") is not None:
        parts.append(f"{mode} build, {state['clock_mhz']:g} MHz")
    elif mode:
        parts.append(f"{mode} build")
    return ", ".join(parts)
