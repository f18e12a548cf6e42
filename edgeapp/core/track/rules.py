"""Alert rules as users write them: `--alert NAME:KIND[,key=value...]` or an entry of a
`--rules` file (YAML or TOML, already read into plain values), checked into one `Rule`.

Kinds (every kind also takes `label=L` and `source=S`):
- `NAME:line=LINE[,direction=in|out]`: a track crossed a counting line;
- `NAME:zone=ZONE[,dwell=SECONDS][,inertia=N]`: a track entered a zone and stayed for the dwell;
- `NAME:count=ZONE,over=N[,for=SECONDS][,inertia=N]`: more than N tracks in a zone for that long;
- `NAME:appear[,inertia=N]`: a new track, seen N frames in a row.

`inertia` (frames in a row, default 3, Frigate's) is how many frames a track must be inside a
zone before entering counts, and outside before leaving counts: a box flickering across a zone's
edge for fewer frames changes nothing. Every mistake is one `UsageError` (exit 2) naming where
the rule came from.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from edgeapp.errors import UsageError

KINDS = ("line", "zone", "count", "appear")
INERTIA = 3  # frames in a row (Frigate's default)
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
_COMMON = ("label", "source")
_KEYS = {"line": ("direction",) + _COMMON, "zone": ("dwell", "inertia") + _COMMON,
         "count": ("over", "for", "inertia") + _COMMON, "appear": ("inertia",) + _COMMON}
FORMS = ("NAME:line=LINE[,direction=in|out], NAME:zone=ZONE[,dwell=SECONDS], "
         "NAME:count=ZONE,over=N[,for=SECONDS] or NAME:appear (each with label=, source=)")


@dataclass(frozen=True)
class Rule:
    """One alert rule. `target`: the line or zone it watches (None for appear); `direction`:
    a line's (None: either); `dwell`: seconds inside a zone; `over`/`hold`: a count rule's
    number and seconds; `inertia`: frames in a row; `label`/`source`: only these objects, only
    this camera."""

    name: str
    kind: str
    target: Optional[str] = None
    direction: Optional[str] = None
    dwell: float = 0.0
    over: int = 0
    hold: float = 0.0
    inertia: int = INERTIA
    label: Optional[str] = None
    source: Optional[str] = None

    def matches(self, label: str, source: str) -> bool:
        """Whether an object of `label` seen by camera `source` is one this rule watches."""
        return (self.label is None or self.label == label) and \
            (self.source is None or self.source == source)


def parse_alert(text: str) -> Rule:
    """`--alert NAME:KIND[,key=value...]`."""
    where = f"--alert {text!r}"
    name, sep, rest = text.partition(":")
    if not sep:
        raise UsageError(f"{where}: write {FORMS}")
    items = [p.strip() for p in rest.split(",")]
    if not items or not items[0]:
        raise UsageError(f"{where}: say what fires it after the colon: {FORMS}")
    head, eq, value = items[0].partition("=")
    values: Dict[str, Any] = {head.strip(): value.strip() if eq else True}
    for item in items[1:]:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UsageError(f"{where}: {item!r} is not key=value")
        if key in values:
            raise UsageError(f"{where}: {key} is given twice")
        values[key] = value.strip()
    return _rule(name.strip(), head.strip(), values, where)


def parse_rules(data: object, where: str) -> List[Rule]:
    """A rules file's contents (YAML or TOML, read): `alerts:` as a list of tables with a
    `name`, or as a table of tables keyed by name. Each table has one kind key (line, zone,
    count, or appear: true) and that kind's keys."""
    if not isinstance(data, Mapping) or "alerts" not in data:
        raise UsageError(f"{where}: expected a top-level `alerts` list or table of rules")
    entries = data["alerts"]
    if isinstance(entries, Mapping):
        entries = [{"name": k, **v} if isinstance(v, Mapping) else v for k, v in entries.items()]
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{where}: `alerts` holds no rule")
    rules = []
    for n, entry in enumerate(entries, 1):
        if not isinstance(entry, Mapping):
            raise UsageError(f"{where}: alert {n} is not a table of keys")
        entry = dict(entry)
        name = str(entry.pop("name", ""))
        kinds = [k for k in KINDS if k in entry]
        if len(kinds) != 1:
            raise UsageError(f"{where}: alert {name or n} needs exactly one of {', '.join(KINDS)}")
        head = kinds[0]
        values = {head: entry.pop(head), **entry}
        rules.append(_rule(name, head, values, f"{where}: alert {name or n}"))
    return rules


def check_rules(rules: Sequence[Rule], lines: Sequence[str], zones: Sequence[str]) -> None:
    """Names are unique, and each rule's line or zone is one the run counts."""
    seen: set = set()
    for rule in rules:
        if rule.name in seen:
            raise UsageError(f"--alert {rule.name}: the name is used twice; give each rule its own")
        seen.add(rule.name)
        known, flag = (lines, "--count-line") if rule.kind == "line" else (zones, "--zone")
        if rule.kind != "appear" and rule.target not in known:
            have = ", ".join(known) or "none"
            raise UsageError(f"--alert {rule.name}: {rule.kind} {rule.target!r} is not a {flag} "
                             f"of this run (given: {have})")


def _rule(name: str, head: str, values: Dict[str, Any], where: str) -> Rule:
    if not _NAME.match(name):
        raise UsageError(f"{where}: the rule needs a NAME of letters, digits, _ . - (1 to 40)")
    if head not in KINDS:
        raise UsageError(f"{where}: {head!r} is not a kind of alert: {FORMS}")
    unknown = [k for k in values if k != head and k not in _KEYS[head]]
    if unknown:
        raise UsageError(f"{where}: {head} rules take {', '.join(_KEYS[head])}, not {unknown[0]}")
    target = None
    if head == "appear":
        if values[head] not in (True, "true", "yes", "1"):
            raise UsageError(f"{where}: appear takes no value")
    else:
        target = str(values[head]).strip() if values[head] is not True else ""
        if not _NAME.match(target):
            raise UsageError(f"{where}: name the {'zone' if head == 'count' else head}: "
                             f"{head}=NAME")
    direction = values.get("direction")
    if direction is not None and direction not in ("in", "out"):
        raise UsageError(f"{where}: direction is in or out, not {direction!r}")
    if head == "count" and "over" not in values:
        raise UsageError(f"{where}: a count rule needs over=N (fires when more than N are inside)")
    return Rule(name, head, target, direction,
                dwell=_number(values, "dwell", where, 0.0),
                over=int(_number(values, "over", where, 0, whole=True)),
                hold=_number(values, "for", where, 0.0),
                inertia=int(_number(values, "inertia", where, INERTIA, whole=True, least=1)),
                label=_text(values, "label", where), source=_text(values, "source", where))


def _number(values: dict, key: str, where: str, default: float, whole: bool = False,
            least: float = 0) -> float:
    if key not in values:
        return default
    raw = values[key]
    try:
        number = float(raw) if not isinstance(raw, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < least or (whole and number != int(number)):
        kind = "a whole number" if whole else "a number of seconds"
        raise UsageError(f"{where}: {key} must be {kind} of at least {least:g}, not {raw!r}")
    return number


def _text(values: dict, key: str, where: str) -> Optional[str]:
    if key not in values:
        return None
    text = str(values[key]).strip()
    if not text:
        raise UsageError(f"{where}: {key} is empty")
    return text
