"""What every source format hands the shared quantization: a float model, batch 1, NHWC.

The one place TensorFlow is imported (`tensorflow()`), with its start-up chatter filtered.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Optional

import numpy as np

from edgeapp.errors import MissingDependency
from edgeapp.hw.native_stderr import filtered_native_stderr

# progress(total, label) -> a context manager giving `advance()` or None (cli.options.progress_bar)
Progress = Callable[[int, str], ContextManager[Optional[Callable[[], None]]]]


@dataclass
class FloatModel:
    """A loaded float model: its fixed NHWC input, the float original's predict function, and
    how to write the batch-1 NHWC SavedModel that TensorFlow Lite quantizes."""

    input_shape: tuple[int, int, int]  # H, W, C
    predict: Callable[[np.ndarray], list]  # (N, H, W, C) float -> one (N, ...) array per output
    export: Callable[[str], None]  # writes a batch-1 NHWC SavedModel to the folder
    output_names: list[str] = field(default_factory=list)
    runtime: str = "Keras"  # what `predict` runs: Keras, TensorFlow, ONNX Runtime
    notes: list[str] = field(default_factory=list)  # what was changed on the way (batch, layout)
    layer_names: dict = field(default_factory=dict)  # TF layer name -> source layer (ONNX node)
    close: Callable[[], None] = lambda: None


def tensorflow():
    """Import TensorFlow (seconds), keeping its routine native start-up lines off the terminal."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        with filtered_native_stderr():  # absl's and oneDNN's start-up lines, past the log level
            import tensorflow as tf

            tf.config.list_physical_devices("GPU")  # a GPU build looks for CUDA here, not mid-run
    except ImportError:
        raise MissingDependency("convert needs TensorFlow: pip install 'edgeapp[convert]'") from None
    return tf


def first_line(e: BaseException) -> str:
    """The line of an exception's message that says what went wrong: TensorFlow's graph errors
    start with "in user code:" and a stack, the `XxxError: ...` line comes later."""
    text = str(e).strip()
    if not text:
        return type(e).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"^\w+(Error|Exception): ", line)]
    return named[0] if named else lines[0]


def no_progress(total: int, label: str):
    """A `Progress` that shows nothing (library callers, tests)."""
    import contextlib

    return contextlib.nullcontext(None)
