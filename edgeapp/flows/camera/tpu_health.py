"""The Edge TPU's health during a camera run: its temperature, the clock its driver runs it at,
and whether it is throttling, for the live view's /stats and for MQTT (with Home Assistant
discovery of a temperature sensor where the device has one).

A frame output (flows/camera/loop.FrameOutput): `on_frame` only notes each frame's inference
latency; a thread reads the devices' state (hw/tpu_state.py) every `interval` seconds and
publishes it. Throttling, as bench defines it (core/edgetpu/thermal.py): the driver has lowered the
clock (past trip point 0), or the latency of the last frames is more than 15% above that of
the first ones.
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence

from typing_extensions import TypedDict

from edgeapp.core.edgetpu import thermal
from edgeapp.core.stats import median
from edgeapp.hw.tpu_state import TpuState, state_of

if TYPE_CHECKING:
    import numpy as np

    from edgeapp.sinks.mqtt import MqttOut

WINDOW = 30  # frames per latency window
SKIP = 5  # first frames left out (the cold start)


class DeviceHealth(TypedDict):
    """One Edge TPU's health as read (None: not readable on this device)."""

    temperature_c: Optional[float]
    clock_mhz: Optional[float]
    clock_mode: Optional[str]
    sensor_fault: bool
    throttling: Optional[bool]


class TpuHealthReport(TypedDict):
    """The health of a run's Edge TPUs (/stats, MQTT's PREFIX/edgetpu): each device's, and the
    hottest temperature, the lowest clock, the latency drift and whether they throttle."""

    devices: Dict[str, DeviceHealth]
    temperature_c: Optional[float]
    clock_mhz: Optional[float]
    latency_drift: Optional[float]
    throttling: bool
    throttling_reasons: List[str]
    sensor_fault: bool


class TpuHealthStats(TypedDict, total=False):
    """What /stats serves of the Edge TPUs: nothing until a device has been read."""

    edgetpu: TpuHealthReport


class TpuHealth:
    """Watches the Edge TPUs a camera run uses (the devices its records name)."""

    def __init__(self, performance: Optional[str] = None, interval: float = 5.0,
                 read_state: Optional[Callable[[str], Optional[TpuState]]] = None) -> None:
        self.performance, self.interval = performance, interval
        self._read = read_state or (lambda name: state_of(name, performance=performance))
        self._devices: dict = {}  # name -> None until read
        self._first: list = []
        self._last: collections.deque = collections.deque(maxlen=WINDOW)
        self._seen = 0
        self._lock = threading.Lock()
        self._latest: Optional[TpuHealthReport] = None
        self._publish: Optional[Callable[[TpuHealthReport, bool], None]] = None
        self._published = 0
        self._stop = threading.Event()
        self._wake = threading.Event()  # a device seen for the first time: read it at once
        self._thread = threading.Thread(target=self._loop, name="edgeapp-tpu-health", daemon=True)

    def start(self) -> "TpuHealth":
        self._thread.start()
        return self

    def publish_to(self, mqtt_out: MqttOut) -> None:
        """Also publish each reading to this MqttOut (sinks/mqtt.publish_health)."""
        from edgeapp.sinks.mqtt import publish_health

        self._publish = lambda health, first: publish_health(mqtt_out, health, discovery=first)

    # -- the camera loop's side: never waits --------------------------------------------------

    def on_frame(self, image: np.ndarray, record: dict, **_: object) -> None:
        device, latency = record.get("device"), record.get("latency_ms")
        with self._lock:
            if device and device != "cpu" and device not in self._devices:
                self._devices[device] = None
                self._wake.set()
            if latency is None:
                return
            self._seen += 1
            if self._seen <= SKIP:
                return
            if len(self._first) < WINDOW:
                self._first.append(latency)
            self._last.append(latency)

    def stats(self) -> TpuHealthStats:
        """What /stats serves: `{"edgetpu": {...}}` once a device has been read, else {}."""
        with self._lock:
            return {"edgetpu": TpuHealthReport(**self._latest)} if self._latest else {}

    # -- the reading thread ---------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._wake.wait(self.interval)
            self._wake.clear()

    def refresh(self) -> Optional[TpuHealthReport]:
        """Read every device's state now, update the figures, publish them (None: no device
        seen yet)."""
        with self._lock:
            names = list(self._devices)
            first, last = list(self._first), list(self._last)
        if not names:
            return None
        states = {n: self._read(n) for n in names}
        health = summarize_health(states, first, last)
        with self._lock:
            self._latest = health
        if self._publish is not None:
            self._publish(health, self._published == 0)
            self._published += 1
        return health

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)


def summarize_health(states: Dict[str, Optional[TpuState]], first: Sequence[float],
                     last: Sequence[float]) -> TpuHealthReport:
    """The health of a run's Edge TPUs: hottest temperature, lowest clock, drift, throttling."""
    devices: Dict[str, DeviceHealth] = {}
    for name, s in states.items():
        heat = (s or {}).get("thermal") or {}
        devices[name] = {"temperature_c": (s or {}).get("temperature_c"), "clock_mhz": (s or {}).get("clock_mhz"),
                         "clock_mode": (s or {}).get("clock_mode"), "sensor_fault": bool(heat.get("sensor_fault")),
                         "throttling": (s or {}).get("throttling")}
    temps = [d["temperature_c"] for d in devices.values() if d["temperature_c"] is not None]
    clocks = [d["clock_mhz"] for d in devices.values() if d["clock_mhz"] is not None]
    drift = None
    if len(first) >= WINDOW and len(last) >= WINDOW and first != last:
        drift = thermal.drift(median(first), median(last))
    reasons = thermal.throttling(drift)
    hot = [n for n, d in devices.items() if d["throttling"]]
    if hot:
        reasons.append(f"{', '.join(hot)} past trip point 0: the driver lowered the clock")
    return {"devices": devices, "temperature_c": max(temps) if temps else None,
            "clock_mhz": min(clocks) if clocks else None,
            "latency_drift": None if drift is None else round(drift, 4),
            "throttling": bool(reasons), "throttling_reasons": reasons,
            "sensor_fault": any(d["sensor_fault"] for d in devices.values())}
