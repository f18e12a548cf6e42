"""The registry of Coral's published models (`coral_models.json`): what exists, where it comes
from, and how a downloaded file is proven to be the published one.

The registry is data pinned to one commit of google-coral/test_data. Every file has git's object
id (sha1 of b"blob <len>\\0" + data, which commits to the length too) and, where it was known
when the registry was made, its size and SHA-256. A file is verified by its SHA-256 when the
registry has it, else by its git object id (and size, when known).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Optional, Sequence, Union
from urllib.parse import quote

from edgeapp.errors import UsageError

REGISTRY_FILE = Path(__file__).with_name("coral_models.json")
REGISTRY_FORMAT = 1
_HEX = {"sha256": re.compile(r"^[0-9a-f]{64}$"), "git_blob_sha1": re.compile(r"^[0-9a-f]{40}$")}
_CHUNK = 1 << 20


class RegistryError(UsageError):
    """The registry file (ours, or the one EDGEAPP_MODELS_REGISTRY names) is unusable."""


@dataclass(frozen=True)
class FileRef:
    """One file of the repository and what it must hash to."""

    path: str  # relative, '/'-separated, as in the repository
    git_blob_sha1: str
    size: Optional[int] = None
    sha256: Optional[str] = None

    @property
    def verified_by(self) -> str:
        return "sha256" if self.sha256 else "git"

    @property
    def expected_id(self) -> str:
        """What a verified copy is recorded as (changes when the registry pins other bytes)."""
        return f"sha256:{self.sha256}" if self.sha256 else f"git:{self.git_blob_sha1}:{self.size}"


@dataclass(frozen=True)
class ModelEntry:
    name: str
    task: str
    input: Optional[tuple[int, int]]  # (width, height) when known
    description: str
    cpu: Optional[FileRef]
    edgetpu: Optional[FileRef]
    labels: Optional[FileRef]
    segments: tuple[FileRef, ...]  # pipelined models: one compiled file per Edge TPU
    preprocessing: Union[str, dict]  # "raw" (pixels as they are) or {"mean": m, "std": s}
    # custom operators the model needs beyond TFLite's builtins and the Edge TPU's own
    # (PoseNet's PosenetDecoderOp): no stock TFLite runtime has them
    custom_ops: tuple[str, ...] = ()
    # the accuracy Coral published for it, in eval's metric names (top1, top5, map: fractions),
    # with the page it is from ("source"); {} when none was found
    published: dict = field(default_factory=dict)

    @property
    def is_pipeline(self) -> bool:
        return bool(self.segments)

    def files(self, edgetpu: bool = True, cpu: bool = True) -> list[tuple[str, FileRef]]:
        """(role, file) pairs to fetch: the CPU model and/or the compiled twin, then the labels."""
        out: list[tuple[str, FileRef]] = []
        if self.segments:  # compiled for the Edge TPU only
            out += [(f"segment{i}", f) for i, f in enumerate(self.segments)] if edgetpu else []
        else:
            if cpu and self.cpu:
                out.append(("cpu", self.cpu))
            if edgetpu and self.edgetpu:
                out.append(("edgetpu", self.edgetpu))
        if self.labels:
            out.append(("labels", self.labels))
        return out

    @property
    def verification(self) -> str:
        """sha256 when every file has a SHA-256, git when none has, else mixed."""
        kinds = {f.verified_by for _, f in self.files()}
        return kinds.pop() if len(kinds) == 1 else "mixed"

    @property
    def size(self) -> Optional[int]:
        """Bytes of everything `files()` fetches, when all sizes are known."""
        sizes = [f.size for _, f in self.files()]
        return None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[misc]


@dataclass(frozen=True)
class Registry:
    source: str
    commit: str
    url_template: str
    models: dict[str, ModelEntry]
    origin: str  # the file it was read from, for messages


def load_registry(path: Optional[Union[str, Path]] = None,
                  tasks: Optional[Sequence[str]] = None) -> Registry:
    """The registry in `path`, else the one shipped in the package."""
    p = Path(path) if path else REGISTRY_FILE
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RegistryError(f"model registry not found: {p}") from None
    except OSError as e:
        raise RegistryError(f"cannot read model registry {p}: {e.strerror or e}") from None
    except ValueError as e:
        raise RegistryError(f"model registry {p} is not valid JSON: {e}") from None
    return parse_registry(data, str(p), tasks)


_Bad = Callable[[str], RegistryError]  # makes the one-line error naming the registry file


def parse_registry(data: object, origin: str = "<registry>",
                   tasks: Optional[Sequence[str]] = None) -> Registry:
    """Validate the registry document; every problem is one RegistryError line naming it.
    `tasks`: the task names a model may have (edgeapp.tasks owns them; flows/models passes them)."""
    def bad(what: str) -> RegistryError:
        return RegistryError(f"model registry {origin}: {what}")

    files_doc, models_doc, template = _check_document(data, bad)
    files = {path: _file_ref(path, f, bad) for path, f in files_doc.items()}
    models = {name: _model_entry(name, m, files, bad, tasks) for name, m in models_doc.items()}
    return Registry(str(data.get("source", "")), str(data.get("commit", "")), template, models, origin)


def _check_document(data: object, bad: _Bad) -> tuple[dict, dict, str]:
    """The "files" and "models" objects and the URL template of a registry document."""
    if not isinstance(data, dict) or data.get("edgeapp_registry") != REGISTRY_FORMAT:
        raise bad(f'not an edgeapp model registry (needs "edgeapp_registry": {REGISTRY_FORMAT})')
    files_doc, models_doc = data.get("files"), data.get("models")
    if not isinstance(files_doc, dict) or not isinstance(models_doc, dict):
        raise bad('needs "files" and "models" objects')
    template = data.get("url_template")
    if not isinstance(template, str) or "{path}" not in template:
        raise bad('"url_template" must be a string containing {path}')
    return files_doc, models_doc, template


def _file_ref(path: str, f: object, bad: _Bad) -> FileRef:
    """One entry of "files": a safe path and at least one well-formed digest."""
    if not isinstance(f, dict):
        raise bad(f"file {path!r} is not an object")
    _check_path(path, bad)
    for key, rx in _HEX.items():
        if key in f and not (isinstance(f[key], str) and rx.match(f[key])):
            raise bad(f"file {path!r} has a malformed {key}")
    if "git_blob_sha1" not in f and "sha256" not in f:
        raise bad(f"file {path!r} has neither sha256 nor git_blob_sha1: it could not be verified")
    size = f.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise bad(f"file {path!r} has a bad size {size!r}")
    return FileRef(path, f.get("git_blob_sha1", ""), size, f.get("sha256"))


def _model_entry(name: str, m: object, files: dict[str, FileRef], bad: _Bad,
                 tasks: Optional[Sequence[str]] = None) -> ModelEntry:
    """One entry of "models": a known task, a sane input size and preprocessing, listed files."""
    if not isinstance(m, dict) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", name):
        raise bad(f"bad model entry {name!r}")
    task = m.get("task")
    if not isinstance(task, str) or not task or (tasks is not None and task not in tasks):
        known = f" is not one of {', '.join(tasks)}" if tasks is not None else " is not a task name"
        raise bad(f"model {name!r}: task {task!r}{known}")
    size = m.get("input")
    if size is not None and not (isinstance(size, list) and len(size) == 2
                                 and all(isinstance(v, int) and v > 0 for v in size)):
        raise bad(f"model {name!r}: input must be [width, height]")
    pre = m.get("preprocessing", "raw")
    if pre != "raw" and not (isinstance(pre, dict) and all(
            isinstance(pre.get(k), (int, float)) for k in ("mean", "std")) and pre["std"] != 0):
        raise bad(f"model {name!r}: preprocessing must be \"raw\" or {{\"mean\": m, \"std\": s}}")
    ops = m.get("custom_ops", [])
    if not (isinstance(ops, list) and all(isinstance(o, str) and o for o in ops)):
        raise bad(f"model {name!r}: custom_ops must be a list of operator names")

    def ref(p: object, role: str) -> Optional[FileRef]:
        if p is None:
            return None
        if not isinstance(p, str) or p not in files:
            raise bad(f"model {name!r}: its {role} file {p!r} is not listed in \"files\"")
        return files[p]

    published = m.get("published") or {}
    if not (isinstance(published, dict) and isinstance(published.get("source", ""), str) and all(
            isinstance(v, (int, float)) and 0 <= v <= 1 for k, v in published.items() if k != "source")):
        raise bad(f"model {name!r}: published must map metric names to fractions, with a source")
    segments = tuple(ref(s, "segment") for s in m.get("segments") or ())
    entry = ModelEntry(name, task, tuple(size) if size else None, str(m.get("description", "")),
                       ref(m.get("cpu"), "cpu"), ref(m.get("edgetpu"), "edgetpu"),
                       ref(m.get("labels"), "labels"), segments, pre, tuple(ops),  # type: ignore[arg-type]
                       dict(published))
    if not (entry.cpu or entry.edgetpu or entry.segments):
        raise bad(f"model {name!r} has no model file (cpu, edgetpu or segments)")
    return entry


def _check_path(path: str, bad: _Bad) -> None:
    """Registry paths stay inside the cache: relative, no '..', no backslashes."""
    p = PurePosixPath(path)
    if not path or "\\" in path or p.is_absolute() or ".." in p.parts or ":" in p.parts[0]:
        raise bad(f"file path {path!r} must be relative, without '..'")


def file_url(template: str, path: str, commit: str = "") -> str:
    """The URL of `path` by the template ({path}, optionally {commit}); the path is %-quoted."""
    if "{path}" not in template:
        raise UsageError(f"the models URL template {template!r} has no {{path}}, e.g. "
                         "https://mirror.example/coral/{path} or file:///srv/coral/{path}")
    return template.replace("{commit}", commit).replace("{path}", quote(path, safe="/"))


def digests(path: Union[str, Path]) -> tuple[int, str, str]:
    """(size, SHA-256, git object id) of a file, in one read."""
    return _hash_file(Path(path), git=True)  # type: ignore[return-value]


def file_sha256(path: Union[str, Path]) -> str:
    """A file's SHA-256, read in blocks (never the whole file in memory): the one content hash
    of edgeapp (probe verdicts, embedding caches, installed compilers)."""
    return _hash_file(Path(path), git=False)[1]


def _hash_file(p: Path, git: bool) -> tuple[int, str, Optional[str]]:
    size = p.stat().st_size
    sha256 = hashlib.sha256()
    blob = hashlib.sha1(b"blob %d\0" % size) if git else None
    n = 0
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            sha256.update(chunk)
            if blob is not None:
                blob.update(chunk)
            n += len(chunk)
    if blob is not None and n != size:  # the file changed while we read it: the git id is wrong
        return _hash_file(p, git)
    return n, sha256.hexdigest(), blob.hexdigest() if blob is not None else None


def git_blob_sha1(data: bytes) -> str:
    """Git's object id of a file's contents."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def mismatch(path: Union[str, Path], ref: FileRef) -> Optional[str]:
    """Why the file at `path` is not `ref` (one phrase), or None when it verifies."""
    size, sha256, git = digests(path)
    if ref.size is not None and size != ref.size:
        return f"{size} bytes instead of {ref.size}"
    if ref.sha256:
        if sha256 != ref.sha256:
            return f"SHA-256 {sha256[:16]}… instead of {ref.sha256[:16]}…"
        return None
    if git != ref.git_blob_sha1:
        return f"git object id {git[:12]}… instead of {ref.git_blob_sha1[:12]}… ({size} bytes)"
    return None
