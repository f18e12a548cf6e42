"""`check` as a use case: read a model once and predict what edgetpu_compiler will map, for the
compiler version the user will run (the installed one, else 16, or the one asked for)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from typing_extensions import TypedDict

from edgeapp.core.edgetpu.check_report import CheckDoc, CheckResult, check_model
from edgeapp.core.edgetpu.cocompile import compiled_together, share_cache
from edgeapp.core.edgetpu.compiler_files import DEFAULT_PREDICTION, major
from edgeapp.core.edgetpu.package import parameter_use
from edgeapp.core.edgetpu.specs import USABLE_CACHE_BYTES
from edgeapp.core.tflite.model import map_model_file, parse_model
from edgeapp.errors import InvalidModel


def predicted_compiler(asked: Optional[int] = None) -> Tuple[int, str]:
    """(compiler major version to predict for, why that one)."""
    if asked is not None:
        return asked, "as asked (--compiler-version)"
    from edgeapp.hw.compiler_install import newest_installed

    record = newest_installed()
    found = major(str(record.get("version"))) if record else None
    if found is not None:
        return (16 if found >= 16 else 14), f"the installed compiler {record['version']}"  # type: ignore[index]
    return DEFAULT_PREDICTION, ("the last release, as edgeapp has installed no compiler "
                                "(`edgeapp compiler install`)")


def check_file(path: Union[str, Path], compiler: int = DEFAULT_PREDICTION) -> CheckResult:
    """Validate and check `path` (validation gives the one-line errors for bad files); the file
    is mapped once, for validation and the check alike."""
    return check_files([path], compiler).results[0]


class SharedCache(TypedDict):
    """Where the parameters of models checked for one Edge TPU go, together (None: unknown)."""
    usable_bytes: int
    compiled_together: Optional[bool]
    on_chip_bytes: Optional[int]
    off_chip_bytes: Optional[int]


class CheckManyDoc(TypedDict):
    """`check --format json` of several models: each one's report and the cache they share."""
    models: List[CheckDoc]
    cache: SharedCache


@dataclass
class OneTpuCheck:
    """Models checked for one Edge TPU, in the order given: each one's check, with where its
    parameters go (`on_chip_bytes`, `off_chip_bytes` in its summary) when compiled together."""

    results: List[CheckResult]
    together: Optional[bool]  # compiled models: compiled in one call (None: not all compiled)

    def to_json(self) -> Union[CheckDoc, CheckManyDoc]:
        if len(self.results) == 1:
            return self.results[0].to_json()
        s = [r.summary for r in self.results]
        return {"models": [r.to_json() for r in self.results],
                "cache": {"usable_bytes": USABLE_CACHE_BYTES, "compiled_together": self.together,
                          "on_chip_bytes": _total(x["on_chip_bytes"] for x in s),
                          "off_chip_bytes": _total(x["off_chip_bytes"] for x in s)}}

    @property
    def fully_mapped(self) -> bool:
        return all(r.fully_mapped for r in self.results)


def _total(values) -> Optional[int]:
    values = list(values)
    return None if None in values else sum(values)


def check_files(paths: Sequence[Union[str, Path]], compiler: int = DEFAULT_PREDICTION) -> OneTpuCheck:
    """Check each model and say where its parameters go on one Edge TPU: a compiled model's as
    its file records them (caching token included), a CPU model's as the compiler would share
    the cache among them all compiled together, in this order."""
    results, used = [], []
    for path in paths:
        data = map_model_file(path)
        result = check_model(parse_model(data, str(path)), data, compiler)
        results.append(result)
        used.append(_parameter_use(data, str(path)))
    predicted = iter(share_cache([r.summary["parameter_bytes_tpu"] for r, u in zip(results, used) if u is None]))
    for result, use in zip(results, used):
        if use is _UNREADABLE:
            result.summary.update(on_chip_bytes=None, off_chip_bytes=None, parameters="unknown")
        elif use is not None:
            result.summary.update(on_chip_bytes=use.on_chip_bytes, off_chip_bytes=use.off_chip_bytes,
                                  caching_tokens=use.to_json()["caching_tokens"], parameters="read")
        else:
            share = next(predicted)
            result.summary.update(on_chip_bytes=share.on_chip_bytes, off_chip_bytes=share.off_chip_bytes,
                                  parameters="predicted")
    readable = all(u is not None and u is not _UNREADABLE for u in used)
    together = compiled_together([u.caching_tokens for u in used]) if readable and len(used) > 1 else None
    return OneTpuCheck(results, together)


_UNREADABLE = object()


def _parameter_use(data: bytes, name: str):
    """The compiled model's parameter use; _UNREADABLE when its Edge TPU op carries no package
    edgeapp can read (the check of its graph still stands; the runtime judges the op)."""
    try:
        return parameter_use(data, name)
    except InvalidModel:
        return _UNREADABLE
