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
