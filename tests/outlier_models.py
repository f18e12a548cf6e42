"""A trained digits CNN whose activation holds one range outlier, as ONNX and as Keras.

scikit-learn's 8x8 digits (offline) upscaled to 32x32 RGB PNGs in class folders (train/ and
test/); a small CNN trained on them in a TensorFlow subprocess with, after its first
convolution, a constant added that puts one pixel of one channel at ~60x the activation's
normal range (the network learns around it, so the float model is accurate). The same
weights are written as ONNX with onnx.helper (NCHW, node names conv1, outlier_add, conv2,
conv3, fc) and as a .keras file (layer "outlier_add"). Quantized plainly, that one pixel sets
the Add's int8 step and top-1 accuracy drops.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SIZE = 32
OUTLIER = (5, 9)  # row, column of the outlier pixel after conv1
SCALE = 60.0  # the outlier's size in units of the activation's normal maximum

BUILD = r'''
import os, sys, json
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, keras, onnx
from onnx import helper, numpy_helper, TensorProto
from PIL import Image
from pathlib import Path
from sklearn.datasets import load_digits

out, size, (orow, ocol), scale = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), float(sys.argv[4])
keras.utils.set_random_seed(0)
d = load_digits()
rng = np.random.default_rng(0)
order = rng.permutation(len(d.images))
test, train = order[:500], order[500:]
def pixels(i):
    a = (d.images[i] / 16.0 * 255).astype(np.uint8)
    a = np.asarray(Image.fromarray(a).resize((size, size), Image.BILINEAR))
    return np.repeat(a[:, :, None], 3, axis=2)
for part, idx in (("train", train), ("test", test)):
    for i in idx:
        folder = out / part / str(d.target[i]); folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels(i)).save(folder / f"{i:04d}.png")
x = np.stack([pixels(i) for i in train]).astype(np.float32) / 255.0
y = d.target[train]

conv1 = keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="conv1")
probe = keras.Sequential([keras.Input((size, size, 3)), conv1])

layers = [keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="conv2"),
          keras.layers.MaxPooling2D(2, name="pool2"),
          keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="conv3"),
          keras.layers.MaxPooling2D(2, name="pool3"),
          keras.layers.GlobalAveragePooling2D(name="gap"), keras.layers.Dense(10, name="fc")]
def build(value):
    inp = keras.Input((size, size, 3))
    h = keras.ops.add(conv1(inp), value)  # a functional-API op: a standard, loadable model
    for layer in layers:
        h = layer(h)
    m = keras.Model(inp, h)
    m.compile(optimizer=keras.optimizers.Adam(3e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return m
def spike(value):
    c = np.zeros((1, size, size, 16), np.float32)
    c[0, orow, ocol, och] = value
    return c
probe.predict(x[:1], verbose=0)
och = 3
m = build(spike(scale))
m.fit(x, y, epochs=15, batch_size=32, verbose=0)
# the outlier at `scale` x the trained activation's normal range, and the network fitted to it
# (it carries information now: clipping it changes the float model's answers)
normal = float(np.percentile(probe.predict(x[:200], verbose=0), 99.9)) or 1.0
const = spike(scale * normal)
m = build(const)
m.fit(x, y, epochs=5, batch_size=32, verbose=0)
print(f"outlier {const.max():.1f} (normal {normal:.2f}); train accuracy {m.evaluate(x, y, verbose=0)[1]:.3f}",
      file=sys.stderr)
m.save(out / "digits_outlier.keras")

def conv(name, layer, src, dst):
    k, b = layer.get_weights()
    w = numpy_helper.from_array(k.transpose(3, 2, 0, 1).copy(), name + "_W")
    bb = numpy_helper.from_array(b, name + "_B")
    return [w, bb], [helper.make_node("Conv", [src, w.name, bb.name], [dst + "_pre"], name=name,
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                     helper.make_node("Relu", [dst + "_pre"], [dst], name=name + "_relu")]
inits, nodes = [], []
for name, src, dst in (("conv1", "image", "c1"),):
    i, n = conv(name, m.get_layer(name), src, dst); inits += i; nodes += n
inits.append(numpy_helper.from_array(const.transpose(0, 3, 1, 2).copy(), "outlier_const"))
nodes.append(helper.make_node("Add", ["c1", "outlier_const"], ["a1"], name="outlier_add"))
i, n = conv("conv2", m.get_layer("conv2"), "a1", "c2"); inits += i; nodes += n
nodes.append(helper.make_node("MaxPool", ["c2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]))
i, n = conv("conv3", m.get_layer("conv3"), "p2", "c3"); inits += i; nodes += n
nodes.append(helper.make_node("MaxPool", ["c3"], ["p3"], name="pool3", kernel_shape=[2, 2], strides=[2, 2]))
nodes.append(helper.make_node("GlobalAveragePool", ["p3"], ["g"], name="gap"))
nodes.append(helper.make_node("Flatten", ["g"], ["f"], name="flatten", axis=1))
k, b = m.get_layer("fc").get_weights()
inits += [numpy_helper.from_array(k, "fc_W"), numpy_helper.from_array(b, "fc_B")]
nodes.append(helper.make_node("Gemm", ["f", "fc_W", "fc_B"], ["logits"], name="fc"))
graph = helper.make_graph(nodes, "digits_outlier",
                          [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, str(out / "digits_outlier.onnx"))
'''


def build_outlier_models(out: Path) -> dict:
    """Writes out/train, out/test (class folders of PNGs), out/digits_outlier.onnx and
    out/digits_outlier.keras; returns their paths."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", BUILD, str(out), str(SIZE), json.dumps(OUTLIER), str(SCALE)],
                   check=True, env={**os.environ, "KERAS_HOME": str(out / ".keras"),
                                    "MPLCONFIGDIR": str(out / ".matplotlib")})
    return {"onnx": out / "digits_outlier.onnx", "keras": out / "digits_outlier.keras",
            "train": out / "train", "test": out / "test"}


if __name__ == "__main__":
    print(build_outlier_models(Path(sys.argv[1])))
