"""A co-compiled model's first run on an Edge TPU: do its outputs equal its solo compile's?

edgetpu#85 reports co-compiled models giving wrong outputs. A model compiled alone gives, on the
Edge TPU, its CPU int8 model's outputs up to the chip's rounding; so the first time a co-compiled
model opens on an Edge TPU, one deterministic input goes through it and through its CPU twin
(core/edgetpu/agreement.py compares them). The verdict is kept with the probe verdicts
(hw/verdicts.py: by the model's SHA-256, the runtime's version and the library's SHA-256), so
it costs one invoke per model file, not one per run.

A compiled file alone does not say it was co-compiled: the compiler gives every call one random
parameter-caching token, which a solo compile has too. Models compiled in one call share it, so
a model is co-compiled when a compiled model beside it (where `edgeapp compile A B` writes them,
and where Coral's co-compiled test models are) carries the same token.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional

from edgeapp.core.naming import EDGETPU_SUFFIX, cpu_twin_path, glob_escape
from edgeapp.errors import DeviceUnavailable, EdgeappError, InvalidModel

if TYPE_CHECKING:
    from edgeapp.core.edgetpu.agreement import TwinAgreement
    from edgeapp.hw.runtime import Engine
    from edgeapp.hw.verdicts import VerdictCache

CHECK_MODES = ("warn", "strict", "off")  # --cocompiled-check: warn and run, refuse (exit 4), skip


def caching_token(path: str | Path) -> Optional[int]:
    """The parameter-caching token of a compiled model (None: it caches nothing, or it is not
    a compiled model this reader understands)."""
    from edgeapp.core.edgetpu.package import parameter_use
    from edgeapp.core.tflite.model import map_model_file

    try:
        use = parameter_use(map_model_file(path), str(path))
    except (EdgeappError, OSError, ValueError):
        return None
    return use.caching_tokens[0] if use is not None and use.caching_tokens else None


def cocompiled_partners(path: str | Path) -> List[Path]:
    """The compiled models beside `path` compiled in the same call (the same caching token);
    a byte-identical copy of it is no partner. Empty: compiled alone, as far as can be told."""
    from edgeapp.core.registry import file_sha256

    model = Path(path)
    token = caching_token(model)
    if token is None:
        return []
    size, digest = model.stat().st_size, None
    partners = []
    for other in sorted(model.parent.glob(f"*{glob_escape(EDGETPU_SUFFIX)}.tflite")):
        try:
            if other.resolve() == model.resolve() or caching_token(other) != token:
                continue
            if other.stat().st_size == size:
                digest = digest or file_sha256(str(model))
                if file_sha256(str(other)) == digest:
                    continue
        except OSError:
            continue
        partners.append(other)
    return partners


def verify_cocompiled(engine: Engine, open_twin: Callable[[], Engine], mode: str = "warn",
                      say: Callable[[str], None] = lambda _t: None,
                      cache: Optional[VerdictCache] = None) -> Optional[TwinAgreement]:
    """Check, once, that a co-compiled model on the Edge TPU gives its CPU twin's outputs.

    `engine` is the model opened on an Edge TPU; `open_twin()` opens its CPU twin (it may raise:
    no twin, no check, said once). A mismatch is said as a warning (mode "warn") or raised as
    InvalidModel (mode "strict"); "off", a model on the CPU and a model compiled alone are not
    checked. Returns the agreement measured or cached, None when there was nothing to check.
    """
    if mode == "off" or engine.device != "edgetpu":
        return None
    path = engine.model.path
    partners = cocompiled_partners(path)
    if not partners:
        return None
    if cache is None:
        from edgeapp.core.userdirs import cache_dir
        from edgeapp.hw.verdicts import VerdictCache

        cache = VerdictCache(cache_dir())
    key = _key(engine, cache, path)
    entry = cache.get_agreement(key)
    from edgeapp.core.edgetpu.agreement import TwinAgreement

    if entry is not None:
        agreement = TwinAgreement(float(entry["max_steps"]), int(entry["output"]), float(entry["tolerance"]))
        _judge(agreement, path, partners, mode, say, cached=entry.get("checked_at"))
        return agreement
    try:
        agreement = _measure(engine, open_twin)
    except DeviceUnavailable:  # the twin's own message speaks of an Edge TPU lost: not so here
        say(f"{Path(path).name} was co-compiled (with {_names(partners)}) and could not be checked "
            f"against its CPU model: no CPU twin ({cpu_twin_path(path).name} not found; pass "
            "--cpu-model FILE, the model it was compiled from)")
        return None
    except EdgeappError as e:
        say(f"{Path(path).name} was co-compiled (with {_names(partners)}) and could not be checked "
            f"against its CPU model: {e}")
        return None
    import time

    cache.put_agreement(key, {"max_steps": agreement.max_steps, "output": agreement.output,
                              "tolerance": agreement.tolerance, "model": str(path),
                              "checked_at": time.strftime("%Y-%m-%d %H:%M:%S")})
    _judge(agreement, path, partners, mode, say)
    return agreement


def _measure(engine: Engine, open_twin: Callable[[], Engine]) -> TwinAgreement:
    from edgeapp.core.edgetpu.agreement import check_input, compare_with_twin

    if len(engine.inputs) != 1:
        raise InvalidModel(f"it takes {len(engine.inputs)} inputs (the check feeds one)")
    tensor = check_input(engine.input_shape, engine.input_dtype)
    got = engine.run(tensor)
    twin = open_twin()
    try:
        want = twin.run(tensor)
    finally:
        release = getattr(twin, "release", None) or getattr(twin, "close", None)
        if release is not None:
            release()
    return compare_with_twin(got, want)


def _judge(agreement: TwinAgreement, path: str, partners: List[Path], mode: str,
           say: Callable[[str], None], cached: Optional[str] = None) -> None:
    if agreement.agree:
        return
    name = Path(path).name
    by = ("in their shapes or number" if agreement.max_steps == float("inf")
          else f"by up to {agreement.max_steps:g} quantized steps (output {agreement.output}; "
               f"rounding stays within {agreement.tolerance:g})")
    when = f" (verdict cached {cached}; `edgeapp doctor --forget-probes` to check again)" if cached else ""
    message = (f"{name}, co-compiled with {_names(partners)}, gives outputs on the Edge TPU that "
               f"differ from its CPU model's {by}: a co-compile gone wrong (edgetpu#85); compile "
               f"it alone (`edgeapp compile {cpu_twin_path(path)}`){when}")
    if mode == "strict":
        raise InvalidModel(message)
    say(f"warning: {message}")


def _names(partners: List[Path]) -> str:
    return ", ".join(p.name for p in partners)


def _key(engine: Engine, cache: VerdictCache, path: str) -> str:
    """The model's content, the runtime and the Edge TPU library that run it."""
    from edgeapp.hw.libedgetpu import edgetpu_library, find_library_file

    runtime = getattr(engine, "runtime", None)
    library = find_library_file(edgetpu_library())
    where = cache.sha256(library) if library and os.path.isfile(library) else "edgetpu"
    return (f"{cache.sha256(path)}|{getattr(runtime, 'name', '?')} {getattr(runtime, 'version', '?')}"
            f"|{where}")
