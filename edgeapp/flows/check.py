"""`check` as a use case: read a model once and predict what edgetpu_compiler will map, for the
compiler version the user will run (the installed one, else 16, or the one asked for)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple, Union

from edgeapp.core.edgetpu.check_report import CheckResult, check_model
from edgeapp.core.edgetpu.compiler_files import DEFAULT_PREDICTION, major
from edgeapp.core.tflite.model import map_model_file, parse_model


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
    data = map_model_file(path)
    return check_model(parse_model(data, str(path)), data, compiler)
