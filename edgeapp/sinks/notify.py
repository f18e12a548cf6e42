"""`camera --notify URL`: each alert as a notification through Apprise (ntfy://, tgram://,
mailto://, json://, ~100 services; DeGirum's EventNotifier does the same), with the snapshot
attached where the service takes files.

- A hold-off per rule and track: the same rule on the same track notifies again only after
  `holdoff` seconds of the video's time (the others are counted as held).
- A message template over the alert's fields (`{rule}`, `{label}`, `{source}`, `{track_id}`,
  `{frame}`, `{time}`, `{count}`...); the default names the rule, label, source and time.
- Sending happens on the notifier's own thread. A notification that fails is retried with
  backoff (0.5 s doubling to 30 s), in order, for each URL it has not reached yet: a service
  that is down gets every alert once it is back. The run never waits on it; when the run ends,
  the notifier keeps trying for `flush` seconds, then counts what it could not send.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Deque, Dict, List, Optional, Sequence

from typing_extensions import TypedDict

from edgeapp.errors import MissingDependency, UsageError

INSTALL = "pip install 'edgeapp[notify]'"
TEMPLATE = "{rule}: {label} on {source} at {time}"
BACKOFF, BACKOFF_MAX = 0.5, 30.0
MAX_PENDING = 1000  # alerts waiting for a service that is down; beyond, the oldest go (counted)


@dataclass
class NotifySettings:
    """What --notify, --notify-holdoff and --notify-template ask for."""

    urls: Sequence[str]
    holdoff: float = 60.0
    template: str = TEMPLATE
    flush: float = 30.0  # seconds the end of a run waits for undelivered notifications


def apprise_module() -> Any:
    """Apprise (the `notify` extra): exit 7 with the install line without it."""
    try:
        import apprise
    except ImportError:
        raise MissingDependency(f"--notify needs Apprise (the notify extra): {INSTALL}") from None
    return apprise


def message(template: str, alert: dict, now: Optional[float] = None) -> str:
    """The template filled with the alert's fields and `time` (local wall clock)."""
    values = {k: ("" if v is None else v) for k, v in alert.items()}
    values["time"] = time.strftime("%H:%M:%S", time.localtime(now))
    return template.format_map(values)


def check_settings(settings: NotifySettings) -> None:
    """Each URL is one Apprise knows, and the template only names known fields: exit 2 before
    the model is opened."""
    apprise = apprise_module()
    sample = {"event": "alert", "rule": "r", "kind": "zone", "track_id": 1, "label": "person",
              "source": "0", "frame": 0, "timestamp": 0.0, "count": 1, "tracks": [1], "seconds": 0.0,
              "clip": "", "snapshot": "", "sidecar": ""}
    try:
        message(settings.template, sample)
    except (KeyError, IndexError, ValueError) as e:
        raise UsageError(f"--notify-template {settings.template!r}: {e} is not a field of an alert "
                         "(rule, label, source, track_id, frame, timestamp, time, count)") from None
    if not (settings.holdoff >= 0):
        raise UsageError(f"--notify-holdoff {settings.holdoff:g}: give seconds, 0 or more")
    for url in settings.urls:
        if apprise.Apprise.instantiate(url) is None:
            raise UsageError(f"--notify {_redacted(url)}: not a notification URL Apprise knows "
                             "(ntfy://, tgram://, mailto://, json://, ...)")


def _redacted(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme}://..." if sep else "URL"



class NotifyCounts(TypedDict):
    sent: int
    held: int  # within a rule's cool-down: not sent
    failed_attempts: int
    undelivered: int
    dropped: int  # the queue was full


class NotifySummary(NotifyCounts):
    """Notifications of a camera run: the counts, what is still queued, how many URLs."""
    pending: int
    urls: int

class Notifier:
    """Sends alerts to every URL, in order, never blocking the caller."""

    def __init__(self, settings: NotifySettings, take_events: bool = True) -> None:
        """`take_events`: alerts come through `on_events` (no clips); else through `send`, once
        their snapshot is written (sinks/clips.py's `on_saved`)."""
        apprise = apprise_module()
        quiet = logging.getLogger("apprise")  # its failures are counted here, not printed
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        self.settings, self.take_events = settings, take_events
        self._targets = []
        for url in settings.urls:
            a = apprise.Apprise()
            a.add(url)
            self._targets.append(a)
        self._attach = apprise.AppriseAttachment
        self._queue: Deque[tuple] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._deadline: Optional[float] = None
        self._last: Dict[tuple, float] = {}
        self.counts: NotifyCounts = {"sent": 0, "held": 0, "failed_attempts": 0, "undelivered": 0, "dropped": 0}
        self._thread = threading.Thread(target=self._loop, name="notify", daemon=True)
        self._thread.start()

    def on_frame(self, image: object, record: dict, **_frame: object) -> None:
        """Frames are not its business (it is an output for its `on_events`)."""

    def on_events(self, events: List[dict], counts: dict) -> None:
        if self.take_events:
            for e in events:
                if e.get("event") == "alert":
                    self.send(e, None)

    def send(self, alert: dict, snapshot: Optional[Path]) -> None:
        """Queue one alert (held when the same rule and track notified less than `holdoff`
        seconds before)."""
        key = (alert.get("rule"), alert.get("track_id"))
        t = float(alert.get("media_time") or 0.0)
        with self._cond:
            last = self._last.get(key)
            if last is not None and t - last < self.settings.holdoff:
                self.counts["held"] += 1
                return
            self._last[key] = t
            if len(self._queue) >= MAX_PENDING:
                self._queue.popleft()
                self.counts["dropped"] += 1
            text = message(self.settings.template, alert)
            self._queue.append((alert, text, snapshot, set(range(len(self._targets)))))
            self._cond.notify()

    def _loop(self) -> None:
        delay = 0.0
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue or self._past_deadline():
                    return
                if delay:
                    self._cond.wait(min(delay, max(0.0, self._left())))
                    if self._past_deadline():
                        return
                alert, text, snapshot, left = self._queue[0]
            for i in sorted(left):
                if self._deliver(i, alert, text, snapshot):
                    left.discard(i)
            with self._cond:
                if left:
                    self.counts["failed_attempts"] += 1
                    delay = min(BACKOFF_MAX, max(BACKOFF, delay * 2))
                else:
                    self._queue.popleft()
                    self.counts["sent"] += 1
                    delay = 0.0

    def _deliver(self, i: int, alert: dict, text: str, snapshot: Optional[Path]) -> bool:
        try:
            attach = self._attach(str(snapshot)) if snapshot is not None and snapshot.exists() else None
            title = f"edgeapp: {alert.get('rule')}"
            return bool(self._targets[i].notify(body=text, title=title, attach=attach))
        except Exception:  # noqa: BLE001 - a plugin's failure is a failed attempt, never the run's
            return False

    def _left(self) -> float:
        return float("inf") if self._deadline is None else self._deadline - time.monotonic()

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def close(self) -> None:
        """Keep trying what is queued for `flush` seconds, then stop (the rest is counted)."""
        with self._cond:
            self._closing = True
            self._deadline = time.monotonic() + self.settings.flush
            self._cond.notify_all()
        self._thread.join()
        with self._cond:
            self.counts["undelivered"] += len(self._queue)
            self._queue.clear()

    def summary(self) -> NotifySummary:
        with self._cond:
            return {**self.counts, "pending": len(self._queue), "urls": len(self._targets)}
