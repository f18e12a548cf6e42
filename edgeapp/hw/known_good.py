"""edgeapp's own known-good model: what tells a broken runtime from a broken model file.

When a model crashes the TFLite runtime in the model check's child, the file is blamed only if
this model runs: a runtime that dies on it too is broken on this machine (seen when the CPU it
detected is not the CPU it runs on), and blaming, and caching a verdict against, every file the
user tries would be wrong. The model is written by edgeapp's own flatbuffer writer (no file to
ship or lose): int8 CONV_2D and FULLY_CONNECTED, the kernels every image model uses, small
enough to build and run in milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator

import numpy as np

from edgeapp.core.tflite.writer import ModelWriter, conv_layer, dense_layer, int8_input

SIZE, CHANNELS, UNITS = 8, 8, 4


def known_good_bytes() -> bytes:
    """A 1×8×8×8 int8 input through a 3×3 convolution and a dense layer (deterministic)."""
    rng = np.random.RandomState(0)
    w = ModelWriter("edgeapp known-good model (runtime check)")
    x = int8_input(w, "input", (1, SIZE, SIZE, CHANNELS), scale=1 / 32)
    first = x.index
    filters = rng.randint(-127, 128, size=(CHANNELS, 3, 3, CHANNELS)).astype(np.int8)
    bias = rng.randint(-100, 100, size=CHANNELS).astype(np.int32)
    x = conv_layer(w, x, filters, bias, [0.01] * CHANNELS, out_scale=0.05, name="conv")
    weights = rng.randint(-127, 128, size=(UNITS, CHANNELS)).astype(np.int8)
    x = dense_layer(w, x, weights, np.zeros(UNITS, np.int32), 0.01, out_scale=0.05, name="dense")
    return w.build(inputs=[first], outputs=[x.index])


@contextlib.contextmanager
def known_good_file() -> Iterator[str]:
    """The model as a file for the child to open, removed afterwards."""
    fd, path = tempfile.mkstemp(prefix="edgeapp-known-good-", suffix=".tflite")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(known_good_bytes())
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
