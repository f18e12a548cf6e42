"""From tracks to alerts and what follows them, for one camera run: the rules (`--alert`,
`--rules FILE`), and the outputs an alert feeds: clips and snapshots (sinks/clips.py),
notifications (sinks/notify.py), Prometheus metrics (sinks/metrics.py, on their own port and at
the live view's /metrics).

`AlertOutputs` is made with the request, before the model opens (a missing extra is exit 7, a
bad rule, URL or address exit 2, all in one line), started once the source and the task are
known, and closed after the frame loop: clips are finished first (their snapshots go to the
notifier), then the notifier flushes, then the metrics server stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence

from typing_extensions import TypedDict

from edgeapp.core.track.rules import Rule, parse_alert, parse_rules
from edgeapp.errors import MissingDependency, UsageError

if TYPE_CHECKING:
    from edgeapp.flows.camera.engine_watch import EngineState
    from edgeapp.flows.camera.tpu_health import TpuHealth
    from edgeapp.sinks.clips import ClipsSummary
    from edgeapp.sinks.notify import NotifySummary
    from edgeapp.tasks.base import TaskKind

RULES_INSTALL = "pip install 'edgeapp[rules]'"


def read_rules(alerts: Sequence[str] = (), rules_file: Optional[Path] = None) -> List[Rule]:
    """`--alert` texts and a `--rules` file's entries, in that order."""
    rules = [parse_alert(text) for text in alerts]
    if rules_file is not None:
        rules += parse_rules(load_rules_file(Path(rules_file)), f"--rules {rules_file}")
    return rules


def load_rules_file(path: Path) -> Any:
    """A YAML (.yaml, .yml) or TOML (.toml) file's contents; a file that cannot be read or
    parsed is one line (exit 2)."""
    where = f"--rules {path}"
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml"):
        raise UsageError(f"{where}: a rules file is YAML (.yaml, .yml) or TOML (.toml)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{where}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if suffix == ".toml":
        try:
            import tomllib as toml  # novermin: Python 3.11+, tomli before
        except ImportError:
            try:
                import tomli as toml
            except ImportError:
                raise MissingDependency(f"{where}: TOML needs tomli before Python 3.11: "
                                        f"{RULES_INSTALL}") from None
        try:
            return toml.loads(text)
        except toml.TOMLDecodeError as e:
            raise UsageError(f"{where}: not valid TOML ({e})") from None
    try:
        import yaml
    except ImportError:
        raise MissingDependency(f"{where}: YAML needs PyYAML: {RULES_INSTALL}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UsageError(f"{where}: not valid YAML ({' '.join(str(e).split())})") from None


@dataclass
class MetricsSettings:
    """--metrics-port ADDRESS (PORT, HOST or HOST:PORT; 127.0.0.1 by default) and the live
    view's token rules (--serve-token, --serve-token-file, $EDGEAPP_SERVE_TOKEN)."""

    address: str
    token: Optional[str] = None
    token_file: Optional[Path] = None


@dataclass
class AlertSettings:
    """What a run's alerts go to (plain values: the CLI and the API fill it alike)."""

    clips: Any = None  # sinks/clips.ClipSettings
    notify: Any = None  # sinks/notify.NotifySettings
    metrics: Optional[MetricsSettings] = None


class AlertSummary(TypedDict, total=False):
    """The alert outputs in a run's summary: those that ran."""

    clips: ClipsSummary
    notify: NotifySummary


class AlertOutputs:
    """The alert outputs of one run (the tracking stage's rules fire the alerts)."""

    def __init__(self, settings: AlertSettings, say: Callable[[str], None]) -> None:
        self.settings, self.say = settings, say
        self.clips = self.notifier = self.metrics = self.server = None
        self.address = self.token = None
        self.on_event: Callable[[dict], None] = lambda _e: None
        if settings.clips is not None:
            settings.clips.check()
        if settings.notify is not None:
            from edgeapp.sinks.notify import check_settings

            check_settings(settings.notify)
        if settings.metrics is not None:
            self._check_metrics(settings.metrics)

    def _check_metrics(self, m: MetricsSettings) -> None:
        from edgeapp.sinks.live_http import resolve_token
        from edgeapp.sinks.live_view import check_exposure, parse_serve
        from edgeapp.sinks.metrics import prometheus_module

        prometheus_module()
        self.address = parse_serve(m.address, "--metrics-port")
        self.token, declined = resolve_token(m.token, m.token_file)
        check_exposure(self.address, self.token, declined, "--metrics-port")

    @property
    def wants_health(self) -> bool:
        return self.settings.metrics is not None

    def start(self, kind: TaskKind, source: str, fps: float, health: Optional[TpuHealth] = None,
              engine: Optional[Callable[[], Optional[EngineState]]] = None) -> None:
        """The sinks, once the task, the source's name and frame rate are known."""
        s = self.settings
        if s.notify is not None:
            from edgeapp.sinks.notify import Notifier

            self.notifier = Notifier(s.notify, take_events=s.clips is None)
        if s.clips is not None:
            from edgeapp.sinks.clips import ClipSink

            self.clips = ClipSink(s.clips, kind, fps,
                                  on_saved=self.notifier.send if self.notifier is not None else None,
                                  on_event=lambda e: self.on_event(e), on_notice=self.say)
        if s.metrics is not None:
            from edgeapp.sinks.metrics import Metrics, MetricsServer

            self.metrics = Metrics(source, health, engine)
            self.server = MetricsServer(self.address, self.metrics, self.token)
            self.say(f"metrics on {self.server.url}")

    @property
    def claim(self) -> Optional[Callable[[dict], None]]:
        """What fills an alert's clip paths (the tracking stage calls it), if clips are kept."""
        return self.clips.claim if self.clips is not None else None

    def outputs(self) -> list:
        return [o for o in (self.clips, self.notifier, self.metrics) if o is not None]

    def close(self) -> None:
        for part in (self.clips, self.notifier, self.server):
            if part is not None:
                part.close()

    def summary(self) -> AlertSummary:
        out: AlertSummary = {}
        if self.clips is not None:
            out["clips"] = self.clips.summary()
        if self.notifier is not None:
            out["notify"] = self.notifier.summary()
        return out

    def warnings(self) -> List[str]:
        n = self.notifier.summary() if self.notifier is not None else None
        if n and (n["undelivered"] or n["dropped"]):
            return [f"notify: {n['undelivered'] + n['dropped']} notification(s) could not be sent "
                    f"after {n['failed_attempts']} failed attempt(s)"]
        return []
