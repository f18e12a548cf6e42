"""Containment's memory: the verdicts of earlier model checks and delegate probes (probe.json).

Keyed by content hashes, so a check costs once per file (see probe.py for what is checked):
- a model verdict by the model's SHA-256, the runtime's name and version, and for the Edge TPU
  the library's SHA-256 ("pass", "crash", "hang", or "invalid" with the runtime's message);
- a pair verdict (runtime, Edge TPU library) by the library's SHA-256;
- a co-compiled model's agreement with its CPU model (hw/cocompiled.py), by the model's SHA-256,
  the runtime's name and version and the library's SHA-256.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Optional

from typing_extensions import TypedDict

from edgeapp.core.registry import file_sha256

MAX_MODEL_VERDICTS = 2000  # oldest forgotten first
_SECTIONS = ("verdicts", "models", "files", "cocompiled")
CACHED_NOTE = "`edgeapp doctor --forget-probes` to probe again"
_PATHMARK = "{model}"  # in cached model messages: the path of the file as given this time


@dataclass(frozen=True)
class Pair:
    """A TFLite runtime and one build of the Edge TPU library, as found on disk."""

    runtime: str
    runtime_version: str
    library: str  # real path of the library file
    sha256: str

    @classmethod
    def of(cls, runtime: str, runtime_version: str, library: str) -> "Pair":
        path = os.path.realpath(library)
        return cls(runtime, runtime_version, path, file_sha256(path))

    @property
    def key(self) -> str:
        return f"{self.runtime} {self.runtime_version}|{self.sha256}"


@dataclass(frozen=True)
class ModelKey:
    """One model file as one runtime (and Edge TPU library, if any) runs it."""

    sha256: str
    runtime: str
    runtime_version: str
    library_sha256: Optional[str] = None  # None: on the CPU

    @property
    def key(self) -> str:
        where = f"edgetpu {self.library_sha256}" if self.library_sha256 else "cpu"
        return f"{self.sha256}|{self.runtime} {self.runtime_version}|{where}"


@dataclass(frozen=True)
class Verdict:
    status: str  # pass, crash, hang, invalid (model only) are cached; failed is not
    message: str  # one line for the user ("" on pass)
    edgetpu_version: Optional[str] = None
    model: Optional[str] = None
    probed_at: Optional[str] = None
    stage: Optional[str] = None  # where the child was when it died or failed

    @property
    def cacheable(self) -> bool:
        return self.status in ("pass", "crash", "hang", "invalid")

    def cached(self) -> "Verdict":
        """The same verdict, its message saying it comes from the cache."""
        if self.status == "pass":
            return self
        note = f" (verdict cached {self.probed_at}; {CACHED_NOTE})"
        return Verdict(self.status, self.message + note, self.edgetpu_version, self.model,
                       self.probed_at, self.stage)


def _verdict(entry: Optional[dict]) -> Optional[Verdict]:
    if not entry or "status" not in entry:
        return None
    return Verdict(entry["status"], entry.get("message", ""), entry.get("edgetpu_version"),
                   entry.get("model"), entry.get("probed_at"), entry.get("stage"))


class CacheFile(TypedDict):
    """probe.json: pair verdicts and model verdicts by key, files' SHA-256 by path (each with the
    stat it was computed at), co-compiled models' agreement by the model's SHA-256."""
    verdicts: Dict[str, dict]
    models: Dict[str, dict]
    files: Dict[str, dict]
    cocompiled: Dict[str, dict]


class VerdictCache:
    """probe.json in the cache directory: {"verdicts": {pair key: ...}, "models": {model key: ...}}.

    The cache is the user's, shared by every Python environment (venv) running edgeapp: each
    verdict records the one that made it (`python`: its sys.prefix), so doctor can say which
    verdicts came from elsewhere. `environment` is this one."""

    def __init__(self, directory: Path, environment: str = sys.prefix) -> None:
        self.path = Path(directory) / "probe.json"
        self.environment = environment

    def _load(self) -> CacheFile:
        try:
            data = json.loads(self.path.read_text())
            return {k: dict(data.get(k, {})) for k in _SECTIONS}  # type: ignore[misc]
        except (OSError, ValueError, AttributeError, TypeError):
            return {k: {} for k in _SECTIONS}  # type: ignore[misc]  # absent or damaged: probe again

    def sha256(self, path: str) -> str:
        """The file's SHA-256, remembered by (path, size, mtime, ctime, inode): a cache hit then
        costs a stat, not a read of the whole model. ctime cannot be set back by users."""
        real = os.path.realpath(path)
        st = os.stat(real)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
        data = self._load()
        known = data["files"].get(real)
        if isinstance(known, dict) and known.get("stat") == stamp and known.get("sha256"):
            return str(known["sha256"])
        digest = file_sha256(real)
        files = data["files"]
        files.pop(real, None)
        files[real] = {"stat": stamp, "sha256": digest}
        while len(files) > MAX_MODEL_VERDICTS:
            files.pop(next(iter(files)))
        self._write(data)
        return digest

    def entries(self) -> dict[str, dict]:
        """Pair verdicts (what doctor reports per Edge TPU library)."""
        return self._load()["verdicts"]

    def model_entries(self) -> dict[str, dict]:
        return self._load()["models"]

    def counts(self) -> dict[str, dict[str, int]]:
        """Cached verdicts by kind and status: {"pairs": {"pass": 1}, "models": {"crash": 5}}."""
        data = self._load()
        out: dict[str, dict[str, int]] = {}
        for kind, field in (("pairs", "verdicts"), ("models", "models")):
            statuses = [str(e.get("status")) for e in data[field].values() if isinstance(e, dict)]
            out[kind] = {s: statuses.count(s) for s in sorted(set(statuses))}
        return out

    def describe(self) -> str:
        """Every cached verdict edgeapp acts on, in one phrase (doctor's probe-cache line):
        `6 cached verdict(s): Edge TPU pairs pass 1; model files crash 5 (refused until
        `edgeapp doctor --forget-probes`) in PATH`."""
        counts = self.counts()
        total = sum(sum(c.values()) for c in counts.values())
        if not total:
            return f"no cached probe or model-check verdicts in {self.path}"
        parts = []
        for kind, label in (("pairs", "Edge TPU pairs"), ("models", "model files")):
            if counts[kind]:
                parts.append(f"{label} " + ", ".join(f"{s} {n}" for s, n in counts[kind].items()))
        refused = total - sum(c.get("pass", 0) for c in counts.values())
        note = f" ({refused} refused until `edgeapp doctor --forget-probes`)" if refused else ""
        return f"{total} cached verdict(s): {'; '.join(parts)}{note} in {self.path}{self._elsewhere()}"

    def _elsewhere(self) -> str:
        """Which verdicts other Python environments recorded (the cache is shared)."""
        data = self._load()
        made = [e.get("python") for field in ("verdicts", "models") for e in data[field].values()
                if isinstance(e, dict)]
        others = sorted({str(p) for p in made if p and p != self.environment})
        unknown = sum(1 for p in made if not p)
        out = []
        if others:
            n = sum(1 for p in made if p and p != self.environment)
            out.append(f"{n} recorded by other Python environments ({', '.join(others)})")
        if unknown:
            out.append(f"{unknown} by an edgeapp that did not record where")
        return f"; {', '.join(out)}, this one is {self.environment}" if out else ""

    def get(self, pair: Pair) -> Optional[Verdict]:
        return _verdict(self.entries().get(pair.key))

    def get_model(self, key: ModelKey, path: str) -> Optional[Verdict]:
        """The verdict on this content, its message naming `path` (the same bytes may have
        been checked under another name)."""
        v = _verdict(self.model_entries().get(key.key))
        if v is None:
            return None
        return Verdict(v.status, v.message.replace(_PATHMARK, str(path)), v.edgetpu_version, v.model,
                       v.probed_at, v.stage)

    def put(self, pair: Pair, verdict: Verdict) -> None:
        data = self._load()
        data["verdicts"][pair.key] = {**asdict(pair), **asdict(verdict),
                                      "python": self.environment}
        self._write(data)

    def put_model(self, key: ModelKey, verdict: Verdict, path: str) -> None:
        data = self._load()
        models = data["models"]
        models.pop(key.key, None)
        entry = {**asdict(key), **asdict(verdict), "python": self.environment}
        entry["message"] = verdict.message.replace(str(path), _PATHMARK)
        models[key.key] = entry
        while len(models) > MAX_MODEL_VERDICTS:  # insertion order: the oldest first
            models.pop(next(iter(models)))
        self._write(data)

    def get_agreement(self, key: str) -> Optional[dict]:
        """A co-compiled model's cached agreement with its CPU model (hw/cocompiled.py)."""
        entry = self._load()["cocompiled"].get(key)
        return entry if isinstance(entry, dict) else None

    def put_agreement(self, key: str, entry: dict) -> None:
        data = self._load()
        kept = data["cocompiled"]
        kept.pop(key, None)
        kept[key] = {**entry, "python": self.environment}
        while len(kept) > MAX_MODEL_VERDICTS:
            kept.pop(next(iter(kept)))
        self._write(data)

    def clear(self) -> int:
        data = self._load()
        n = len(data["verdicts"]) + len(data["models"]) + len(data["cocompiled"])
        self._write({k: {} for k in _SECTIONS})
        return n

    def _write(self, data: dict) -> None:
        try:  # atomic: concurrent edgeapp processes never see half a file
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".probe-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only home only costs a probe per run
