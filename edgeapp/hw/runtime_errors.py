"""The TFLite runtimes' error messages as one readable line (used in this process and in the
model-check child, so it sits below both runtime.py and probe.py)."""

from __future__ import annotations

import re
from typing import Optional

NATIVE_NOISE = ("INFO: Created TensorFlow Lite", "INFO: Initialized TensorFlow Lite")
# Where one native message ends and the next begins when the runtime glues them together
# ("...was not true.Node number 12 ...", "...XNNPACK delegateunsupported datatype ...").
# Patterns, not compiled ones: every command imports this module, few ever word an error
# (re compiles them on first use and keeps them).
_MESSAGE_START = (
    r"(?<=\S)(?=(?:Node number \d|Encountered unresolved|Didn't find op|Input tensor \d|Failed to |"
    r"tensorflow/lite/|tflite/|third_party/|unsupported |Unsupported |Type |Restored original|"
    r"Attempting to use a delegate|Cannot |Invalid tensor|Internal error))")
_SENTENCE_END = r"(?<=[a-z)\]0-9]\.)(?=[A-Z])"
_MAX_MESSAGE = 400


def runtime_error_text(error: BaseException, native: Optional[list[str]] = None) -> str:
    """The runtime's error and what it printed natively, as one readable line."""
    text = str(error).strip()
    text = re.sub(_SENTENCE_END, "\n", re.sub(_MESSAGE_START, "\n", text))
    parts: list[str] = []
    for line in text.splitlines() + list(native or []):
        line = line.strip()
        if line and not line.startswith(NATIVE_NOISE) and "XNNPACK delegate for CPU" not in line \
                and line not in parts:
            parts.append(line)
    joined = "; ".join(parts) or type(error).__name__
    return joined if len(joined) <= _MAX_MESSAGE else joined[:_MAX_MESSAGE - 3] + "..."


# How each runtime is installed: tflite-runtime through edgeapp's extra, which pins the numpy<2
# its wheels (2.14 and older) were built for; `pip install tflite-runtime` beside numpy 2 gives
# a runtime that imports and then fails on every model.
INSTALL = {"ai-edge-litert": "pip install ai-edge-litert",
           "tflite-runtime": "pip install 'edgeapp[tflite-runtime]' (tflite-runtime with numpy<2)",
           "tensorflow": "pip install tensorflow"}

# What a runtime built against numpy 1.x says under numpy 2: numpy's message, or the import
# inside its extension failing (which CPython chains under the extension's SystemError,
# "<built-in method CreateWrapperFromFile ...> returned a result with an exception set").
_NUMPY_MISMATCH = ("compiled using NumPy 1.x cannot be run in", "numpy.core.multiarray failed to import",
                   "_ARRAY_API not found", "numpy.dtype size changed")


def error_chain_text(error: BaseException) -> str:
    """`error` and what caused it, as one line: an extension's SystemError says nothing of why."""
    parts, seen = [str(error).strip() or type(error).__name__], 0
    cause = error.__cause__ or error.__context__
    while cause is not None and seen < 5:
        parts.append(f"{type(cause).__name__}: {cause}")
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return " (".join(parts) + ")" * (len(parts) - 1)


def numpy_mismatch(text: str) -> bool:
    """Whether a runtime's error (with its causes, or what it printed) says it was built for
    another numpy than the one installed."""
    return any(marker in text for marker in _NUMPY_MISMATCH)


def numpy_mismatch_text(runtime: str, version: str) -> str:
    """The runtime's failure, said as such: no model runs on it, whatever the model."""
    try:
        import numpy

        installed = f"numpy {numpy.__version__}"
    except ImportError:
        installed = "the numpy installed here"
    return (f"the TFLite runtime {runtime} {version} was built for another numpy than {installed} "
            f"and cannot run any model with it (the runtime fails, not the model): "
            f"{INSTALL.get(runtime, 'pip install ai-edge-litert')}, or use another runtime "
            "(--runtime ai-edge-litert)")
