"""Containment: a model file reaches the native runtime in this process only after a child ran it.

Native TFLite runtimes trust the file: a corrupt or hostile model can segfault or abort them,
and Google's libedgetpu 16.0 (built against TensorFlow 2.5) can segfault inside newer runtimes.
No validator can list every way a flatbuffer breaks native code, so before this process first
builds an interpreter for a model, a child process builds it, allocates its tensors, invokes it
once on zeros and tears it down. A child killed by a signal or silent past the timeout makes
the model (or the Edge TPU library) refused with one line instead of killing edgeapp.

Verdicts are cached in the user's cache directory (probe.json), keyed by content hashes, so the
check costs once per file:
- a model verdict by the model's SHA-256, the runtime's name and version, and for the Edge TPU
  the library's SHA-256 ("pass", "crash", "hang", or "invalid" with the runtime's message);
- a pair verdict (runtime, Edge TPU library) by the library's SHA-256: a library that crashes
  whatever the model makes the Edge TPU unavailable ("pass", "crash", "hang").
A clean failure that depends on the machine (no Edge TPU plugged in) is never cached.

The child is a fork of this process when no other Python thread runs (Linux; no imports to
repeat), else `python -I` (isolated: the working directory is not on sys.path) with edgeapp's
own folder put first; a crash or hang seen in a fork is confirmed in such a fresh child before
it is believed. EDGEAPP_TRUST_MODEL=1 skips the model check (scripts loading
the same model thousands of times); --no-probe skips the delegate probe.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from edgeapp.core.userdirs import cache_dir

TIMEOUT_ENV = "EDGEAPP_PROBE_TIMEOUT"
TRUST_ENV = "EDGEAPP_TRUST_MODEL"
SPAWN_ENV = "EDGEAPP_PROBE_SPAWN"  # "1": always a fresh interpreter, never a fork
DEFAULT_TIMEOUT_S = 30.0  # after the child is up: USB firmware upload + model upload + invoke
START_TIMEOUT_S = 120.0  # for a fresh child to import the runtime (slow on a Raspberry Pi Zero)
MAX_MODEL_VERDICTS = 2000  # oldest forgotten first
MARK = "EDGEAPP_PROBE "  # prefixes the child's lines (probe_child.py prints them when spawned)
FIX = "known build mismatch; install a matching pair (see README)"
MODEL_FIX = "the file is corrupt or uses an unsupported feature"
CACHED_NOTE = "`edgeapp doctor --forget-probes` to probe again"
_PATHMARK = "{model}"  # in cached model messages: the path of the file as given this time


def file_sha256(path: str) -> str:
    """Content hash, read in blocks (never the whole file in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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


class VerdictCache:
    """probe.json in the cache directory: {"verdicts": {pair key: ...}, "models": {model key: ...}}."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / "probe.json"

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
            return {k: dict(data.get(k, {})) for k in ("verdicts", "models", "files")}
        except (OSError, ValueError, AttributeError, TypeError):
            return {"verdicts": {}, "models": {}, "files": {}}  # absent or damaged: probe again

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
        data["verdicts"][pair.key] = {**asdict(pair), **asdict(verdict)}
        self._write(data)

    def put_model(self, key: ModelKey, verdict: Verdict, path: str) -> None:
        data = self._load()
        models = data["models"]
        models.pop(key.key, None)
        entry = {**asdict(key), **asdict(verdict)}
        entry["message"] = verdict.message.replace(str(path), _PATHMARK)
        models[key.key] = entry
        while len(models) > MAX_MODEL_VERDICTS:  # insertion order: the oldest first
            models.pop(next(iter(models)))
        self._write(data)

    def clear(self) -> int:
        data = self._load()
        n = len(data["verdicts"]) + len(data["models"])
        self._write({"verdicts": {}, "models": {}, "files": {}})
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


def edgetpu_label(library: str, raw_version: Optional[str]) -> str:
    """How users name the Edge TPU runtime: the Debian version when dpkg knows the file."""
    from edgeapp.hw.libedgetpu import dpkg_owner, short_version

    owner = dpkg_owner(library)
    if owner:
        return f"{owner[1]} ({owner[0]})"
    return short_version(raw_version) or f"of unknown version ({library})"


def crash_message(pair: Pair, raw_version: Optional[str], how: str) -> str:
    return (f"Edge TPU runtime {edgetpu_label(pair.library, raw_version)} crashed under "
            f"{pair.runtime} {pair.runtime_version}: {FIX} [probe {how}; {pair.library}]")


def trusted() -> bool:
    return os.environ.get(TRUST_ENV, "").strip().lower() in ("1", "true", "yes", "on")


# --- the checks open_model calls ---------------------------------------------------------


def ensure_model_runs(runtime: Any, model_path: str) -> None:
    """Return when `model_path` may be run on the CPU in this process; raise InvalidModel if not."""
    from edgeapp.errors import InvalidModel

    if trusted():
        return
    cache = VerdictCache(cache_dir())
    key = ModelKey(cache.sha256(model_path), runtime.name, runtime.version)
    verdict = cache.get_model(key, model_path)
    if verdict is not None:
        verdict = verdict.cached()
    else:
        verdict = _judge_model(runtime, model_path, probe(runtime, model_path))
        if verdict.cacheable:
            cache.put_model(key, verdict, model_path)
    if verdict.status != "pass":
        raise InvalidModel(verdict.message)


def ensure_probed(runtime: Any, spec: Any, model_path: str, load_delegate: Callable[[], Any], *,
                  check_model: bool = True) -> None:
    """Return when the Edge TPU delegate may run `model_path` in this process.

    Raises DeviceUnavailable when the delegate cannot be used (no Edge TPU, a pair the pairing
    table knows to crash, a crashing library build) and InvalidModel when this model crashes a
    library that runs other models. The library is never loaded into this process first: a
    child reads its build label for the pairing table, another loads the delegate.
    `load_delegate()` loads it (called in a forked child).
    """
    from edgeapp.errors import DeviceUnavailable, InvalidModel
    from edgeapp.hw.libedgetpu import edgetpu_library, explain_load_error

    name = edgetpu_library()
    path = find_library_file(name)
    if path is None and sys.platform.startswith("linux") and os.sep not in name:
        # not installed: nothing to probe
        raise DeviceUnavailable(explain_load_error(f"{name}: cannot open shared object file", name))
    cache = VerdictCache(cache_dir())
    pair = Pair(runtime.name, runtime.version, path, cache.sha256(path)) if path else None
    known = cache.get(pair) if pair else None
    if known is not None and known.status != "pass":
        raise DeviceUnavailable(known.cached().message)
    if known is None:  # the pairing table, before any delegate is created (a cached pass outranks it)
        label = read_label(runtime, name)
        if label.hung or label.died:
            how = f"hung: no answer in {label.timeout:g} s" if label.hung else f"killed by {label.how}"
            target = pair or Pair(runtime.name, runtime.version, label.library or name, "")
            verdict = Verdict("hang" if label.hung else "crash",
                              crash_message(target, None, f"{how} while loading it"), None, None,
                              label.probed_at, label.stage)
            if pair is not None:
                cache.put(pair, verdict)
            raise DeviceUnavailable(verdict.message)
        if label.result is None or label.result.get("status") != "pass":
            raise DeviceUnavailable((label.result or {}).get("message") or f"cannot load {name}")
        refusal = known_crash(path or label.library or name, label.edgetpu_version, runtime)
        if refusal:
            raise DeviceUnavailable(refusal)
    key = None
    if pair is not None and check_model and not trusted():
        key = ModelKey(cache.sha256(model_path), runtime.name, runtime.version, pair.sha256)
        verdict = cache.get_model(key, model_path)
        if verdict is not None:
            if verdict.status != "pass":
                raise InvalidModel(verdict.cached().message)
            return
    elif known is not None:  # pair passed; this model is not to be checked
        return
    device = spec.text if spec.kind == "edgetpu" else "edgetpu"
    result = probe(runtime, model_path, device, library=name, load_delegate=load_delegate)
    if pair is None and result.library:  # the loader found it where we could not: key it now
        pair = Pair.of(runtime.name, runtime.version, result.library)
    verdict = _judge_delegate(runtime, model_path, result, pair, known)
    if verdict.status in ("pass", "crash", "hang") and pair is not None:
        is_pair_fault = verdict.status != "pass" and (known is None or result.stage in _LIBRARY_STAGES)
        if verdict.status == "pass" or is_pair_fault:
            cache.put(pair, Verdict(verdict.status, verdict.message, result.edgetpu_version,
                                    verdict.model, verdict.probed_at, verdict.stage))
        if verdict.status != "pass" and not is_pair_fault:
            verdict = Verdict(verdict.status, _model_crash_message(runtime, model_path, result, delegate=True),
                              verdict.edgetpu_version, verdict.model, verdict.probed_at, verdict.stage)
        if key is not None and (verdict.status == "pass" or not is_pair_fault):
            cache.put_model(key, verdict, model_path)
        if verdict.status != "pass" and not is_pair_fault:
            raise InvalidModel(verdict.message)
    if verdict.status != "pass":
        raise DeviceUnavailable(verdict.message)


def known_crash(library: str, label: Optional[str], runtime: Any, root: str = "/") -> Optional[str]:
    """The pairing table's one line when this build (its Debian package, else `label`) is known to
    crash under `runtime`, with this platform's fix; else None."""
    from edgeapp.core.pairing import CRASH, decide, identify
    from edgeapp.hw.libedgetpu import dpkg_owner

    decision = decide(identify(dpkg_owner(library, root), label), runtime.name, runtime.version)
    if decision.verdict != CRASH:
        return None
    from edgeapp.core.install_plan import plan_for
    from edgeapp.hw.osinfo import read_platform

    return f"{decision.summary()}; fix: {plan_for(read_platform(root)).fix}"


# --- running the child and judging it -------------------------------------------------------

_LIBRARY_STAGES = ("loading the Edge TPU library", "loading the Edge TPU delegate")


@dataclass
class ChildResult:
    ready: bool = False
    hung: bool = False
    returncode: Optional[int] = None
    stage: Optional[str] = None
    result: Optional[dict] = None
    edgetpu_version: Optional[str] = None
    library: Optional[str] = None
    stderr: tuple = ()
    timeout: float = 0.0
    probed_at: str = ""

    @property
    def signal_name(self) -> Optional[str]:
        rc = self.returncode
        if rc is not None and rc < 0:
            try:  # not signal.valid_signals(): Python 3.8+
                return signal.Signals(-rc).name
            except ValueError:
                return None
        return None

    @property
    def died(self) -> bool:
        """Killed by a signal (or, on Windows, an NTSTATUS exception), or a native exit()."""
        rc = self.returncode
        if rc is None or self.hung:
            return False
        return rc < 0 or rc >= 0xC0000000 or (self.ready and self.result is None and rc != 0)

    @property
    def how(self) -> str:
        if self.signal_name:
            return self.signal_name
        return f"exit status {self.returncode:#x}" if self.returncode and self.returncode >= 0xC0000000 \
            else f"exit status {self.returncode}"


def probe(runtime: Any, model_path: str, device: Optional[str] = None, library: Optional[str] = None,
          load_delegate: Optional[Callable[[], Any]] = None, timeout: Optional[float] = None) -> ChildResult:
    """Build, allocate, invoke and release `model_path` once in a child; report what happened."""
    args = [str(model_path), runtime.name, device or "cpu", library or ""]
    return _run_child(args, lambda emit: run_child(runtime, str(model_path), library, load_delegate, emit),
                      timeout)


def read_label(runtime: Any, library: str, timeout: Optional[float] = None) -> ChildResult:
    """Load the Edge TPU library in a child and read its build label (the pairing table needs it)."""
    return _run_child(["--label", library, runtime.name], lambda emit: label_child(library, emit), timeout)


def _run_child(args: list[str], work: Callable[[Callable[[str], None]], int],
               timeout: Optional[float]) -> ChildResult:
    if timeout is None:
        timeout = _timeout_from_env()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if _can_fork():
        out = _forked(work, timeout)
        if out.hung or out.died:  # a fork carries its parent's state: a fresh child confirms
            out = _spawned(args, timeout)
    else:
        out = _spawned(args, timeout)
    out.timeout, out.probed_at = timeout, stamp
    return out


def _judge_model(runtime: Any, model_path: str, r: ChildResult) -> Verdict:
    from edgeapp.errors import MissingDependency

    def verdict(status: str, message: str) -> Verdict:
        return Verdict(status, message, None, str(Path(model_path).resolve()), r.probed_at, r.stage)

    if r.hung and not r.ready:
        raise MissingDependency(f"the model check process did not start within {START_TIMEOUT_S:g} s "
                                f"(importing {runtime.name}); {TRUST_ENV}=1 skips the check")
    if r.hung or r.died:
        return verdict("hang" if r.hung else "crash", _model_crash_message(runtime, model_path, r))
    if r.result is None:
        last = r.stderr[-1] if r.stderr else "no output"
        raise MissingDependency(f"the model check process failed (exit {r.returncode}): {last}")
    return verdict(r.result["status"], r.result.get("message", ""))


def _judge_delegate(runtime: Any, model_path: str, r: ChildResult, pair: Optional[Pair],
                    known: Optional[Verdict]) -> Verdict:
    def verdict(status: str, message: str) -> Verdict:
        return Verdict(status, message, r.edgetpu_version, str(Path(model_path).resolve()),
                       r.probed_at, r.stage)

    if r.hung and not r.ready:  # slow imports say nothing about the pair
        return verdict("failed", f"Edge TPU probe process did not start within {START_TIMEOUT_S:g} s")
    if r.hung or r.died:
        how = f"hung: no answer in {r.timeout:g} s" if r.hung else f"killed by {r.how}" \
            if r.signal_name else f"died with {r.how}"
        target = pair or Pair(runtime.name, runtime.version, r.library or "libedgetpu", "")
        return verdict("hang" if r.hung else "crash", crash_message(target, r.edgetpu_version, how))
    if r.result is None:
        last = r.stderr[-1] if r.stderr else "no output"
        return verdict("failed", f"Edge TPU probe process failed (exit {r.returncode}): {last}")
    status = r.result["status"]
    return verdict("failed" if status == "invalid" else status, r.result.get("message", ""))


def _model_crash_message(runtime: Any, model_path: str, r: ChildResult, delegate: bool = False) -> str:
    what = f"the TFLite runtime {runtime.name} {runtime.version}"
    if delegate:
        what += " with the Edge TPU delegate"
    stage = f" while {r.stage}" if r.stage else ""
    if r.hung:
        return f"{model_path} hangs {what} (no answer in {r.timeout:g} s){stage}; {MODEL_FIX}"
    return f"{model_path} crashes {what} ({r.how}){stage}; {MODEL_FIX}"


def _timeout_from_env() -> float:
    from edgeapp.errors import UsageError

    text = os.environ.get(TIMEOUT_ENV) or str(DEFAULT_TIMEOUT_S)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise UsageError(f"{TIMEOUT_ENV} must be a number of seconds > 0, not {text!r}")
    return value


def _can_fork() -> bool:
    """Fork on Linux when no other Python thread runs (idle native pools, OpenBLAS's, are fine:
    the child never calls into them); a crash or hang seen in a fork is confirmed by a spawn."""
    return sys.platform.startswith("linux") and os.environ.get(SPAWN_ENV) != "1" and \
        threading.active_count() == 1


def _forked(work: Callable[[Callable[[str], None]], int], timeout: float) -> ChildResult:
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 70
            try:
                os.close(read_fd)
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 0)
                os.dup2(null, 1)
                os.dup2(err.fileno(), 2)

                def emit(line: str) -> None:
                    os.write(write_fd, (MARK + line + "\n").encode())

                code = work(emit)
            finally:
                os._exit(code)
        os.close(write_fd)
        try:
            out = _collect(pid, read_fd, timeout, ready_timeout=START_TIMEOUT_S)
        finally:
            os.close(read_fd)
        out.stderr = _lines(err)
    return out


def _spawned(args: list[str], timeout: float) -> ChildResult:
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(child_command(args), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err)
        try:
            out = _collect(proc.pid, proc.stdout.fileno(), timeout, ready_timeout=START_TIMEOUT_S,
                           proc=proc)
        finally:
            proc.stdout.close()
        out.stderr = _lines(err)
    return out


def child_command(args: list[str]) -> list[str]:
    """`python -I` running this module's child: the working directory never shadows a module."""
    from edgeapp.hw.proc import isolated_python, log_command

    cmd = isolated_python("from edgeapp.hw.probe_child import main; main()", *args)
    log_command(cmd)
    return cmd


def _lines(err: Any) -> tuple:
    err.seek(0)
    return tuple(ln for ln in err.read().decode("utf-8", "replace").splitlines() if ln.strip())


def _collect(pid: int, fd: int, timeout: float, ready_timeout: float,
             proc: Optional[subprocess.Popen] = None) -> ChildResult:
    """Read the child's lines until EOF or a deadline; kill it if it is late; reap it.

    A thread reads the pipe (select() does not take pipes on Windows) and ends at EOF, which the
    child's exit guarantees; it is joined before returning, so the next check may fork again.
    """
    out = ChildResult()
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for raw in complete:
                lines.put(raw.decode("utf-8", "replace"))
        lines.put(None)

    reader = threading.Thread(target=pump, name="edgeapp-probe-reader", daemon=True)
    reader.start()
    deadline = time.monotonic() + ready_timeout
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                out.hung = True
                break
            if line is None:
                break
            if not line.startswith(MARK):
                continue
            word, _, rest = line[len(MARK):].partition(" ")
            if word == "ready":
                out.ready, deadline = True, time.monotonic() + timeout
            elif word == "stage":
                out.stage = rest
            elif word == "library":
                info = json.loads(rest)
                out.library, out.edgetpu_version = info.get("path"), info.get("version")
            elif word == "result":
                out.result = json.loads(rest)
    except BaseException:  # Ctrl-C while waiting: the child goes too
        _kill(pid, proc)
        reader.join(timeout=5)
        raise
    if out.hung:
        _kill(pid, proc)
    out.returncode = proc.wait() if proc is not None else _reap(pid)
    reader.join(timeout=5)
    return out


def _kill(pid: int, proc: Optional[subprocess.Popen]) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    if proc is not None:
        proc.wait()
    else:
        _reap(pid)


def _reap(pid: int) -> Optional[int]:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


# --- the child ----------------------------------------------------------------------------------


def _child_setup() -> None:
    try:  # a crash here is expected, and no reason to leave a core file behind
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent answers Ctrl-C and kills us
    except (ValueError, OSError):
        pass


def run_child(rt: Any, model_path: str, library: Optional[str], load_delegate: Optional[Callable[[], Any]],
              emit: Callable[[str], None]) -> int:
    """Everything the main process would do with the model (and the delegate), once."""
    _child_setup()
    emit("ready")
    try:
        result = _child_steps(rt, model_path, library, load_delegate, emit)
    except BaseException as e:  # noqa: BLE001 - reported, never raised in a child
        result = {"status": "failed", "message": f"{type(e).__name__}: {e}"}
    emit("result " + json.dumps(result))
    return 0


def label_child(library: str, emit: Callable[[str], None]) -> int:
    """Load the library and say what it is: its file and its build label."""
    _child_setup()
    emit("ready")
    try:
        result = _load_library(library, emit) or {"status": "pass"}
    except BaseException as e:  # noqa: BLE001
        result = {"status": "failed", "message": f"{type(e).__name__}: {e}"}
    emit("result " + json.dumps(result))
    return 0


def _load_library(library: str, emit: Callable[[str], None]) -> Optional[dict]:
    """None when loaded (and reported), else the failed result."""
    from edgeapp.hw.libedgetpu import build_label, explain_load_error, open_library

    emit("stage loading the Edge TPU library")
    try:
        lib, path = open_library(library)
    except OSError as e:
        return {"status": "failed", "message": explain_load_error(str(e), library)}
    emit("library " + json.dumps({"path": path, "version": build_label(lib)}))
    return None


def _child_steps(rt: Any, model_path: str, library: Optional[str], load_delegate: Optional[Callable[[], Any]],
                 emit: Callable[[str], None]) -> dict:
    import gc

    import numpy as np

    from edgeapp.errors import EdgeappError
    from edgeapp.hw.runtime_errors import runtime_error_text

    delegates = None
    if library and load_delegate is not None:
        failed = _load_library(library, emit)
        if failed:
            return failed
        emit("stage loading the Edge TPU delegate")
        try:
            delegates = [load_delegate()]
        except EdgeappError as e:
            return {"status": "failed", "message": str(e)}
    steps = ("building the interpreter", "allocating tensors", "invoking", "releasing the interpreter")
    interpreter = None
    try:
        emit("stage " + steps[0])
        interpreter = rt.make_interpreter(model_path, delegates)
        emit("stage " + steps[1])
        interpreter.allocate_tensors()
        emit("stage " + steps[2])
        for d in interpreter.get_input_details():
            interpreter.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        interpreter.invoke()
        for d in interpreter.get_output_details():
            interpreter.get_tensor(d["index"])
    except Exception as e:  # noqa: BLE001 - the runtime's own refusal, said cleanly
        text = runtime_error_text(e)
        if delegates:
            return {"status": "failed", "message": f"Edge TPU rejected {model_path}: {text}"}
        return {"status": "invalid", "message": f"{rt.name} {rt.version} cannot run {model_path}: {text}"}
    emit("stage " + steps[3])
    interpreter = delegates = None  # tear the delegate down before reporting: a crash there counts
    gc.collect()
    return {"status": "pass"}


# --- where the loader would find the Edge TPU library, without loading it --------------------


def find_library_file(name: str) -> Optional[str]:
    """The file the dynamic loader would open for `name`, found without opening it (None: not found)."""
    if os.sep in name or (os.altsep and os.altsep in name):
        return os.path.realpath(name) if os.path.isfile(name) else None
    for folder in _library_dirs():
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return os.path.realpath(candidate)
    return None


def _library_dirs() -> list[str]:
    if sys.platform == "win32":
        return [os.path.dirname(sys.executable)] + os.environ.get("PATH", "").split(os.pathsep)
    if sys.platform == "darwin":
        env = os.environ.get("DYLD_LIBRARY_PATH", "").split(os.pathsep)
        return [d for d in env if d] + ["/usr/local/lib", "/opt/homebrew/lib", "/usr/lib"]
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    dirs += _ld_so_conf("/etc/ld.so.conf", set())
    multiarch = sysconfig.get_config_var("MULTIARCH")
    for base in ("/lib", "/usr/lib"):
        if multiarch:
            dirs.append(f"{base}/{multiarch}")
        dirs.append(base)
    dirs += ["/lib64", "/usr/lib64", "/usr/local/lib"]
    return dirs


def _ld_so_conf(path: str, seen: set) -> list[str]:
    """Folders named by the loader's configuration (include lines followed)."""
    import glob

    if path in seen:
        return []
    seen.add(path)
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    dirs: list[str] = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line.startswith("include"):
            pattern = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
            if pattern and not os.path.isabs(pattern):
                pattern = os.path.join(os.path.dirname(path), pattern)
            for conf in sorted(glob.glob(pattern)):
                dirs += _ld_so_conf(conf, seen)
        elif line:
            dirs.append(line)
    return dirs
