"""`compile` as a use case: validate the model, find edgetpu_compiler, run it, judge the result."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Union

from edgeapp.core.tflite.model import load_model
from edgeapp.errors import UsageError
from edgeapp.hw.compiler import CompileReport, compile_model, find_compiler


def compile_file(model: Union[str, Path], *, out_dir=None, segments: Optional[int] = None,
                 min_runtime: Optional[int] = None, timeout: Optional[float] = None,
                 search_delegate: bool = False, search_step: Optional[int] = None,
                 compiler: Optional[str] = None,
                 log: Optional[Callable[[str], None]] = None) -> CompileReport:
    """A compiled model is refused up front: the compiler's own message for it is cryptic.
    `timeout` None: the compiler's default, scaled when it runs emulated."""
    m = load_model(model)
    if m.is_edgetpu_compiled:
        raise UsageError(f"{model} is already compiled for the Edge TPU (edgetpu-custom-op): "
                         "compile its CPU model instead")
    exe = find_compiler(compiler)
    return compile_model(model, exe, out_dir, segments=segments, min_runtime=min_runtime,
                         timeout=timeout, search_delegate=search_delegate, search_step=search_step,
                         log=log)
