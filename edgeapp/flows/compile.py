"""`compile` as a use case: validate the model, find edgetpu_compiler, run it, judge the result."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from edgeapp.core.tflite.model import load_model
from edgeapp.errors import UsageError
from edgeapp.hw.compiler import CompileReport, compile_model, find_compiler


def compile_file(model: Union[str, Path], *, out_dir=None, segments: Optional[int] = None,
                 min_runtime: Optional[int] = None, timeout: Optional[float] = None,
                 search_delegate: bool = False, search_step: Optional[int] = None,
                 compiler: Optional[str] = None, cocompile: Sequence[Union[str, Path]] = (),
                 log: Optional[Callable[[str], None]] = None) -> CompileReport:
    """A compiled model is refused up front: the compiler's own message for it is cryptic.
    `timeout` None: the compiler's default, scaled when it runs emulated. `cocompile`: more
    models compiled in the same call, so one Edge TPU keeps all their parameters cached."""
    models = [Path(model), *(Path(m) for m in cocompile)]
    for path in models:
        if load_model(path).is_edgetpu_compiled:
            raise UsageError(f"{path} is already compiled for the Edge TPU (edgetpu-custom-op): "
                             "compile its CPU model instead")
    if cocompile and segments and segments > 1:
        raise UsageError("--segments splits one model over several Edge TPUs; co-compiled models "
                         "share one: compile them apart, or drop --segments")
    stems = [p.stem for p in models]
    twice = sorted({s for s in stems if stems.count(s) > 1})
    if twice:
        raise UsageError(f"two models named {twice[0]}.tflite would write the same "
                         f"{twice[0]}_edgetpu.tflite: rename one")
    exe = find_compiler(compiler)
    return compile_model(model, exe, out_dir, segments=segments, min_runtime=min_runtime,
                         timeout=timeout, search_delegate=search_delegate, search_step=search_step,
                         cocompile=models[1:], log=log)
