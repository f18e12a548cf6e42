"""Home Assistant MQTT discovery for `camera --mqtt`: entities that appear by themselves.

For each entity the task reports (`TaskKind.discovery`: the top class, objects per label, a
person present, the classes present), one retained config on
`homeassistant/<component>/<node>/<entity>/config`: its state topic (PREFIX/frames in
--mqtt-mode frames, the retained PREFIX/state in events mode) with the task's value template,
and PREFIX/status as its availability (online / offline, the last will). The entities of the
other mode get an empty retained config (removed), so switching modes leaves no stale entity;
`--no-mqtt-discovery` sends empty configs for all of them. MqttOut sends these at every
connection (a restarted broker without persistence has forgotten them).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple, Union

from typing_extensions import TypedDict

if TYPE_CHECKING:
    from edgeapp.tasks.base import Entity, TaskKind

DISCOVERY_PREFIX = "homeassistant"
STATE_TOPIC = {"frames": "frames", "events": "state"}


class MqttState(TypedDict, total=False):
    """The retained `state` topic (--mqtt-mode events) the entities' templates read: the labels
    present (presence tasks) or the top label (None: nothing passes), as sinks/mqtt.py confirms them."""
    labels: List[Union[str, int]]  # a class id where there are no labels; sorted
    label: Optional[Union[str, int]]


class MqttSummary(TypedDict):
    """The MQTT output of a camera run in its summary (sinks/mqtt.MqttOut.summary)."""
    url: str
    mode: str  # frames or events
    connected: bool
    ever_connected: bool
    published: int
    dropped: int  # the oldest results, beyond the queue's size while the broker was away
    queued: int
    events: int
    reconnects: int
    last_error: Optional[str]


class HaDevice(TypedDict, total=False):
    """The camera as one Home Assistant device (its entities share it)."""
    identifiers: List[str]
    name: str
    manufacturer: str
    model: str
    sw_version: str


class HaOrigin(TypedDict):
    name: str


class HaConfig(TypedDict, total=False):
    """An entity's MQTT discovery config (Home Assistant's keys)."""
    name: str
    unique_id: str
    state_topic: str
    value_template: str
    availability_topic: str
    payload_available: str
    payload_not_available: str
    device: HaDevice
    origin: HaOrigin
    payload_on: str  # binary sensors
    payload_off: str
    state_class: str  # numeric sensors: "measurement"


def node_id(prefix: str) -> str:
    """This camera's id in Home Assistant: from its topic prefix (one prefix per camera)."""
    return "edgeapp_" + (re.sub(r"[^a-z0-9_-]+", "_", prefix.lower()).strip("_") or "camera")


def _config(entity: Entity, template: str, prefix: str, mode: str, node: str, device: HaDevice) -> HaConfig:
    config: HaConfig = {"name": entity.name, "unique_id": f"{node}_{entity.key}",
                        "state_topic": f"{prefix}/{STATE_TOPIC[mode]}",
                        "value_template": template, "availability_topic": f"{prefix}/status",
                        "payload_available": "online", "payload_not_available": "offline",
                        "device": device, "origin": {"name": "edgeapp"}}
    if entity.component == "binary_sensor":
        config.update(payload_on="ON", payload_off="OFF")
    if entity.numeric:
        config["state_class"] = "measurement"
    return config


def discovery_messages(kind: TaskKind, labels: Optional[Dict[int, str]], prefix: str, mode: str, *,
                       remove: bool = False, model: str = "",
                       version: str = "") -> List[Tuple[str, str]]:
    """(topic, payload) pairs, to publish retained: configs for `mode`'s entities, empty
    payloads (removal) for the others, and for all when `remove`."""
    node = node_id(prefix)
    device: HaDevice = {"identifiers": [node], "name": f"edgeapp {prefix}", "manufacturer": "edgeapp",
                        "model": f"{kind.name} · {model}" if model else kind.name}
    if version:
        device["sw_version"] = version
    out: Dict[str, str] = {}
    for entity in kind.discovery(labels):
        topic = f"{DISCOVERY_PREFIX}/{entity.component}/{node}/{entity.key}/config"
        template = None if remove else {"frames": entity.frames, "events": entity.state}[mode]
        payload = json.dumps(_config(entity, template, prefix, mode, node, device)) if template else ""
        if payload or topic not in out:
            out[topic] = payload
    return list(out.items())


def counting_discovery(prefix: str, lines: List[str], zones: List[str], *, remove: bool = False,
                       model: str = "", kind_name: str = "") -> List[Tuple[str, str]]:
    """camera --track: a counter per line and direction and one per zone (objects in it now),
    read from the retained PREFIX/counts (flows/camera/tracking.py's summary)."""
    node = node_id(prefix)
    device: HaDevice = {"identifiers": [node], "name": f"edgeapp {prefix}", "manufacturer": "edgeapp",
                        "model": f"{kind_name} · {model}" if model else kind_name}
    entities = []
    for name in lines:
        for direction in ("in", "out"):
            entities.append((f"line_{_key(name)}_{direction}", f"{name} {direction}",
                             f"{{{{ value_json.lines[{json.dumps(name)}].{direction} }}}}", "total_increasing"))
    for name in zones:
        entities.append((f"zone_{_key(name)}", f"{name} occupancy",
                         f"{{{{ value_json.zones[{json.dumps(name)}].now }}}}", "measurement"))
    out = []
    for key, title, template, state_class in entities:
        topic = f"{DISCOVERY_PREFIX}/sensor/{node}/{key}/config"
        config = {"name": title, "unique_id": f"{node}_{key}", "state_topic": f"{prefix}/counts",
                  "value_template": template, "availability_topic": f"{prefix}/status",
                  "payload_available": "online", "payload_not_available": "offline",
                  "state_class": state_class, "device": device, "origin": {"name": "edgeapp"}}
        out.append((topic, "" if remove else json.dumps(config)))
    return out


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_") or "x"
