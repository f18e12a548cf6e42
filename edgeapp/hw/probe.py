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
A clean failure that depends on the machine (no Edge TPU plugged in) is never cached, and
neither is a crash or hang that edgeapp's own known-good model (known_good.py) suffers too: then
the runtime is broken on this machine, said as such, and no file is blamed.

The child is a fork of this process when no other Python thread runs (Linux; no imports to
repeat), else `python -I` (isolated: the working directory is not on sys.path) with edgeapp's
own folder put first; a crash or hang seen in a fork is confirmed in such a fresh child before
it is believed. EDGEAPP_TRUST_MODEL=1 skips the model check (scripts loading
the same model thousands of times); --no-probe skips the delegate probe.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from edgeapp.core.userdirs import cache_dir
from edgeapp.errors import DeviceUnavailable, InvalidModel, MissingDependency
from edgeapp.hw.child import (
    START_TIMEOUT_S,
    ChildResult,
    TfliteRuntime,
    label_child,
    run_child,
    run_in_child,
)
from edgeapp.hw.libedgetpu import (
    dpkg_owner,
    edgetpu_library,
    explain_load_error,
    find_library_file,
    known_crash,
    short_version,
)
from edgeapp.hw.runtime_errors import numpy_mismatch, numpy_mismatch_text
from edgeapp.hw.verdicts import ModelKey, Pair, Verdict, VerdictCache

if TYPE_CHECKING:
    from edgeapp.hw.device_choice import DeviceSpec

TRUST_ENV = "EDGEAPP_TRUST_MODEL"
FIX = "known build mismatch; install a matching pair (`edgeapp doctor` prints one; docs/install.md)"
MODEL_FIX = "the file is corrupt or uses an unsupported feature"


def edgetpu_label(library: str, raw_version: Optional[str]) -> str:
    """How users name the Edge TPU runtime: the Debian version when dpkg knows the file."""
    owner = dpkg_owner(library)
    if owner:
        return f"{owner[1]} ({owner[0]})"
    return short_version(raw_version) or f"of unknown version ({library})"


def crash_message(pair: Pair, raw_version: Optional[str], how: str) -> str:
    return (f"Edge TPU runtime {edgetpu_label(pair.library, raw_version)} crashed under "
            f"{pair.runtime} {pair.runtime_version}: {FIX} [probe {how}; {pair.library}]")


def trusted() -> bool:
    return os.environ.get(TRUST_ENV, "").strip().lower() in ("1", "true", "yes", "on")


# --- the checks open_engine calls ---------------------------------------------------------


def ensure_model_runs(runtime: TfliteRuntime, model_path: str) -> None:
    """Return when `model_path` may be run on the CPU in this process; raise InvalidModel if not
    (MissingDependency when the runtime itself dies on every model)."""
    if trusted():
        return
    cache = VerdictCache(cache_dir())
    key = ModelKey(cache.sha256(model_path), runtime.name, runtime.version)
    verdict = cache.get_model(key, model_path)
    if verdict is not None:
        verdict = verdict.cached()
    else:
        verdict = _judge_model(runtime, model_path, probe(runtime, model_path))
        if verdict.status in ("crash", "hang"):
            blame_a_broken_runtime(runtime, model_path)
        if verdict.cacheable:
            cache.put_model(key, verdict, model_path)
    if verdict.status != "pass":
        raise InvalidModel(verdict.message)


def blame_a_broken_runtime(runtime: TfliteRuntime, model_path: str) -> None:
    """`model_path` crashed (or hung) the runtime: raise MissingDependency, caching nothing,
    when edgeapp's own known-good model does the same, for then the runtime is at fault."""
    from edgeapp.hw.known_good import known_good_file

    with known_good_file() as good:
        r = probe(runtime, good)
    if not (r.hung or r.died):
        return  # the runtime runs a good model: the file is to blame
    how = f"no answer in {r.timeout:g} s" if r.hung else r.how
    stage = f" while {r.stage}" if r.stage else ""
    raise MissingDependency(
        f"the TFLite runtime {runtime.name} {runtime.version} dies on every model here, also on "
        f"edgeapp's own known-good one ({how}{stage}), so {model_path} is not to blame and no "
        "verdict was cached against it; the runtime does not work on this machine (seen when the "
        "CPU it detects is not the one it runs on): `edgeapp doctor` checks the install; "
        f"reinstall it (pip install --force-reinstall {runtime.name}) or try another with --runtime")


def ensure_probed(runtime: TfliteRuntime, spec: DeviceSpec, model_path: str, load_delegate: Callable[[], object], *,
                  check_model: bool = True) -> None:
    """Return when the Edge TPU delegate may run `model_path` in this process.

    Raises DeviceUnavailable when the delegate cannot be used (no Edge TPU, a pair the pairing
    table knows to crash, a crashing library build) and InvalidModel when this model crashes a
    library that runs other models. The library is never loaded into this process first: a
    child reads its build label for the pairing table, another loads the delegate.
    `load_delegate()` loads it (called in a forked child).
    """
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
        _check_pairing(runtime, name, path, pair, cache)
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
    _probe_delegate(runtime, spec, model_path, load_delegate, _Probing(name, cache, pair, known, key))


class _Probing:
    """What ensure_probed knows when it has to run the delegate probe."""

    def __init__(self, library: str, cache: VerdictCache, pair: Optional[Pair], known: Optional[Verdict],
                 key: Optional[ModelKey]) -> None:
        self.library, self.cache, self.pair, self.known, self.key = library, cache, pair, known, key


def _check_pairing(runtime: TfliteRuntime, name: str, path: Optional[str], pair: Optional[Pair],
                   cache: VerdictCache) -> None:
    """The library's build label read in a child, then the pairing table: DeviceUnavailable when
    the library dies while loading, fails to load, or is a build known to crash this runtime."""
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
    refusal = known_crash(None, path or label.library or name, runtime.name, runtime.version, "/",
                          label=label.edgetpu_version)
    if refusal:
        raise DeviceUnavailable(refusal)


def _probe_delegate(runtime: TfliteRuntime, spec: DeviceSpec, model_path: str, load_delegate: Callable[[], object],
                    p: _Probing) -> None:
    """Run the model with the delegate in a child; cache what that proved (of the pair, of this
    model), and raise what it means for this run."""
    device = spec.text if spec.kind == "edgetpu" else "edgetpu"
    result = probe(runtime, model_path, device, library=p.library, load_delegate=load_delegate)
    pair = p.pair
    if pair is None and result.library:  # the loader found it where we could not: key it now
        pair = Pair.of(runtime.name, runtime.version, result.library)
    verdict = _judge_delegate(runtime, model_path, result, pair, p.known)
    if verdict.status in ("crash", "hang") and pair is not None:
        blame_a_broken_runtime(runtime, model_path)  # dies without the delegate too: not the pair
    model_fault = False
    if verdict.status in ("pass", "crash", "hang") and pair is not None:
        model_fault = verdict.status != "pass" and p.known is not None and \
            result.stage not in _LIBRARY_STAGES
        if not model_fault:  # a pass, or the pair's fault whatever the model
            p.cache.put(pair, Verdict(verdict.status, verdict.message, result.edgetpu_version,
                                      verdict.model, verdict.probed_at, verdict.stage))
        else:
            message = _model_crash_message(runtime, model_path, result, delegate=True)
            verdict = Verdict(verdict.status, message, verdict.edgetpu_version, verdict.model,
                              verdict.probed_at, verdict.stage)
        if p.key is not None and (verdict.status == "pass" or model_fault):
            p.cache.put_model(p.key, verdict, model_path)
    if model_fault:
        raise InvalidModel(verdict.message)
    if verdict.status != "pass":
        raise DeviceUnavailable(verdict.message)


# --- running the child and judging it -------------------------------------------------------

_LIBRARY_STAGES = ("loading the Edge TPU library", "loading the Edge TPU delegate")


def probe(runtime: TfliteRuntime, model_path: str, device: Optional[str] = None, library: Optional[str] = None,
          load_delegate: Optional[Callable[[], object]] = None, timeout: Optional[float] = None) -> ChildResult:
    """Build, allocate, invoke and release `model_path` once in a child; report what happened."""
    args = [str(model_path), runtime.name, device or "cpu", library or ""]
    return run_in_child(args, lambda emit: run_child(runtime, str(model_path), library, load_delegate, emit),
                      timeout)


def read_label(runtime: TfliteRuntime, library: str, timeout: Optional[float] = None) -> ChildResult:
    """Load the Edge TPU library in a child and read its build label (the pairing table needs it)."""
    return run_in_child(["--label", library, runtime.name], lambda emit: label_child(library, emit), timeout)


def _judge_model(runtime: TfliteRuntime, model_path: str, r: ChildResult) -> Verdict:
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
    if r.result["status"] != "pass" and numpy_mismatch(" ".join([r.result.get("message", ""), *r.stderr])):
        raise MissingDependency(numpy_mismatch_text(runtime.name, runtime.version))  # nothing cached
    return verdict(r.result["status"], r.result.get("message", ""))


def _judge_delegate(runtime: TfliteRuntime, model_path: str, r: ChildResult, pair: Optional[Pair],
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


def _model_crash_message(runtime: TfliteRuntime, model_path: str, r: ChildResult, delegate: bool = False) -> str:
    what = f"the TFLite runtime {runtime.name} {runtime.version}"
    if delegate:
        what += " with the Edge TPU delegate"
    stage = f" while {r.stage}" if r.stage else ""
    if r.hung:
        return f"{model_path} hangs {what} (no answer in {r.timeout:g} s){stage}; {MODEL_FIX}"
    return f"{model_path} crashes {what} ({r.how}){stage}; {MODEL_FIX}"
