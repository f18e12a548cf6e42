"""Coral's published models by name: pulled into the cache, verified, and resolved for commands.

A file is downloaded to `X.part` (resumed with an HTTP Range request after a cut connection,
restarted when the server ignores ranges), verified against the registry, and only then renamed
to `X`: a half-downloaded or wrong file is never taken for a model. Verified files are recorded
(`.verified.json`: registry id, size, mtime) so a cache hit costs a stat, not a hash; a cached
file that no longer matches its record is hashed again, and downloaded again when it is wrong.

urllib honours the usual proxy variables (http_proxy, https_proxy, no_proxy). The URLs come
from the registry's template, or from EDGEAPP_MODELS_URL (a mirror, or file:// an offline copy).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional, Union

from typing_extensions import TypedDict

from edgeapp import tasks
from edgeapp.core.labels import read_labels
from edgeapp.core.meta import ModelMeta, write_sidecar
from edgeapp.core.naming import cpu_twin_path, sidecar_path
from edgeapp.core.registry import (
    FileRef,
    ModelEntry,
    Registry,
    file_url,
    load_registry,
    mismatch,
)
from edgeapp.core.tflite.model import load_model
from edgeapp.core.units import format_bytes
from edgeapp.core.userdirs import cache_dir
from edgeapp.errors import InvalidModel, UsageError, VerificationError
from edgeapp.hw.device_choice import parse_devices
from edgeapp.hw.devices import list_edge_tpus
from edgeapp.hw.download import (
    URL_ENV,
    Reporter,
    download,
    host_of,
    timeout_from_env,
    write_error,
)
from edgeapp.hw.libedgetpu import edgetpu_library
from edgeapp.hw.sysroot import sysroot  # where to look for Edge TPUs ($EDGEAPP_SYSROOT)
from edgeapp.tasks import internal_names, names

REGISTRY_ENV = "EDGEAPP_MODELS_REGISTRY"  # another registry file (own models, tests)
MANIFEST = ".verified.json"


@dataclass
class PulledFile:
    role: str  # cpu, edgetpu, labels, segmentN
    ref: FileRef
    path: Path
    how: str  # "downloaded" or "cached"


@dataclass
class Pulled:
    entry: ModelEntry
    files: list[PulledFile]
    sidecar: Optional[Path] = None

    def path(self, role: str) -> Optional[Path]:
        return next((f.path for f in self.files if f.role == role), None)


@dataclass
class Resolution:
    """A MODEL argument that named a registry model: the file to open, and why it was chosen."""

    path: Path
    entry: ModelEntry
    notice: Optional[str] = None  # when we chose the CPU model: says so instead of the runtime
    pulled: list[PulledFile] = field(default_factory=list)


# --- registry, URLs and cache places ---------------------------------------------------------

def registry(env: Mapping[str, str] = os.environ) -> Registry:
    """The package's registry, or the file EDGEAPP_MODELS_REGISTRY names."""
    return load_registry(env.get(REGISTRY_ENV) or None, names() + internal_names())


def url_template(reg: Registry, env: Mapping[str, str] = os.environ) -> str:
    return env.get(URL_ENV) or reg.url_template


def url_of(reg: Registry, ref: FileRef, env: Mapping[str, str] = os.environ) -> str:
    return file_url(url_template(reg, env), ref.path, reg.commit)


def models_dir(env: Mapping[str, str] = os.environ) -> Path:
    """$EDGEAPP_CACHE_DIR/models (the same cache rule as probe verdicts and bench peaks)."""
    return cache_dir(env) / "models"


def local_path(ref: FileRef, env: Mapping[str, str] = os.environ) -> Path:
    return models_dir(env).joinpath(*ref.path.split("/"))


def sidecar_of(entry: ModelEntry, env: Mapping[str, str] = os.environ) -> Optional[Path]:
    """Where pull writes the sidecar: X.json beside X.tflite (X_edgetpu.tflite reads it too)."""
    model = entry.cpu or entry.edgetpu
    return None if model is None or entry.is_pipeline else \
        sidecar_path(cpu_twin_path(local_path(model, env)))


def lookup(reg: Registry, name: str) -> ModelEntry:
    """The entry called `name`, or a UsageError that suggests close names."""
    entry = reg.models.get(name)
    if entry is None:
        raise UsageError(f"no model named {name!r} in the registry{_did_you_mean(reg, name)}")
    return entry


def _did_you_mean(reg: Registry, name: str) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(reg.models), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else " (see `edgeapp models list`)"


# --- pull --------------------------------------------------------------------------------------

def pull(entry: ModelEntry, reg: Registry, *, edgetpu: bool = True, cpu: bool = True,
         reporter: Optional[Reporter] = None, env: Mapping[str, str] = os.environ) -> Pulled:
    """Make the model's files (CPU model and/or compiled twin, labels) present and verified in the
    cache, then write its sidecar (labels, preprocessing) so commands need no flags."""
    rep = reporter or Reporter()
    wanted = entry.files(edgetpu=edgetpu, cpu=cpu)
    if not any(role != "labels" for role, _ in wanted):
        if not edgetpu:
            raise UsageError(f"{entry.name} has no CPU model: it is compiled for the Edge TPU only "
                             "(drop --cpu-only)")
        raise UsageError(f"{entry.name}: no model file to fetch")
    folder = models_dir(env)
    _mkdir(folder)
    out = []
    with _cache_lock(folder):
        verified = _Manifest(folder)
        for role, ref in wanted:
            path, how = _ensure(reg, ref, verified, rep, env)
            out.append(PulledFile(role, ref, path, how))
        pulled = Pulled(entry, out)
        side = sidecar_of(entry, env)
        fresh = any(f.how == "downloaded" for f in out) or (side is not None and not side.is_file())
        pulled.sidecar = _write_sidecar(entry, reg, pulled, env) if fresh else side
    return pulled


def _ensure(reg: Registry, ref: FileRef, verified: "_Manifest", rep: Reporter,
            env: Mapping[str, str]) -> tuple[Path, str]:
    dest = local_path(ref, env)
    if dest.is_file():
        if verified.holds(ref, dest):
            return dest, "cached"
        problem = mismatch(dest, ref)
        if problem is None:
            verified.record(ref, dest)
            return dest, "cached"
        rep.note(f"cached {ref.path} is not the published file ({problem}): downloading it again")
        _unlink(dest)
    _mkdir(dest.parent)
    url = url_of(reg, ref, env)
    part = dest.with_name(dest.name + ".part")
    download(url, part, ref.path, ref.size, rep, timeout_from_env(env))
    problem = mismatch(part, ref)
    if problem is not None:
        _unlink(part)
        raise VerificationError(f"{ref.path} from {url} is not the published file ({problem}); "
                                "the download was removed")
    os.replace(part, dest)
    verified.record(ref, dest)
    return dest, "downloaded"


# --- cache files -------------------------------------------------------------------------------

def _mkdir(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(folder, e) from None


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _write_text(path: Path, text: str) -> None:
    """Write through a temporary name, so readers never see half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        _unlink(tmp)
        raise write_error(path, e) from None


@contextlib.contextmanager
def _cache_lock(folder: Path) -> Iterator[None]:
    """One pull at a time per cache (parallel `edgeapp classify NAME` jobs on a fresh machine)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; concurrent pulls are unlikely there
        yield
        return
    try:
        f = open(folder / ".lock", "a")
    except OSError as e:
        raise write_error(folder / ".lock", e) from None
    with f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class ModelFileDoc(TypedDict):
    """One file of a registry model in `models list --format json`: where it comes from, what it
    must hash to, where it goes and whether it is there."""
    role: str  # cpu, edgetpu, segmentN, labels
    path: str
    size: Optional[int]
    sha256: Optional[str]
    git_blob_sha1: Optional[str]
    verified_by: str  # sha256 or git
    url: str
    local: str
    cached: bool


class ModelDoc(TypedDict):
    """One registry model in `models list --format json`."""
    name: str
    task: str
    description: str
    input: Optional[List[int]]
    size: Optional[int]
    cached: bool
    cached_models: List[str]
    needs_ops: List[str]
    published: Optional[Dict[str, Union[float, str]]]  # metric -> fraction, and its source
    files: List[ModelFileDoc]


class Stamp(TypedDict):
    """A file as it was when verified: its registry id, size and modification time."""
    id: str
    size: int
    mtime_ns: int


class _Manifest:
    """Files verified earlier: path -> registry id, size and mtime at verification."""

    def __init__(self, folder: Path) -> None:
        self.file = folder / MANIFEST
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        self.data: dict = data if isinstance(data, dict) else {}

    @staticmethod
    def _stamp(ref: FileRef, path: Path) -> Stamp:
        st = path.stat()
        return {"id": ref.expected_id, "size": st.st_size, "mtime_ns": st.st_mtime_ns}

    def holds(self, ref: FileRef, path: Path) -> bool:
        return self.data.get(ref.path) == self._stamp(ref, path)

    def record(self, ref: FileRef, path: Path) -> None:
        self.data[ref.path] = self._stamp(ref, path)
        _write_text(self.file, json.dumps(self.data, indent=1, sort_keys=True) + "\n")


def _write_sidecar(entry: ModelEntry, reg: Registry, pulled: Pulled,
                   env: Mapping[str, str]) -> Optional[Path]:
    """Labels and preprocessing beside the model, in the sidecar format `convert` writes."""
    target = sidecar_of(entry, env)
    model = pulled.path("cpu") or pulled.path("edgetpu")
    if target is None or model is None:
        return None
    labels_path = pulled.path("labels")
    labels = read_labels(labels_path) if labels_path else None
    if entry.preprocessing == "raw":  # mean = zero point, std = 1/scale: Coral's formula is q = p
        tensors = load_model(model).input_tensors
        scale, zero = tensors[0].quantization.per_tensor if tensors and tensors[0].quantization \
            else (0.0, 0)
        mean, std = (float(zero), 1.0 / scale) if scale else (0.0, 1.0)  # unquantized: as is
    else:
        norm: dict = entry.preprocessing  # type: ignore[assignment]
        mean, std = float(norm["mean"]), float(norm["std"])
    meta = ModelMeta(labels=labels, mean=mean, std=std, task=entry.task,
                     extra={"model": entry.name, "origin": f"{reg.source}@{reg.commit}".strip("@")})
    try:
        return write_sidecar(cpu_twin_path(model), meta)
    except OSError as e:
        raise write_error(target, e) from None


# --- what is cached, and what will run ----------------------------------------------------------

def cached_roles(entry: ModelEntry, env: Mapping[str, str] = os.environ) -> list[str]:
    """The model files (cpu, edgetpu, segmentN) present in the cache: a labels file, which
    several models share, makes no model cached."""
    return [role for role, ref in entry.files() if role != "labels" and local_path(ref, env).is_file()]


def cached_text(entry: ModelEntry, env: Mapping[str, str] = os.environ) -> str:
    """`models list`'s CACHED column: yes, -, cpu or edgetpu (one of the pair), partial."""
    have = cached_roles(entry, env)
    wanted = [role for role, _ in entry.files() if role != "labels"]
    if not have:
        return "-"
    if len(have) == len(wanted):
        return "yes"
    return have[0] if len(have) == 1 and not entry.is_pipeline else "partial"


# Custom operators the TFLite runtimes edgeapp uses provide (or the Edge TPU delegate runs).
PROVIDED_OPS = frozenset({"TFLite_Detection_PostProcess", "edgetpu-custom-op"})


def missing_ops(entry: ModelEntry, env: Mapping[str, str] = os.environ) -> list[str]:
    """Custom operators the model needs that no TFLite runtime edgeapp uses has (PoseNet's
    decoder): what the registry says, and what its cached files hold."""
    ops = list(entry.custom_ops)
    for role, ref in entry.files():
        path = local_path(ref, env)
        if role == "labels" or not path.is_file():
            continue
        try:
            ops += [op.op for op in load_model(path).operators if op.is_custom]
        except InvalidModel:
            continue  # said when it is used
    return sorted(set(ops) - PROVIDED_OPS)


def missing_ops_note(entry: ModelEntry, ops: list[str], runtimes: list[str]) -> str:
    """One line: which model needs what that the installed runtime lacks, and what its task
    suggests instead (TaskKind.instead_of_custom_ops)."""
    have = ", ".join(runtimes) or "no TFLite runtime"
    instead = tasks.kind(entry.task).instead_of_custom_ops if entry.task in tasks.names() else None
    return (f"{entry.name} needs the custom operator(s) {', '.join(ops)}, which the installed "
            f"TFLite runtime ({have}) lacks: `edgeapp {entry.task}` will refuse it"
            + (f"; {instead}" if instead else ""))


# --- MODEL arguments that name a registry model ------------------------------------------------

def looks_like_name(text: str) -> bool:
    """A bare word (no folder, no .tflite): what a user types for a registry model."""
    return bool(text) and "/" not in text and os.sep not in text and not text.endswith(".tflite")


def edgetpu_visible(env: Mapping[str, str] = os.environ) -> bool:
    """Whether any Edge TPU is attached (libedgetpu's list, else sysfs): no interpreter made."""
    return bool(list_edge_tpus(sysroot(None, env), edgetpu_library()))


def resolve(arg: str, device: str = "auto", reporter: Optional[Reporter] = None,
            env: Mapping[str, str] = os.environ) -> Optional[Resolution]:
    """The cached file for a MODEL argument that names a registry model (pulled when absent);
    None when `arg` is a path (existing or not) to leave to the caller.

    The twin rule: --device cpu takes the CPU model; an Edge TPU device the compiled twin; auto
    (and a TPU list or all) pull both and take the twin when an Edge TPU is attached, so opening it
    keeps today's fallback to the CPU twin; with no Edge TPU attached, auto takes the CPU model
    and says so.
    """
    if Path(arg).exists():
        return None
    reg = registry(env)
    entry = reg.models.get(arg)
    if entry is None:
        if looks_like_name(arg):
            raise InvalidModel(f"model not found: {arg} is neither a file nor a Coral model "
                               f"name{_did_you_mean(reg, arg)}")
        return None
    if entry.is_pipeline:
        raise UsageError(f"{arg} is a pipelined model ({len(entry.segments)} segments for "
                         f"{len(entry.segments)} Edge TPUs), which this command cannot run; "
                         f"`edgeapp models pull {arg}` fetches its segments")
    choice = parse_devices(device)  # several TPUs (a list, all): the twin, the CPU model beside it
    kind = "all" if choice.several else choice.single.kind
    notice = None
    if kind == "cpu" or entry.edgetpu is None:
        want_cpu, want_tpu, role = True, False, "cpu"
    elif kind == "edgetpu" or entry.cpu is None:
        want_cpu, want_tpu, role = False, True, "edgetpu"
    elif kind == "all" or edgetpu_visible(env):
        want_cpu, want_tpu, role = True, True, "edgetpu"
    else:
        want_cpu, want_tpu, role = True, False, "cpu"
        notice = (f"no Edge TPU found: running {Path(entry.cpu.path).name} (Coral's CPU build of "
                  f"{entry.name}) on CPU")
    rep = reporter or Reporter()
    missing = [ref for _, ref in entry.files(edgetpu=want_tpu, cpu=want_cpu)
               if not local_path(ref, env).is_file()]
    if missing:
        known = [r.size for r in missing]
        size = f", {format_bytes(sum(known))}" if None not in known else ""  # type: ignore[arg-type]
        rep.note(f"{arg} is not in the cache: pulling {len(missing)} file(s){size} from "
                 f"{host_of(url_of(reg, missing[0], env))} into {models_dir(env)}")
    pulled = pull(entry, reg, edgetpu=want_tpu, cpu=want_cpu, reporter=rep, env=env)
    path = pulled.path(role)
    assert path is not None
    return Resolution(path, entry, notice, pulled.files)
