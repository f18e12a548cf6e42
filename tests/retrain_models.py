"""Small embedding extractors for the retrain tests, built by our own code.

- `writer_extractor`: int8, written with edgeapp's TFLite writer (no TensorFlow): one 16x16
  VALID CONV_2D with ReLU over a 16x16 RGB image, i.e. a [1, 1, 1, D] feature vector whose first
  three features are the mean of each colour channel and the others random projections.
- `keras_extractor`: conftest's trained colour CNN cut after its GlobalAveragePooling2D, turned
  into a uint8-I/O model by `edgeapp convert` (a subprocess, as a user runs it): a [1, 8]
  feature vector, with the signature and metadata the TFLite converter writes.
- `writer_model`: int8 models of other output shapes (class scores, four detection outputs,
  a segmentation map) to be refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
from conftest import ROOT

from edgeapp.core.tflite.writer import ModelWriter, conv_layer, dense_layer, int8_input

IN_SCALE = 1 / 128  # Coral's (pixel - 128) / 128, quantized to int8 with zero point 0


def writer_extractor(path: Path, depth: int = 8, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    w = ModelWriter("retrain test extractor")
    x = int8_input(w, "image", (1, 16, 16, 3), IN_SCALE, 0)
    weights = np.zeros((depth, 16, 16, 3))
    for c in range(3):
        weights[c, :, :, c] = 1 / 256  # the channel's mean, in the input's [-1, 1]
    weights[3:] = rng.normal(size=(depth - 3, 16, 16, 3)) / 256
    scales = np.abs(weights).reshape(depth, -1).max(axis=1) / 127
    q = np.round(weights / scales[:, None, None, None]).astype(np.int8)
    y = conv_layer(w, x, q, np.zeros(depth, np.int32), scales, out_scale=1 / 255,
                   out_zero_point=-128, padding="VALID", name="embedding", activation="RELU")
    path.write_bytes(w.build([x.index], [y.index]))
    return path


def writer_model(path: Path, output_shapes: Sequence[Sequence[int]]) -> Path:
    """An int8 16x16x3 image model with one FULLY_CONNECTED per output of these shapes."""
    rng = np.random.default_rng(1)
    w = ModelWriter("retrain test non-extractor")
    x = int8_input(w, "image", (1, 16, 16, 3), IN_SCALE, 0)
    outs = []
    for i, shape in enumerate(output_shapes):
        units = int(np.prod(shape))
        q = rng.integers(-127, 128, size=(units, 16 * 16 * 3)).astype(np.int8)
        a = dense_layer(w, x, q, np.zeros(units, np.int32), 1e-3, 0.1, name=f"out{i}")
        outs.append(a.index)
        w._tensors[a.index].shape = tuple(shape)  # FC output of the same size, read as `shape`
    path.write_bytes(w.build([x.index], outs))
    return path


KERAS_CUT = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import keras
m = keras.models.load_model(sys.argv[1])
pool = next(l for l in m.layers if isinstance(l, keras.layers.GlobalAveragePooling2D))
keras.Model(m.inputs, pool.output).save(sys.argv[2])
"""


def keras_extractor(tiny_keras: Path, calibration: Path, out: Path, io: str = "uint8") -> Path:
    """conftest's colour CNN up to its global average pool, converted by `edgeapp convert`
    (`io`: its input/output type)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",  # not ~/.cache, ~/.keras, ~/.config
           "EDGEAPP_CACHE_DIR": str(out.parent / ".cache"), "KERAS_HOME": str(out.parent / ".keras"),
           "MPLCONFIGDIR": str(out.parent / ".matplotlib")}
    cut = out.with_suffix(".keras")
    subprocess.run([sys.executable, "-c", KERAS_CUT, str(tiny_keras), str(cut)], check=True,
                   cwd=ROOT, env=env)
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "convert", str(cut), "-o", str(out),
                           "--calibration", str(calibration), "--samples", "100", "--io", io],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out
