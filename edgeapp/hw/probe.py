"""Crash-safe Edge TPU delegate: try each (TFLite runtime, libedgetpu file) pair in a child first.

Google's libedgetpu 16.0 was built against TensorFlow 2.5; with newer TFLite runtimes it can
segfault inside the delegate, which would kill edgeapp with no message. So before the main
process first loads the delegate of a pair, a child process (`python -m edgeapp.hw.probe_child`) loads
it, builds the interpreter for the user's model, allocates and invokes once on zeros. A child
killed by a signal, or silent past the timeout, marks the pair as crashing; the verdict is
cached in the user's cache directory, keyed by runtime name and version and by the library's
path, size and mtime, so the probe costs once per pair and a new build is probed again.

Pairs the pairing table (core/pairing.py) reports as crashing are refused before any child runs,
with the fix for this platform (core/install_plan.py); a cached "pass" outranks the table.

Only pair verdicts are cached ("pass", "crash", "hang"). A probe that fails cleanly (no Edge TPU
plugged in, a model the delegate rejects) says nothing about the pair and is not cached.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from edgeapp.core.userdirs import cache_dir

TIMEOUT_ENV = "EDGEAPP_PROBE_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0  # after the child is up: USB firmware upload + model upload + invoke
START_TIMEOUT_S = 120.0  # for the child to import the runtime (slow on a Raspberry Pi Zero)
MARK = "EDGEAPP_PROBE "  # prefixes the child's lines on stdout (probe_child.py)
FIX = "known build mismatch; install a matching pair (see README)"


@dataclass(frozen=True)
class Pair:
    """A TFLite runtime and one build of the Edge TPU library, as found on disk."""

    runtime: str
    runtime_version: str
    library: str  # real path of the file the loader opened
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, runtime: str, runtime_version: str, library: str) -> "Pair":
        st = os.stat(library)
        return cls(runtime, runtime_version, library, st.st_size, st.st_mtime_ns)

    @property
    def key(self) -> str:
        return f"{self.runtime} {self.runtime_version}|{self.library}|{self.size}|{self.mtime_ns}"


@dataclass(frozen=True)
class Verdict:
    status: str  # pass, crash, hang (cached); failed (not cached)
    message: str  # one line for the user ("" on pass)
    edgetpu_version: Optional[str] = None
    model: Optional[str] = None
    probed_at: Optional[str] = None

    @property
    def cacheable(self) -> bool:
        return self.status in ("pass", "crash", "hang")


class VerdictCache:
    """probe.json in the cache directory: {"verdicts": {pair key: pair fields + verdict}}."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / "probe.json"

    def entries(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text())
            return dict(data.get("verdicts", {}))
        except (OSError, ValueError, AttributeError):
            return {}  # absent or damaged: probe again

    def get(self, pair: Pair) -> Optional[Verdict]:
        entry = self.entries().get(pair.key)
        if not entry:
            return None
        return Verdict(entry["status"], entry.get("message", ""), entry.get("edgetpu_version"),
                       entry.get("model"), entry.get("probed_at"))

    def put(self, pair: Pair, verdict: Verdict) -> None:
        entries = self.entries()
        entries[pair.key] = {**asdict(pair), **asdict(verdict)}
        self._write(entries)

    def clear(self) -> int:
        n = len(self.entries())
        self._write({})
        return n

    def _write(self, entries: dict) -> None:
        try:  # atomic: concurrent edgeapp processes never see half a file
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".probe-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump({"verdicts": entries}, f, indent=1, sort_keys=True)
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


def ensure_probed(runtime: Any, spec: Any, model_path: str) -> None:
    """Return when the delegate may be loaded in this process; raise DeviceUnavailable if not.

    `runtime` and `spec` are runtime.Runtime and runtime.DeviceSpec. When the library does not
    load at all there is nothing to probe: loading the delegate fails with the install hint.
    """
    from edgeapp.errors import DeviceUnavailable
    from edgeapp.hw.libedgetpu import build_label, edgetpu_library, known_crash, open_library

    try:
        lib, path = open_library(edgetpu_library())
        pair = Pair.of(runtime.name, runtime.version, path)
    except OSError:
        return
    cache = VerdictCache(cache_dir())
    verdict = cache.get(pair)
    if verdict is None or verdict.status != "pass":  # a pair reported to crash: no child runs
        refusal = known_crash(lib, path, runtime.name, runtime.version)
        if refusal:
            raise DeviceUnavailable(refusal)
    if verdict is None:
        device = spec.text if spec.kind == "edgetpu" else "edgetpu"
        verdict = probe(pair, device, model_path, build_label(lib))
        if verdict.cacheable:
            cache.put(pair, verdict)
    elif verdict.status != "pass":
        verdict = Verdict(verdict.status, f"{verdict.message} (verdict cached {verdict.probed_at}; "
                                          "`edgeapp doctor --forget-probes` to probe again)")
    if verdict.status != "pass":
        raise DeviceUnavailable(verdict.message)


def probe(pair: Pair, device: str, model_path: str, raw_version: Optional[str] = None,
          timeout: Optional[float] = None) -> Verdict:
    """Run the child and judge it. The child prints `ready` once imported, then one JSON result."""
    if timeout is None:
        timeout = _timeout_from_env()
    cmd = [sys.executable, "-m", "edgeapp.hw.probe_child", str(model_path), device, pair.runtime]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                text=True)
        result, ready, hung = _read_child(proc, timeout)
        if hung:
            proc.kill()
        rc = proc.wait()
        err.seek(0)
        stderr = [ln for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]

    def verdict(status: str, message: str) -> Verdict:
        return Verdict(status, message, raw_version, str(Path(model_path).resolve()), stamp)

    if hung and not ready:  # slow imports say nothing about the pair
        return verdict("failed", f"Edge TPU probe process did not start within {START_TIMEOUT_S:g} s")
    if hung:
        return verdict("hang", crash_message(pair, raw_version, f"hung: no answer in {timeout:g} s"))
    if rc < 0 or rc >= 0xC0000000:  # POSIX: killed by a signal; Windows: an NTSTATUS exception
        how = f"killed by {signal.Signals(-rc).name}" if rc < 0 and 0 < -rc < signal.NSIG \
            else f"died with status {rc:#x}"
        return verdict("crash", crash_message(pair, raw_version, how))
    if result is None:
        last = stderr[-1] if stderr else "no output"
        return verdict("failed", f"Edge TPU probe process failed (exit {rc}): {last}")
    return verdict(result["status"], result.get("message", ""))


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


def _read_child(proc: subprocess.Popen, timeout: float) -> tuple[Optional[dict], bool, bool]:
    """(the child's result or None, whether it got ready, whether it stopped answering)."""
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline, result, ready = time.monotonic() + START_TIMEOUT_S, None, False
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return result, ready, True
        if line is None:
            return result, ready, False
        if line == MARK + "ready":
            deadline, ready = time.monotonic() + timeout, True
        elif line.startswith(MARK):
            result = json.loads(line[len(MARK):])
