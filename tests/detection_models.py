"""Real detection .tflite models for the tests, built once per session in one TensorFlow subprocess.

The models see a 64×64 RGB image as a 4×4 grid of 16-pixel cells; a cell dominated by pure red,
green or blue is an object of class 0, 1 or 2 whose box is the cell. So a test that paints a
coloured square knows the exact boxes to expect.

- det_op_float: the converter's own output: the real TFLite_Detection_PostProcess op (fused
  from a function annotated experimental_implements), a signature output_0..3 and the outputs
  in the converter's order;
- det_tf1: the same with the outputs reordered to TF1 SSD's (boxes, classes, scores, count)
  and no signature, like Coral's SSD models;
- det_op_uint8: quantized with uint8 input (Coral's usual input), post-process op, TF1 order;
- plain_tf2: no post-process op (plain TF ops, top-k), outputs in TF2 order (scores, boxes,
  count, classes), no signature: recognised by position alone;
- plain_sig: no op, outputs scrambled, a signature naming them output_0..3 as pycoral reads
  TF2 exports (count, scores, classes, boxes): recognised by the signature.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SIZE, GRID = 64, 4
CELL = SIZE // GRID
CLASS_OF_CHANNEL = {0: 0, 1: 1, 2: 2}  # RGB channel -> class id (0 red, 1 green, 2 blue)
LABELS = ("red", "green", "blue")
NAMES = ("det_op_float", "det_tf1", "det_op_uint8", "plain_tf2", "plain_sig")

BUILD = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf
from tensorflow.lite.tools import flatbuffer_utils as fbu
from tensorflow.lite.python import schema_py_generated as fb

out = sys.argv[1]
S, G, NC = %(S)d, %(G)d, 3
CELL, N = S // G, G * G
centers = np.array([[(r + .5) / G, (c + .5) / G, 1 / G, 1 / G] for r in range(G) for c in range(G)], np.float32)
corners = np.array([[r / G, c / G, (r + 1) / G, (c + 1) / G] for r in range(G) for c in range(G)], np.float32)

SIG = " ".join([
    'name: "TFLite_Detection_PostProcess"',
    'attr { key: "max_detections" value { i: 10 } }',
    'attr { key: "max_classes_per_detection" value { i: 1 } }',
    'attr { key: "detections_per_class" value { i: 10 } }',
    'attr { key: "use_regular_nms" value { b: false } }',
    'attr { key: "nms_score_threshold" value { f: 0.2 } }',
    'attr { key: "nms_iou_threshold" value { f: 0.5 } }',
    'attr { key: "y_scale" value { f: 10.0 } }', 'attr { key: "x_scale" value { f: 10.0 } }',
    'attr { key: "h_scale" value { f: 5.0 } }', 'attr { key: "w_scale" value { f: 5.0 } }',
    'attr { key: "num_classes" value { i: 3 } }'])

@tf.function(experimental_implements=SIG)
def postprocess(box_encodings, class_predictions, anchors):
    z = lambda n: tf.constant(0.0, dtype=tf.float32, name=n)
    return z("boxes"), z("classes"), z("scores"), z("num_detections")

def cell_probs(x):
    p = (x + 1.0) * 0.5  # edgeapp feeds float models (pixel - 128) / 128
    m = tf.reshape(tf.nn.avg_pool2d(p, CELL, CELL, "VALID"), [1, N, 3])
    others = tf.reduce_sum(m, -1, keepdims=True) - m
    return tf.sigmoid(20.0 * (m - 0.5) - 20.0 * others)

class WithOp(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([1, S, S, 3], tf.float32)])
    def detect(self, x):
        scores = tf.concat([tf.zeros([1, N, 1]), cell_probs(x)], -1)  # background first
        return postprocess(tf.zeros([1, N, 4]), scores, tf.constant(centers))

class Plain(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([1, S, S, 3], tf.float32)])
    def detect(self, x):
        probs = cell_probs(x)
        top, idx = tf.math.top_k(tf.reduce_max(probs, -1), k=N)
        classes = tf.gather(tf.cast(tf.argmax(probs, -1), tf.float32), idx, batch_dims=1)
        boxes = tf.gather(tf.constant(corners)[None], idx, batch_dims=1)
        count = tf.reduce_sum(tf.cast(top > 0.2, tf.float32), axis=-1)
        return {"scores": top, "boxes": boxes, "count": count, "classes": classes}

def convert(m, quantize=False):
    conv = tf.lite.TFLiteConverter.from_concrete_functions([m.detect.get_concrete_function()], m)
    if quantize:
        rng = np.random.default_rng(0)
        def rep():
            for _ in range(40):  # cells black or one pure colour: the scenes the tests paint
                cells = np.zeros((G, G, 3), np.float32)
                for r in range(G):
                    for c in range(G):
                        k = rng.integers(0, 4)
                        if k < 3:
                            cells[r, c, k] = 1.0
                img = np.kron(cells, np.ones((CELL, CELL, 1), np.float32))
                yield [(img * 2.0 - 1.0)[None]]
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = rep
        conv.inference_input_type = tf.uint8
        conv.allow_custom_ops = True
    return conv.convert()

def relayout(data, order, role_tensor, signature=None):
    model = fbu.read_model_from_bytearray(bytearray(data))
    model.subgraphs[0].outputs = np.array([role_tensor[r] for r in order], dtype=np.int32)
    if signature is None:
        model.signatureDefs = []
    else:
        maps = []
        for name, role in signature:
            t = fb.TensorMapT(); t.name = name; t.tensorIndex = role_tensor[role]; maps.append(t)
        model.signatureDefs[0].outputs = maps
    return bytes(fbu.convert_object_to_bytearray(model))

def op_roles(data):
    model = fbu.read_model_from_bytearray(bytearray(data))
    for op in model.subgraphs[0].operators:
        code = model.operatorCodes[op.opcodeIndex]
        if code.customCode and b"Detection" in code.customCode:
            return dict(zip(("boxes", "classes", "scores", "count"), [int(i) for i in op.outputs]))
    raise SystemExit("the converter did not fuse TFLite_Detection_PostProcess")

def signature_roles(data):
    model = fbu.read_model_from_bytearray(bytearray(data))
    return {(t.name.decode() if isinstance(t.name, bytes) else t.name): int(t.tensorIndex)
            for t in model.signatureDefs[0].outputs}

def save(name, data):
    with open(os.path.join(out, name + ".tflite"), "wb") as f:
        f.write(data)

TF1 = ("boxes", "classes", "scores", "count")
TF2 = ("scores", "boxes", "count", "classes")
op_float = convert(WithOp())
save("det_op_float", op_float)
save("det_tf1", relayout(op_float, TF1, op_roles(op_float)))
op_q = convert(WithOp(), quantize=True)
save("det_op_uint8", relayout(op_q, TF1, op_roles(op_q)))
plain = convert(Plain())
roles = signature_roles(plain)
save("plain_tf2", relayout(plain, TF2, roles))
save("plain_sig", relayout(plain, ("classes", "boxes", "scores", "count"), roles,
     signature=[("output_0", "count"), ("output_1", "scores"), ("output_2", "classes"),
                ("output_3", "boxes")]))
'''

_cache: dict[str, Path] = {}


def build(tmp_path_factory) -> dict[str, Path]:
    """Paths of the models by name (built on the first call of the session)."""
    if not _cache:
        out = tmp_path_factory.mktemp("detection_models")
        code = BUILD % {"S": SIZE, "G": GRID}
        proc = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        (out / "labels.txt").write_text("\n".join(LABELS) + "\n")
        _cache.update({n: out / f"{n}.tflite" for n in NAMES})
        _cache["labels"] = out / "labels.txt"
    return dict(_cache)
