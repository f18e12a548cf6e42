"""`camera --metrics-port ADDRESS`: Prometheus metrics of a camera run, as Frigate's
/api/metrics gives them to a home server that already scrapes: per source and device, the
inference time (a histogram), frames processed, dropped and captured, frames per second, the
Edge TPU's temperature and busy fraction, events and alerts by kind, the source's reconnects.

prometheus_client (the `metrics` extra) owns the names, types and the text format; this module
only feeds it: the histogram and the event counters as frames and events come (`on_frame`,
`on_events`: a lock and an addition), the rest read from the run's statistics when scraped.

Served on its own port (127.0.0.1 by default; the live view's Host check and token rules, from
sinks/live_http.py) and also at the live view's /metrics when --serve runs.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Tuple

from edgeapp.errors import MissingDependency
from edgeapp.sinks.live_http import Guard, GuardedHandler
from edgeapp.sinks.live_view import ServeAddress, bind_server

if TYPE_CHECKING:
    from edgeapp.sinks.frame_stats import StreamStats

INSTALL = "pip install 'edgeapp[metrics]'"
BUSY_WINDOW = 10.0  # seconds the busy fraction is measured over
BUCKETS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024)


def prometheus_module() -> Any:
    """prometheus_client (the `metrics` extra): exit 7 with the install line without it."""
    try:
        import prometheus_client
    except ImportError:
        raise MissingDependency(f"--metrics-port needs prometheus-client (the metrics extra): "
                                f"{INSTALL}") from None
    return prometheus_client


class Metrics:
    """One run's metrics (`source`: the camera's name; `health`: flows/camera/tpu_health's
    TpuHealth, or None; `engine`: the engine watch's state, with its `engine_lost` and
    `engine_recovered` counts, or None)."""

    def __init__(self, source: str, health: Any = None,
                 engine: Optional[Callable[[], Optional[dict]]] = None) -> None:
        pc = prometheus_module()
        self.pc, self.source, self.health, self.engine = pc, source, health, engine
        self.registry = pc.CollectorRegistry()
        labels = ["source", "device"]
        self.inference = pc.Histogram("edgeapp_inference_seconds", "Time of one inference.", labels,
                                      buckets=BUCKETS, registry=self.registry)
        self.events = pc.Counter("edgeapp_events", "Tracking events by kind.", ["source", "kind"],
                                 registry=self.registry)
        self.alerts = pc.Counter("edgeapp_alerts", "Alerts fired, by rule.", ["source", "rule"],
                                 registry=self.registry)
        self.registry.register(_RunCollector(self))
        self._lock = threading.Lock()
        self._stats: Dict[str, StreamStats] = {}  # per source (a run of several: records carry `source`)
        self._fps: Dict[str, float] = {}
        self._busy: Dict[str, Deque[Tuple[float, float]]] = {}

    def on_frame(self, image: object, record: dict, *, annotated: bool = False,
                 fps: Optional[float] = None, stats: Optional[StreamStats] = None, extras: Optional[dict] = None,
                 counting: Optional[tuple] = None) -> None:
        latency = record.get("latency_ms")
        device = str(record.get("device", ""))
        source = str(record.get("source", self.source))
        if latency is not None:
            self.inference.labels(source, device).observe(latency / 1000.0)
        with self._lock:
            if stats is not None:
                self._stats[source] = stats
            if fps is not None:
                self._fps[source] = fps
            if latency is not None:
                window = self._busy.setdefault(device, deque())
                now = time.monotonic()
                window.append((now, latency / 1000.0))
                while window and window[0][0] < now - BUSY_WINDOW:
                    window.popleft()

    def on_events(self, events: List[dict], counts: dict) -> None:
        for e in events:
            source = str(e.get("source", self.source))
            self.events.labels(source, e.get("event", "")).inc()
            if e.get("event") == "alert":
                self.alerts.labels(source, e.get("rule", "")).inc()

    def exposition(self) -> Tuple[bytes, str]:
        """The text format and its content type (what /metrics answers)."""
        return self.pc.generate_latest(self.registry), self.pc.CONTENT_TYPE_LATEST

    def snapshot(self) -> tuple:
        with self._lock:
            busy = {}
            now = time.monotonic()
            for device, window in self._busy.items():
                if window:
                    span = min(BUSY_WINDOW, max(1e-6, now - window[0][0]))
                    busy[device] = min(1.0, sum(s for _, s in window) / span)
            return dict(self._stats), dict(self._fps), busy

    def close(self) -> None:
        pass


class _RunCollector:
    """What is read from the run's statistics when scraped."""

    def __init__(self, metrics: Metrics) -> None:
        self.m = metrics

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats, fps, busy = self.m.snapshot()
        src = self.m.source
        frames = CounterMetricFamily("edgeapp_frames", "Frames by what became of them.",
                                     labels=["source", "state"])
        reconnects = CounterMetricFamily("edgeapp_source_reconnects", "Times the source was reopened.",
                                         labels=["source"])
        for name, st in stats.items():
            for state, value in (("captured", st.captured), ("processed", st.processed),
                                 ("dropped", st.dropped)):
                frames.add_metric([name, state], value)
            reconnects.add_metric([name], st.reconnects)
        yield frames
        yield reconnects
        rate = GaugeMetricFamily("edgeapp_fps", "Frames processed per second (smoothed).",
                                 labels=["source"])
        for name, value in fps.items():
            rate.add_metric([name], value)
        yield rate
        load = GaugeMetricFamily("edgeapp_device_busy_ratio", "Fraction of the last 10 s spent in "
                                 "inference, per device.", labels=["source", "device"])
        for device, value in busy.items():
            load.add_metric([src, device], value)
        yield load
        yield self._temperature()
        yield from self._engine()

    def _engine(self) -> Any:
        """The engine's outages and recoveries (the self-healing worker's counts)."""
        from prometheus_client.core import CounterMetricFamily

        state = (self.m.engine() if self.m.engine is not None else None) or {}
        for key, name, text in (("engine_lost", "edgeapp_engine_lost", "Times the engine was lost."),
                                ("engine_recovered", "edgeapp_engine_recoveries",
                                 "Times the engine was brought back.")):
            family = CounterMetricFamily(name, text, labels=["source"])
            family.add_metric([self.m.source], state.get(key, 0))
            yield family

    def _temperature(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        temp = GaugeMetricFamily("edgeapp_tpu_temperature_celsius", "Edge TPU temperature.",
                                 labels=["device"])
        health = self.m.health.stats() if self.m.health is not None else {}
        for name, d in ((health.get("edgetpu") or {}).get("devices") or {}).items():
            if d.get("temperature_c") is not None:
                temp.add_metric([name], d["temperature_c"])
        return temp


class MetricsServer:
    """/metrics on its own address, behind the live view's Guard (Host check, token)."""

    def __init__(self, address: ServeAddress, metrics: Metrics, token: Optional[str] = None) -> None:
        self.address, self.metrics = address, metrics
        self.guard = Guard.from_env(address.host, token)
        handler = type("MetricsHandler", (_MetricsHandler,), {"guard": self.guard, "metrics": metrics})
        self._server = bind_server(address, handler, "--metrics-port")
        self.port = self.guard.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="edgeapp-metrics", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = self.address.host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(2.0)


class _MetricsHandler(GuardedHandler):
    metrics: Any = None

    def _route(self, path: str) -> None:
        if path == "/metrics":
            body, ctype = self.metrics.exposition()
            self._send(200, ctype, body)
        else:
            super()._route(path)
