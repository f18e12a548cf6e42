"""`check` as a use case: read a model once and predict what edgetpu_compiler 16 will map."""

from __future__ import annotations

from pathlib import Path
from typing import Union

from edgeapp.core.check_report import CheckResult, check_model
from edgeapp.core.tflite.model import map_model_file, parse_model


def check_file(path: Union[str, Path]) -> CheckResult:
    """Validate and check `path` (validation gives the one-line errors for bad files); the file
    is mapped once, for validation and the check alike."""
    data = map_model_file(path)
    return check_model(parse_model(data, str(path)), data)
