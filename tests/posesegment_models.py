"""Pose- and segmentation-shaped models for the tests, built once per session: Keras models with
set weights (so every test knows the exact expected output), converted by our own `edgeapp
convert` (run in the same Python process that builds them, so TensorFlow loads once).

- pose: input 32x32 RGB, output [1, 1, 17, 3]. From the image's channel means (r, g, b) in
  0..1, keypoint k is y = r/2 + 0.02k, x = g/2 + 0.45 - 0.02k (normalized to the input), score
  b·(1 − k/17). A uniform image of colour (r, g, b) therefore has known keypoints.
- seg: input 32x32 RGB, 2x2 average pooling, then a 1x1 convolution to 4 class scores
  [1, 16, 16, 4]: background scores 0.5, red/green/blue score their channel. A pixel whose
  red, green or blue is above half is that class, else background.
- segmap: the same ending in ARG_MAX (a SavedModel, as a Keras model cannot save tf.argmax),
  a class map [1, 16, 16] int32.
- resize: a float RESIZE_BILINEAR (half-pixel centres) 50x37 -> 19x61, for comparing our
  numpy resize with TFLite's own kernel.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SIZE = 32
SEG_LABELS = ("background", "red", "green", "blue")
RESIZE_SRC = (50, 37)  # (width, height)
RESIZE_DST = (19, 61)  # narrower, taller: down- and upscaling

BUILD = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, keras, tensorflow as tf
out, S = sys.argv[1], int(sys.argv[2])

x = keras.Input((S, S, 3))
dense = keras.layers.Dense(51)
y = keras.layers.Reshape((1, 17, 3))(dense(keras.layers.GlobalAveragePooling2D()(x)))
pose = keras.Model(x, y)
W, b = np.zeros((3, 51), np.float32), np.zeros(51, np.float32)
for k in range(17):
    W[0, 3 * k], b[3 * k] = 0.5, 0.02 * k
    W[1, 3 * k + 1], b[3 * k + 1] = 0.5, 0.45 - 0.02 * k
    W[2, 3 * k + 2] = 1.0 - k / 17.0
dense.set_weights([W, b])
pose.save(f"{out}/pose.keras")

x = keras.Input((S, S, 3))
conv = keras.layers.Conv2D(4, 1)
seg = keras.Model(x, conv(keras.layers.AveragePooling2D(2)(x)))
W = np.zeros((1, 1, 3, 4), np.float32)
W[0, 0, 0, 1] = W[0, 0, 1, 2] = W[0, 0, 2, 3] = 1.0
conv.set_weights([W, np.array([0.5, 0, 0, 0], np.float32)])
seg.save(f"{out}/seg.keras")

class SegMap(tf.Module):
    def __init__(self, model):
        self.model = model
    @tf.function(input_signature=[tf.TensorSpec([1, S, S, 3], tf.float32)])
    def __call__(self, x):
        return tf.argmax(self.model(x), axis=-1, output_type=tf.int32)
m = SegMap(seg)
tf.saved_model.save(m, f"{out}/segmap_saved", signatures=m.__call__.get_concrete_function())

(sw, sh), (dw, dh) = %(src)r, %(dst)r
@tf.function(input_signature=[tf.TensorSpec([1, sh, sw, 3], tf.float32)])
def resize(x):
    return tf.compat.v1.image.resize_bilinear(x, [dh, dw], half_pixel_centers=True)
conv = tf.lite.TFLiteConverter.from_concrete_functions([resize.get_concrete_function()])
open(f"{out}/resize_float.tflite", "wb").write(conv.convert())
'''

CONVERT = r'''
from edgeapp.cli.app import app
for name, source in (("pose", "pose.keras"), ("seg", "seg.keras"), ("segmap", "segmap_saved")):
    args = ["convert", f"{out}/{source}", "-o", f"{out}/{name}_int8.tflite", "--calibration",
            f"{out}/calibration", "--format", "json"]
    if name != "pose":
        args += ["--labels", f"{out}/seg_labels.txt"]
    try:
        app(args, standalone_mode=False)
    except SystemExit as e:
        if e.code:
            raise
'''

_BUILT: dict = {}


def uniform_image(rgb, size) -> np.ndarray:
    """(H, W, 3) uint8 of one colour; size is (width, height)."""
    return np.tile(np.asarray(rgb, np.uint8), (size[1], size[0], 1))


def quadrants(size, colors=((255, 0, 0), (0, 255, 0), (0, 0, 255), (0, 0, 0))) -> np.ndarray:
    """Top-left, top-right, bottom-left, bottom-right filled with `colors` (red, green, blue,
    black by default: classes 1, 2, 3, 0 of the seg models)."""
    w, h = size
    a = np.zeros((h, w, 3), np.uint8)
    a[:h // 2, :w // 2], a[:h // 2, w // 2:] = colors[0], colors[1]
    a[h // 2:, :w // 2], a[h // 2:, w // 2:] = colors[2], colors[3]
    return a


def build(tmp_path_factory) -> dict[str, Path]:
    """{"pose", "seg", "segmap": converted .tflite paths, "resize_float": the TFLite resize}."""
    if _BUILT:
        return _BUILT
    from PIL import Image

    out = tmp_path_factory.mktemp("posesegment_models")
    cal = out / "calibration"
    cal.mkdir()
    rng = np.random.default_rng(3)
    for i in range(24):  # uniform colours cover the whole range of channel means
        Image.fromarray(uniform_image(rng.integers(0, 256, 3), (SIZE, SIZE))).save(cal / f"u{i}.png")
    for i in range(6):
        Image.fromarray(quadrants((SIZE, SIZE))).save(cal / f"q{i}.png")
    (out / "seg_labels.txt").write_text("\n".join(SEG_LABELS) + "\n")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    script = BUILD % {"src": RESIZE_SRC, "dst": RESIZE_DST} + CONVERT  # TensorFlow loads once
    proc = subprocess.run([sys.executable, "-c", script, str(out), str(SIZE)], capture_output=True,
                          text=True, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _BUILT.update({name: out / f"{name}_int8.tflite" for name in ("pose", "seg", "segmap")})
    _BUILT["resize_float"] = out / "resize_float.tflite"
    return _BUILT
