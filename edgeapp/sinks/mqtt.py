"""Camera results to an MQTT broker (`edgeapp camera --mqtt URL`), for Home Assistant and the like.

Topics under the URL's prefix (default `edgeapp`):
- `PREFIX/status`  `online` / `offline`, retained, and `offline` as the last will: the broker
  says `offline` itself when the process dies or its network goes (an availability topic);
- `PREFIX/frames`  mode frames: one JSON object per processed frame, the JSONL record's fields;
- `PREFIX/events`  mode events: the record of the frame that confirmed a change, plus `event`
  (`change` when the top class changes; `appear` / `leave` when a detected label, a person
  (pose) or a segmented class does), `label`, and `previous` for a change. A change must
  hold for --mqtt-debounce seconds (of
  video time for a file) before it counts, so a flicker sends nothing;
- `PREFIX/state`   mode events: the confirmed state, retained (`{"label": ...}` for a
  classifier, `{"labels": [...]}` for the others), for sensors that start after the event;
- `PREFIX/tracks`  with --track: one JSON object per tracking event (`track_started`,
  `track_ended`, `line_crossed`, `zone_entered`, `zone_left`; flows/camera/tracking.py);
- `PREFIX/counts`  with --track: the line and zone counts, retained, after every event;
- `homeassistant/...`  Home Assistant discovery configs (ha_discovery.py), retained, sent with
  `online` at every connection (`announce`).

The inference loop never waits on the network: `on_frame` appends to a bounded queue and
returns; a sender thread publishes while connected. When the queue is full (broker away, slow
network) the OLDEST message is dropped and counted: after an outage the broker gets the newest
state first. paho-mqtt's own loop thread reconnects with exponential backoff (1 s to 30 s).
paho-mqtt is an optional extra and imported only when --mqtt is given.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Tuple, Union
from urllib.parse import parse_qs, unquote, urlsplit

from edgeapp.errors import MissingDependency, UsageError

if TYPE_CHECKING:
    import numpy as np
    from paho.mqtt.client import Client as MqttClient

    from edgeapp.sinks.ha_discovery import MqttState, MqttSummary
    from edgeapp.tasks.base import TaskKind

INSTALL = "pip install 'edgeapp[mqtt]'"
DEFAULT_PREFIX = "edgeapp"
RECONNECT_MIN, RECONNECT_MAX = 1, 30  # seconds: paho's backoff doubles between them
PASSWORD_ENV = "EDGEAPP_MQTT_PASSWORD"  # keeps the password out of `ps` and shell history


# ---------------------------------------------------------------------------------------------
# mqtt://[user:pass@]host[:port]/prefix


@dataclass(frozen=True)
class MqttTarget:
    host: str
    port: int
    prefix: str
    tls: bool = False
    username: Optional[str] = None
    password: Optional[str] = None
    ca: Optional[str] = None  # mqtts: a CA file instead of the system's

    def __str__(self) -> str:  # never shows the password
        user = f"{self.username}@" if self.username else ""
        return f"{'mqtts' if self.tls else 'mqtt'}://{user}{self.host}:{self.port}/{self.prefix}"


def parse_mqtt_url(url: str) -> MqttTarget:
    """`mqtt://[user:pass@]host[:port]/topic-prefix`; `mqtts://` for TLS (port 8883), with
    `?ca=FILE` for a private CA. The password may also come from $EDGEAPP_MQTT_PASSWORD."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as e:
        raise UsageError(f"--mqtt {url}: {e}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("mqtt", "mqtts"):
        raise UsageError(f"--mqtt {url}: expected mqtt://[user:pass@]host[:port]/topic-prefix "
                         "(or mqtts:// for TLS)")
    if not parts.hostname:
        raise UsageError(f"--mqtt {url}: no broker host")
    tls = scheme == "mqtts"
    prefix = unquote(parts.path).strip("/") or DEFAULT_PREFIX
    if parts.fragment or url.rstrip().endswith("#") or any(c in prefix for c in "#+\0"):
        raise UsageError(f"--mqtt {url}: the topic prefix may not contain # or +")
    query = parse_qs(parts.query)
    unknown = set(query) - {"ca"}
    if unknown:
        raise UsageError(f"--mqtt {url}: unknown parameter(s) {', '.join(sorted(unknown))} "
                         "(only ca=FILE, with mqtts://)")
    ca = query.get("ca", [None])[-1]
    if ca is not None:
        if not tls:
            raise UsageError(f"--mqtt {url}: ca= is for mqtts:// (TLS)")
        if not os.path.isfile(ca):
            raise UsageError(f"--mqtt {url}: CA file {ca} not found")
    password = unquote(parts.password) if parts.password is not None else os.environ.get(PASSWORD_ENV)
    return MqttTarget(host=parts.hostname, port=port or (8883 if tls else 1883), prefix=prefix,
                      tls=tls, username=unquote(parts.username) if parts.username else None,
                      password=password, ca=ca)


def paho_module():
    """paho.mqtt.client, or MissingDependency with the install line."""
    try:
        import paho.mqtt.client as mqtt
    except ImportError:
        raise MissingDependency(f"--mqtt needs paho-mqtt: {INSTALL}") from None
    return mqtt


# ---------------------------------------------------------------------------------------------
# Events: what changed, debounced


def _frame_time(record: dict) -> float:
    """Seconds: the position in a video file, else the capture wall clock."""
    ms = record.get("source_ms")
    return ms / 1000.0 if ms is not None else float(record.get("timestamp") or time.time())


class ChangeDetector:
    """Turns per-frame records into debounced events, as the task (tasks/) defines them.

    "top" tasks (classify): the top result (or None when nothing passes the threshold) must stay
    the same for `debounce` seconds to become the new state: one `change` event; the first
    confirmed top result is a change from None. "presence" tasks (detect: labels; pose: a
    person; segment: classes over a share of the image): a label present in every frame for
    `debounce` seconds `appear`s; absent for `debounce` seconds, it `leave`s.
    """

    def __init__(self, kind: TaskKind, debounce: float = 1.0) -> None:
        if kind.events not in ("top", "presence"):
            raise UsageError(f"--mqtt-mode events: {kind.name} results have no events; use "
                             "--mqtt-mode frames")
        self.kind = kind
        self.debounce = max(0.0, float(debounce))
        self.top: Any = None  # confirmed top result
        self._top_known = False
        self._candidate: Any = None
        self._candidate_since: Optional[float] = None
        self.present: set = set()  # confirmed labels
        self._flip_since: dict = {}  # label -> since when its presence differs from confirmed

    def update(self, record: dict) -> list[dict]:
        t = _frame_time(record)
        if self.kind.events == "presence":
            return self._presence(self.kind.presence(record), t)
        return self._top(self.kind.top(record), t)

    def state(self) -> MqttState:
        """The confirmed state, for the retained `state` topic."""
        if self.kind.events == "presence":
            return {"labels": sorted(self.present, key=str)}
        return {"label": self.top}

    def _top(self, found: Optional[tuple], t: float) -> list[dict]:
        top, score = found if found is not None else (None, None)
        if self._top_known and top == self.top:
            self._candidate_since = None
            return []
        if self._candidate_since is None or top != self._candidate:
            self._candidate, self._candidate_since = top, t
        if t - self._candidate_since < self.debounce:
            return []
        previous, self.top, self._top_known = self.top, top, True
        self._candidate_since = None
        return [{"event": "change", "label": top, "previous": previous, "score": score}]

    def _presence(self, seen: dict, t: float) -> list[dict]:
        events = []
        for label in sorted(set(seen) | self.present | set(self._flip_since), key=str):
            differs = (label in seen) != (label in self.present)
            if not differs:
                self._flip_since.pop(label, None)
                continue
            since = self._flip_since.setdefault(label, t)
            if t - since < self.debounce:
                continue
            del self._flip_since[label]
            if label in seen:
                self.present.add(label)
                count, best = seen[label]
                events.append({"event": "appear", "label": label, "count": count, "score": best})
            else:
                self.present.discard(label)
                events.append({"event": "leave", "label": label, "count": 0})
        return events


# ---------------------------------------------------------------------------------------------
# The publisher


class MqttOut:
    """Publishes camera records to a broker without ever blocking the caller.

    `on_frame` is the inference loop's side (it must return at once); `start` connects in the
    background (a broker that is not there yet is retried, not fatal); `close` drains what it
    can for a moment, says `offline` and disconnects.
    """

    def __init__(self, target: MqttTarget, *, kind: Optional[TaskKind] = None, mode: str = "frames",
                 debounce: float = 1.0,
                 queue_size: int = 100, client_id: Optional[str] = None,
                 on_notice: Optional[Callable[[str], None]] = None, keepalive: int = 30,
                 announce: Sequence[Tuple[str, str]] = ()) -> None:
        if mode not in ("frames", "events"):
            raise UsageError(f"--mqtt-mode {mode}: frames or events")
        self.target, self.mode = target, mode
        self.queue_size = max(1, int(queue_size))
        self.keepalive = keepalive
        self.client_id = client_id or f"edgeapp-{socket.gethostname()}-{os.getpid()}"
        self.on_notice = on_notice or (lambda message: None)
        self.detector = ChangeDetector(kind, debounce) if mode == "events" else None
        self.announce = list(announce)  # (topic, payload): retained, at every connection
        self.published = 0
        self.dropped = 0  # oldest messages pushed out of the full queue, or refused by paho
        self.events = 0
        self.connects = 0
        self.connected = False
        self.last_error: Optional[str] = None
        self._queue: deque = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closing = False
        self._outage_noted = False
        self._settled = threading.Event()  # the first connection attempt has succeeded or failed
        self._client: Any = None
        self._mqtt: Any = None
        self._sender = threading.Thread(target=self._send_loop, name="edgeapp-mqtt-send", daemon=True)

    def topic(self, name: str) -> str:
        return f"{self.target.prefix}/{name}"

    # -- life cycle -----------------------------------------------------------------------------

    def start(self) -> "MqttOut":
        mqtt = self._mqtt = paho_module()
        kwargs: dict = {"client_id": self.client_id, "clean_session": True}
        if hasattr(mqtt, "CallbackAPIVersion"):  # paho-mqtt 2
            kwargs["callback_api_version"] = mqtt.CallbackAPIVersion.VERSION2
        client = self._client = mqtt.Client(**kwargs)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.will_set(self.topic("status"), "offline", qos=1, retain=True)
        client.reconnect_delay_set(RECONNECT_MIN, RECONNECT_MAX)
        if self.target.username:
            client.username_pw_set(self.target.username, self.target.password)
        if self.target.tls:
            import ssl

            try:
                client.tls_set(ca_certs=self.target.ca, cert_reqs=ssl.CERT_REQUIRED)
            except (ssl.SSLError, OSError) as e:
                raise UsageError(f"--mqtt {self.target}: TLS setup failed: {e}") from None
        if hasattr(client, "on_connect_fail"):
            client.on_connect_fail = self._on_connect_fail
        try:
            client.connect_async(self.target.host, self.target.port, keepalive=self.keepalive)
        except (ValueError, OSError) as e:
            raise UsageError(f"--mqtt {self.target}: {e}") from None
        client.loop_start()
        self._sender.start()
        return self

    def wait_settled(self, timeout: float) -> bool:
        """Wait for the first connection attempt to succeed or fail (before a file's frames,
        which should all reach the broker); False if it is still going on after `timeout` s."""
        return self._settled.wait(timeout)

    def close(self, timeout: float = 2.0) -> None:
        """Send what is queued while the broker takes it (giving up after `timeout` s without
        progress), publish `offline` (retained), disconnect. Bounded in time with the broker
        gone or stalled."""
        if self._client is None:
            return
        end = time.monotonic() + timeout
        self._settled.wait(timeout)  # a short run may end before the first connection is made
        with self._lock:
            self._closing = True
            self._wake.notify_all()
        sent = -1
        while self._sender.is_alive() and self.published != sent:  # alive: connected, sending
            sent = self.published
            self._sender.join(max(0.1, end - time.monotonic()))
            end = time.monotonic() + timeout
        client, self._client = self._client, None
        with self._lock:
            self.dropped += len(self._queue)  # what could not be sent in time
            self._queue.clear()
        if self.connected:
            try:
                info = client.publish(self.topic("status"), "offline", qos=1, retain=True)
                info.wait_for_publish(max(0.1, end - time.monotonic()))
            except (RuntimeError, ValueError, OSError):
                pass
        try:
            client.disconnect()
        except Exception:  # noqa: BLE001 - paho raises various errors when not connected
            pass
        stopper = threading.Thread(target=client.loop_stop, daemon=True)  # may sit in a backoff sleep
        stopper.start()
        stopper.join(max(1.0, end - time.monotonic()))
        self.connected = False

    # -- the inference loop's side ----------------------------------------------------------------

    def on_frame(self, image: np.ndarray, record: dict, **_: object) -> None:
        """Queue what this frame has to say; never waits."""
        if self.detector is None:
            self._put(self.topic("frames"), record, 0, False)
            return
        events = self.detector.update(record)
        if events:
            self.events += len(events)
            for ev in events:
                self._put(self.topic("events"), {**ev, **record}, 1, False)
            self._put(self.topic("state"), self.detector.state(), 1, True)

    def on_events(self, events: Sequence[dict], counts: dict) -> None:
        """camera --track: each event on PREFIX/tracks (an --alert's on PREFIX/alerts), the counts
        (retained) on PREFIX/counts."""
        self.events += len(events)
        for ev in events:
            self._put(self.topic("alerts" if ev.get("event") == "alert" else "tracks"), ev, 1, False)
        self._put(self.topic("counts"), counts, 1, True)

    def _put(self, topic: str, payload: Union[dict, list, str], qos: int, retain: bool) -> None:
        with self._lock:
            if self._closing:
                return
            if len(self._queue) >= self.queue_size:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append((topic, payload, qos, retain))
            self._wake.notify()

    # -- sending --------------------------------------------------------------------------------

    def _send_loop(self) -> None:
        mqtt = self._mqtt
        while True:
            with self._lock:
                while not (self.connected and self._queue) and not self._closing:
                    self._wake.wait(0.5)
                if not (self.connected and self._queue):
                    return  # closing, and nothing that can be sent
                topic, payload, qos, retain = self._queue.popleft()
            client = self._client
            if client is None:
                return
            data = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
            try:
                info = client.publish(topic, data, qos=qos, retain=retain)
                ok = info.rc == mqtt.MQTT_ERR_SUCCESS
            except (ValueError, RuntimeError, OSError):
                ok = False
            with self._lock:
                if ok:
                    self.published += 1
                else:
                    self.dropped += 1

    # -- paho callbacks (paho's thread; the argument lists differ between paho 1 and 2) -----------

    def _on_connect(self, client: MqttClient, userdata: object, flags: object, rc: object, *props: object) -> None:
        code = int(getattr(rc, "value", rc))
        if code != 0:
            self._settled.set()
            error = f"broker refused the connection: {rc}"
            if error != self.last_error:  # once, not at every retry
                self.on_notice(f"mqtt: {self.target}: {error}; retrying in the background")
            self.last_error = error
            return
        client.publish(self.topic("status"), "online", qos=1, retain=True)
        self._announce(client)
        with self._lock:
            self.connects += 1
            self.connected = True
            self._wake.notify_all()
        self._settled.set()
        if self.connects == 1:
            self.on_notice(f"mqtt: connected to {self.target}")
        else:
            self.on_notice(f"mqtt: reconnected to {self.target}")
        self._outage_noted = False

    def _announce(self, client: MqttClient) -> None:
        """The retained messages that describe this publisher (discovery configs, or their
        removal: an empty payload), again at each connection."""
        for topic, payload in self.announce:
            client.publish(topic, payload, qos=1, retain=True)

    def _on_disconnect(self, client: MqttClient, userdata: object, *args: object) -> None:
        rc = args[1] if len(args) >= 2 else args[0]  # paho 2: (flags, rc, props); paho 1: (rc,)
        with self._lock:
            was, self.connected = self.connected, False
            closing = self._closing
        if was and not closing and int(getattr(rc, "value", rc) or 0) != 0:
            self.last_error = f"connection lost ({rc})"
            self.on_notice(f"mqtt: lost the connection to {self.target}; reconnecting "
                           f"(every {RECONNECT_MIN}-{RECONNECT_MAX} s) and dropping the oldest "
                           f"results beyond {self.queue_size}")

    def _on_connect_fail(self, client: MqttClient, userdata: object) -> None:
        self.last_error = "cannot reach the broker"
        self._settled.set()
        if not self._outage_noted and not self._closing:
            self._outage_noted = True
            self.on_notice(f"mqtt: cannot reach {self.target} (or TLS failed); retrying in the "
                           "background")

    # -- numbers ----------------------------------------------------------------------------------

    def summary(self) -> MqttSummary:
        with self._lock:
            queued = len(self._queue)
        return {"url": str(self.target), "mode": self.mode, "connected": self.connected,
                "ever_connected": self.connects > 0,
                "published": self.published, "dropped": self.dropped, "queued": queued,
                "events": self.events, "reconnects": max(0, self.connects - 1),
                "last_error": self.last_error}


# ---------------------------------------------------------------------------------------------
# The Edge TPU's health for Home Assistant: a temperature sensor where the device
# has one (PCIe/M.2 cards), a throttling flag always; state on PREFIX/edgetpu, retained.

HEALTH_TOPIC = "edgetpu"
HEALTH_DISCOVERY_PREFIX = "homeassistant"  # Home Assistant's default MQTT discovery prefix


def health_discovery(prefix: str, temperature: bool) -> list[tuple[str, dict]]:
    """(config topic, payload) of Home Assistant MQTT discovery for the Edge TPU's health."""
    import re

    node = re.sub(r"[^A-Za-z0-9_-]", "_", prefix) or DEFAULT_PREFIX
    common = {"state_topic": f"{prefix}/{HEALTH_TOPIC}", "availability_topic": f"{prefix}/status",
              "payload_available": "online", "payload_not_available": "offline",
              "device": {"identifiers": [f"edgeapp_{node}"], "name": f"edgeapp {prefix}",
                         "manufacturer": "edgeapp"}}
    configs = [(f"{HEALTH_DISCOVERY_PREFIX}/binary_sensor/{node}/edgetpu_throttling/config",
                {**common, "name": "Edge TPU throttling", "unique_id": f"edgeapp_{node}_edgetpu_throttling",
                 "device_class": "problem",
                 "value_template": "{{ 'ON' if value_json.throttling else 'OFF' }}"})]
    if temperature:
        configs.append((f"{HEALTH_DISCOVERY_PREFIX}/sensor/{node}/edgetpu_temperature/config",
                        {**common, "name": "Edge TPU temperature",
                         "unique_id": f"edgeapp_{node}_edgetpu_temperature", "device_class": "temperature",
                         "state_class": "measurement", "unit_of_measurement": "°C",
                         "value_template": "{{ value_json.temperature_c }}"}))
    return configs


def publish_health(out: MqttOut, health: dict, discovery: bool = False) -> None:
    """Queue the Edge TPU's health (temperature, throttling) on PREFIX/edgetpu, retained; with
    `discovery`, first the Home Assistant configs. Never waits, like on_frame."""
    if discovery:
        for topic, payload in health_discovery(out.target.prefix, health.get("temperature_c") is not None):
            out._put(topic, payload, 1, True)
    out._put(out.topic(HEALTH_TOPIC), health, 0, True)


# The engine's outages (hw/worker/events.py): each event on PREFIX/engine/events, the state on
# PREFIX/engine (retained), and a Home Assistant problem sensor "Edge TPU lost" over it.
ENGINE_TOPIC = "engine"


def engine_discovery(prefix: str) -> tuple[str, dict]:
    """(config topic, payload) of the Home Assistant problem sensor for a lost engine."""
    import re

    node = re.sub(r"[^A-Za-z0-9_-]", "_", prefix) or DEFAULT_PREFIX
    return (f"{HEALTH_DISCOVERY_PREFIX}/binary_sensor/{node}/edgetpu_lost/config",
            {"state_topic": f"{prefix}/{ENGINE_TOPIC}", "availability_topic": f"{prefix}/status",
             "payload_available": "online", "payload_not_available": "offline",
             "device": {"identifiers": [f"edgeapp_{node}"], "name": f"edgeapp {prefix}",
                        "manufacturer": "edgeapp"},
             "name": "Edge TPU lost", "unique_id": f"edgeapp_{node}_edgetpu_lost",
             "device_class": "problem", "value_template": "{{ 'ON' if value_json.lost else 'OFF' }}"})


def publish_engine(out: MqttOut, event: dict, state: dict, discovery: bool = False) -> None:
    """Queue one engine event and the engine's state (retained); with `discovery`, first the
    Home Assistant config. Never waits, like on_frame."""
    if discovery:
        topic, payload = engine_discovery(out.target.prefix)
        out._put(topic, payload, 1, True)
    out._put(out.topic(f"{ENGINE_TOPIC}/events"), event, 1, False)
    out._put(out.topic(ENGINE_TOPIC), state, 1, True)
