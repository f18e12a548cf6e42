"""Several sources in one camera run: their names, the lines and zones scoped to one of them,
and each one's recording file.

`--source` is repeatable; a source may be named (`--source yard=rtsp://...`), else its name is
made from it (a file's stem, `camera0` for camera index 0, a URL's host and path), made unique
with `-2`, `-3`... With one unnamed source, nothing changes: it keeps the name the capture
gives it, and records and events carry no `source` field. A line or zone is scoped to one source
by prefixing its name: `--count-line yard/door:...`; without a prefix it applies to every source.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Mapping, Optional, Sequence, Tuple, Union

from edgeapp.errors import UsageError

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,39}$")  # as a line's name: no '/', no ':'
_NAMED = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]{0,39})=(.+)$", re.S)

Spec = Union[str, int, Path]  # a camera index, a file, a URL, a pipeline
Given = Union[Spec, Sequence[Spec], Mapping[str, Spec]]  # one, several, or several by name


@dataclass(frozen=True)
class NamedSource:
    """One source of the run: its name (records' `source`, line prefixes, file names) and what
    the capture opens (a camera index, a file, a URL, a GStreamer pipeline). `named`: the user
    gave the name (or the run has several sources): records and events carry it."""

    name: str
    spec: str
    named: bool = True


def parse_sources(value: Given, flag: str = "--source") -> List[NamedSource]:
    """The run's sources from `--source` (repeated) or the API's `source` (one, a list, or a
    dict name -> source). Names must be unique and may not hold '/' (a usage error naming
    `flag`, as the face that was given it spells it)."""
    if isinstance(value, dict):
        given: List[Tuple[Optional[str], str]] = [(str(k), str(v)) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        given = [_split(str(v)) for v in value]
    else:
        given = [_split(str(value))]
    if not given:
        given = [(None, "0")]
    for name, spec in given:
        if name is not None and not _NAME.match(name):
            raise UsageError(f"{flag} {name}={spec}: a source's name is letters, digits, _ . - "
                             "(at most 40)")
        if not spec.strip():
            raise UsageError(f"{flag} {name or ''}=: the source is empty")
    if len(given) == 1 and given[0][0] is None:
        return [NamedSource(_capture_name(given[0][1]), given[0][1], named=False)]
    explicit = [n for n, _ in given if n is not None]
    for name in explicit:
        if explicit.count(name) > 1:
            raise UsageError(f"{flag}: the name {name!r} is given to two sources; give each its own")
    taken = set(explicit)
    out = []
    for name, spec in given:
        if name is None:
            name = _unique(_derived_name(spec), taken)
            taken.add(name)
        out.append(NamedSource(name, spec))
    return out


def _split(text: str) -> Tuple[Optional[str], str]:
    """`NAME=SOURCE` -> (NAME, SOURCE); a source that merely holds '=' (a URL's query, a
    GStreamer pipeline's properties, an existing file) is unnamed."""
    m = _NAMED.match(text)
    if m is None or os.path.exists(text):
        return None, text
    return m.group(1), m.group(2)


def _capture_name(spec: str) -> str:
    """The name the capture gives a lone unnamed source (hw/capture.OpenCVSource.name)."""
    from edgeapp.hw.capture import parse_source

    kind, target = parse_source(spec)
    return f"camera {target}" if kind == "camera" else str(target)


def _derived_name(spec: str) -> str:
    from edgeapp.hw.capture import parse_source

    kind, target = parse_source(spec)
    if kind == "camera":
        return f"camera{target}"
    if kind == "device":
        return Path(str(target)).name  # video2
    if kind == "url":
        rest = str(target).split("://", 1)[1].split("?", 1)[0]
        rest = rest.rsplit("@", 1)[-1]  # no credentials in a name
        text = rest.replace(":", "-").replace("/", "-")
    elif kind == "gstreamer":
        text = "pipeline"
    else:
        text = Path(str(target)).stem
    text = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "source"
    return text[:40]


def _unique(name: str, taken: set) -> str:
    if name not in taken:
        return name
    n = 2
    while f"{name[:36]}-{n}" in taken:
        n += 1
    return f"{name[:36]}-{n}"


def split_scope(text: str) -> Tuple[Optional[str], str]:
    """`yard/door:x1,y1,...` -> ("yard", "door:x1,y1,..."); no prefix -> (None, text)."""
    head, sep, _ = text.partition(":")
    if not sep or "/" not in head:
        return None, text
    source, _, rest = text.partition("/")
    return source.strip(), rest


def check_scopes(scoped: Sequence[Tuple[str, Optional[str]]], sources: Sequence[NamedSource]) -> None:
    """Each (flag, source) of a prefixed line or zone names a source of the run."""
    names = [s.name for s in sources]
    for flag, source in scoped:
        if source is not None and source not in names:
            known = ", ".join(names) if len(sources) > 1 or sources[0].named else "none is named"
            raise UsageError(f"{flag} {source}/...: no source is named {source!r} (sources: {known})")


def record_path(path: Path, source: NamedSource, several: bool) -> Path:
    """Where one source's `--record` goes: the path given with one source; with several, the
    source's name before the suffix (out.mp4 -> out.yard.mp4)."""
    if not several:
        return path
    return path.with_name(f"{path.stem}.{source.name}{path.suffix}")

