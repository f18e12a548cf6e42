"""`edgeapp check`: per-operator Edge TPU predictions, on hand-built graphs (the propagation
rule, exactly) and on real models built here with TensorFlow and our own `edgeapp convert`.

All TensorFlow work happens in one session-scoped subprocess (`tf_models`) plus one
`python -m edgeapp convert` run (`branchy`), so TensorFlow never loads in the test process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tflite_schema

from edgeapp.core.edgetpu import check_report as CR
from edgeapp.core.edgetpu import rules as R
from edgeapp.core.tflite.model import Operator, Quantization, Tensor, TfliteModel, load_model
from edgeapp.errors import ExitCode

MIB = 1024 * 1024

ROOT = Path(__file__).resolve().parent.parent
Q = Quantization(scale=(0.05,), zero_point=(0,))


# ----------------------------------------------------------------------------- hand-built graphs


class Graph:
    """A TFLite main subgraph written by hand (no options tables)."""

    def __init__(self) -> None:
        self.tensors: list[Tensor] = []
        self.ops: list[Operator] = []

    def t(self, shape, dtype="int8", const=False, sig=None, quant=True, name=None) -> int:
        i = len(self.tensors)
        size = 4 * len(shape) if const else 0
        self.tensors.append(Tensor(index=i, name=name or f"t{i}", shape=tuple(shape), dtype=dtype,
                                   buffer=i + 1 if const else 0,
                                   quantization=Q if quant and dtype in ("int8", "uint8") else None,
                                   data_size=max(size, 1) if const else 0,
                                   shape_signature=tuple(sig) if sig else None))
        return i

    def op(self, name, ins, outs, version=1) -> int:
        i = len(self.ops)
        self.ops.append(Operator(index=i, op=name, builtin_code=0, version=version,
                                 inputs=tuple(ins), outputs=tuple(outs)))
        return i

    def conv(self, x: int, channels: int = 8, shape=(1, 8, 8)) -> int:
        w = self.t((channels, 3, 3, self.tensors[x].shape[-1]), const=True)
        b = self.t((channels,), dtype="int32", const=True)
        y = self.t((*shape, channels))
        self.op("CONV_2D", (x, w, b), (y,))
        return y

    def unary(self, name: str, x: int, dtype="int8") -> int:
        y = self.t(self.tensors[x].shape, dtype=dtype)
        self.op(name, (x,), (y,))
        return y

    def model(self, inputs, outputs) -> TfliteModel:
        return TfliteModel(path="hand.tflite", size=0, version=3, description="",
                     tensors=tuple(self.tensors), operators=tuple(self.ops), inputs=tuple(inputs),
                     outputs=tuple(outputs), subgraph_count=1, metadata={})


def mapped(model: TfliteModel, read=None) -> list[bool]:
    preds, _ = R.predict(model, read)
    return [p.mapped for p in preds]


def test_branchy_graph_follows_data_flow_not_file_order():
    g = Graph()
    x = g.t((1, 8, 8, 4))
    a = g.conv(x)                       # op 0: mapped
    b = g.unary("LEAKY_RELU", a)        # op 1: unsupported, after the TPU
    c = g.conv(b)                       # op 2: depends on op 1 -> CPU
    d = g.conv(a)                       # op 3: after op 1 in file order, independent -> mapped
    e = g.t((1, 8, 8, 8))
    g.op("ADD", (c, d), (e,))           # op 4: depends on op 1 -> CPU
    f = g.t((1, 4, 4, 8))
    g.op("MAX_POOL_2D", (d,), (f,))     # op 5: independent -> mapped
    m = g.model([x], [e, f])
    preds, blockers = R.predict(m)
    assert blockers == []
    assert [p.mapped for p in preds] == [True, False, False, True, False, True]
    assert preds[1].causes == ("unsupported_op",)
    assert preds[1].reason.startswith("LEAKY_RELU is not supported by the Edge TPU (use ReLU")
    assert preds[1].after_tpu
    for k in (2, 4):
        assert preds[k].causes == ("depends_on_cpu",) and preds[k].blocked_by == 1
        assert "depends on op 1 (LEAKY_RELU)" in preds[k].reason
        assert "only one Edge TPU subgraph" in preds[k].reason
    s = CR.summarize(m, preds)
    assert s["verdict"] == "partially_mapped" and (s["ops_tpu"], s["ops_cpu"]) == (3, 3)
    assert s["first_cpu_op"] == 1
    assert 0 < s["macs_tpu_share"] < 1
    assert any("op 1 (LEAKY_RELU) cuts the Edge TPU subgraph: 2 supported" in a for a in s["advice"])


def test_cpu_ops_before_the_tpu_do_not_block_what_follows():
    """A float input's QUANTIZE (or any unsupported op fed only by inputs) runs first."""
    g = Graph()
    x = g.t((1, 8, 8, 4), dtype="float32", name="input")
    q = g.unary("QUANTIZE", x, dtype="int8")          # op 0: CPU, before the TPU
    y = g.conv(q)                                       # op 1: mapped
    z = g.t((1, 8, 8, 4))
    g.op("LEAKY_RELU", (q,), (z,))                     # op 2: CPU, but fed by a CPU op only
    w = g.conv(z)                                       # op 3: mapped (fed by a before-TPU op)
    s = g.t((1, 8, 8, 8))
    g.op("ADD", (y, w), (s,))                          # op 4: mapped
    out = g.unary("DEQUANTIZE", s, dtype="float32")    # op 5: CPU, after the TPU
    m = g.model([x], [out])
    preds, _ = R.predict(m)
    assert [p.mapped for p in preds] == [False, True, False, True, True, False]
    assert preds[0].causes == ("float_io",) and not preds[0].after_tpu
    assert "quantizes the float model input" in preds[0].reason
    assert not preds[2].after_tpu
    assert preds[5].causes[0] == "unsupported_op" and "float_io" in preds[5].causes
    advice = CR.summarize(m, preds)["advice"]
    assert any("--io uint8" in a for a in advice)


def test_chain_after_a_cpu_op_stays_on_the_cpu():
    g = Graph()
    x = g.t((1, 8, 8, 4))
    a = g.conv(x)
    b = g.unary("HARD_SWISH", a)
    c = g.unary("RELU", b)
    d = g.unary("RELU", c)
    m = g.model([x], [d])
    preds, _ = R.predict(m)
    assert [p.mapped for p in preds] == [True, False, False, False]
    assert preds[3].blocked_by == 1  # the root cause, not the op just before


def test_fully_int8_graph_is_fully_mapped():
    g = Graph()
    x = g.t((1, 8, 8, 3), dtype="uint8")
    q = g.unary("QUANTIZE", x)
    c = g.conv(q)
    p = g.t((1, 8))
    axes = g.t((2,), dtype="int32", const=True)
    g.op("MEAN", (c, axes), (p,))
    w = g.t((3, 8), const=True)
    o = g.t((1, 3))
    g.op("FULLY_CONNECTED", (p, w), (o,))
    s = g.unary("SOFTMAX", o)
    u = g.unary("QUANTIZE", s, dtype="uint8")
    m = g.model([x], [u])
    result = CR.CheckResult("hand", *R.predict(m)[:1])
    result.summary = CR.summarize(m, result.ops)
    assert all(p.mapped for p in result.ops) and result.fully_mapped
    assert result.summary["advice"] == [] and result.summary["macs_tpu_share"] == 1.0


def test_float_int16_batch_rank_rules():
    g = Graph()
    x = g.t((1, 8, 8, 4), dtype="float32", name="img")
    y = g.unary("RELU", x, dtype="float32")
    h = g.t((1, 8, 8, 4), dtype="int16")
    g.op("RELU", (h,), (g.t((1, 8, 8, 4), dtype="int16"),))
    b4 = g.t((4, 8, 8, 4))
    g.op("RELU", (b4,), (g.t((4, 8, 8, 4)),))
    r5 = g.t((1, 2, 8, 8, 4))
    g.op("RELU", (r5,), (g.t((1, 2, 8, 8, 4)),))
    m = g.model([x, h, b4, r5], [y])
    preds, _ = R.predict(m)
    assert not any(p.mapped for p in preds)
    assert preds[0].causes == ("float",) and "float32 tensor 'img'" in preds[0].reason
    assert preds[1].causes == ("dtype",) and "int16" in preds[1].reason
    assert preds[2].causes == ("batch",) and "batch 4" in preds[2].reason
    assert preds[3].causes == ("rank",) and "3 innermost" in preds[3].reason
    advice = CR.summarize(m, preds)["advice"]
    assert any(a.startswith("float tensors: re-run `edgeapp convert` with full-integer") for a in advice)
    assert "batch is 4: re-convert with batch 1" in advice


def test_limits_that_read_constant_operands():
    g = Graph()
    x = g.t((1, 8, 8, 6))
    axes_batch = g.t((1,), dtype="int32", const=True, name="axes_b")
    axes_chan = g.t((1,), dtype="int32", const=True, name="axes_c")
    axes_xy = g.t((2,), dtype="int32", const=True, name="axes_xy")
    pads = g.t((4, 2), dtype="int32", const=True, name="pads")
    g.op("MEAN", (x, axes_batch), (g.t((1, 8, 8, 6)),))   # 0: batch reduction
    g.op("MEAN", (x, axes_chan), (g.t((1, 8, 8, 1)),))    # 1: channels 6, not a multiple of 4
    g.op("MEAN", (x, axes_xy), (g.t((1, 6)),))            # 2: fine
    g.op("PAD", (x, pads), (g.t((3, 8, 8, 6)),))          # 3: pads the batch
    sm = g.t((1, 4, 4))
    g.op("SOFTMAX", (sm,), (g.t((1, 4, 4)),))             # 4: not 1-D
    fc_w = g.t((4, 6), const=True)
    g.op("FULLY_CONNECTED", (x, fc_w), (g.t((1, 8, 8, 4)),))  # 5: output not 1-D
    values = {"axes_b": [0], "axes_c": [-1], "axes_xy": [1, 2], "pads": [1, 1, 0, 0, 0, 0, 0, 0]}

    def read(t):
        import struct
        v = values.get(t.name)
        return None if v is None else struct.pack(f"<{len(v)}i", *v)

    m = g.model([x, sm], [0])
    preds, _ = R.predict(m, read)
    assert [p.mapped for p in preds] == [False, False, True, False, False, False]
    assert "batch dimension" in preds[0].reason
    assert "channels (6, must be a multiple of 4)" in preds[1].reason
    assert "pads along the batch" in preds[3].reason
    assert "not 1-D" in preds[4].reason
    assert "not one-dimensional" in preds[5].reason
    assert all(p.causes[0] == "limit" for p in preds if not p.mapped and p.index != 3)


def test_too_new_op_version_blocks_the_whole_model():
    g = Graph()
    x = g.t((1, 8, 8, 4))
    a = g.conv(x)
    g.ops[0] = Operator(0, "CONV_2D", 3, 6, g.ops[0].inputs, g.ops[0].outputs)
    b = g.unary("RELU", a)
    m = g.model([x], [b])
    preds, blockers = R.predict(m)
    assert len(blockers) == 1 and "CONV_2D version 6" in blockers[0]
    assert not any(p.mapped for p in preds)
    assert "TensorFlow 2.8" in preds[0].reason
    assert preds[1].reason.startswith("the compiler refuses the whole model")
    assert CR.summarize(m, preds, blockers)["verdict"] == "not_mapped"


def test_dynamic_sized_tensors_block_the_whole_model():
    g = Graph()
    x = g.t((1, 8, 8, 4), sig=(-1, 8, 8, 4))
    a = g.conv(x)
    shp = g.t((4,), dtype="int32")
    g.op("SHAPE", (a,), (shp,))
    r = g.t((1, 512), sig=(-1, 512))
    g.op("RESHAPE", (a, shp), (r,))
    m = g.model([x], [r])
    preds, blockers = R.predict(m)
    assert blockers and "static-sized tensors" in blockers[0]
    assert not any(p.mapped for p in preds)
    assert "dynamic" in preds[2].causes
    s = CR.summarize(m, preds, blockers)
    assert any("dynamic batch (-1): re-convert with a fixed batch of 1" in a for a in s["advice"])


def test_already_compiled_model_is_reported():
    g = Graph()
    x = g.t((1, 8, 8, 3), dtype="uint8")
    y = g.t((1, 10), dtype="uint8")
    g.op("edgetpu-custom-op", (x,), (y,))
    m = g.model([x], [y])
    preds, _ = R.predict(m)
    assert preds[0].mapped
    assert CR.summarize(m, preds)["already_compiled"] is True


def test_parameters_over_the_cache_warn_about_streaming():
    g = Graph()
    x = g.t((1, 8, 8, 4))
    a = g.conv(x)
    w = g.tensors[1]
    g.tensors[1] = Tensor(w.index, w.name, w.shape, w.dtype, w.buffer, w.quantization,
                          data_size=9 * MIB)
    m = g.model([x], [a])
    preds, _ = R.predict(m)
    s = CR.summarize(m, preds)
    assert s["streamed_bytes_estimate"] == 9 * MIB + g.tensors[2].data_size - 8 * MIB
    assert any("streamed from host memory on every inference" in w for w in s["warnings"])
    assert any("--segments" in a for a in s["advice"])


def test_count_macs_is_per_operator():
    g = Graph()
    x = g.t((1, 8, 8, 4))
    a = g.conv(x, channels=8)
    b = g.unary("RELU", a)
    macs = R.count_macs(g.model([x], [b]))
    assert macs == {0: 1 * 8 * 8 * 8 * 3 * 3 * 4, 1: 0}


# ----------------------------------------------------------------------------- real models


TF_SCRIPT = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np, tensorflow as tf, keras
out = sys.argv[1]
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
cal = rng.random((20, 16, 16, 3), dtype=np.float32)

def rep():
    for i in range(len(cal)):
        yield [cal[i:i + 1]]

def int8(conv):
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = rep
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.uint8
    conv.inference_output_type = tf.uint8
    return conv.convert()

def small(flatten=False):
    layers = [keras.Input((16, 16, 3)), keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
              keras.layers.MaxPooling2D()]
    # the batch read at run time, as a dynamic-batch Flatten does in newer Keras (3.10 writes a
    # plain RESHAPE to -1): SHAPE/STRIDED_SLICE/PACK/RESHAPE
    flat = keras.layers.Lambda(lambda x: keras.ops.reshape(x, (keras.ops.shape(x)[0], -1)), output_shape=(512,))
    layers += [flat] if flatten else [keras.layers.GlobalAveragePooling2D()]
    layers += [keras.layers.Dense(3, activation="softmax")]
    return keras.Sequential(layers)

# 1. a float model, as the plain converter writes it
m = small()
open(f"{out}/float.tflite", "wb").write(tf.lite.TFLiteConverter.from_keras_model(m).convert())
# 2. int8 with a dynamic batch (the Keras default), Flatten -> SHAPE/STRIDED_SLICE/PACK/RESHAPE
m = small(flatten=True)
open(f"{out}/dynbatch.tflite", "wb").write(int8(tf.lite.TFLiteConverter.from_keras_model(m)))
# 3. int8 with a fixed batch of 4 (exported as a SavedModel with that signature)
m = small()
m.export(f"{out}/b4_saved", format="tf_saved_model", verbose=False,
         input_signature=[tf.TensorSpec((4, 16, 16, 3), tf.float32)])
cal4 = np.repeat(cal[:, None], 4, axis=1).reshape(20, 4, 16, 16, 3)
def rep4():
    for i in range(len(cal4)):
        yield [cal4[i]]
conv = tf.lite.TFLiteConverter.from_saved_model(f"{out}/b4_saved")
conv.optimizations = [tf.lite.Optimize.DEFAULT]
conv.representative_dataset = rep4
conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
conv.inference_input_type = tf.uint8
conv.inference_output_type = tf.uint8
open(f"{out}/batch4.tflite", "wb").write(conv.convert())
# 4. a Keras model with an unsupported op in the middle and an independent branch
x = keras.Input((16, 16, 3))
a = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
a = keras.layers.MaxPooling2D()(a)
b = keras.layers.LeakyReLU(negative_slope=0.1)(a)
b = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(b)
b = keras.layers.GlobalAveragePooling2D()(b)
c = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(a)
c = keras.layers.GlobalAveragePooling2D()(c)
y = keras.layers.Dense(3, activation="softmax")(keras.layers.Concatenate()([b, c]))
keras.Model(x, y).save(f"{out}/branchy.keras")
"""


@pytest.fixture(scope="session")
def tf_models(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("check_models")
    proc = subprocess.run([sys.executable, "-c", TF_SCRIPT, str(out)], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def branchy(tf_models: Path, tiny_data: Path) -> dict:
    """The branchy Keras model converted by `python -m edgeapp convert` (its JSON report)."""
    out = tf_models / "branchy_int8.tflite"
    proc = subprocess.run(
        [sys.executable, "-m", "edgeapp", "convert", str(tf_models / "branchy.keras"), "-o", str(out),
         "--calibration", str(tiny_data / "train"), "--samples", "30", "--format", "json"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    report["path"] = out
    report["stderr"] = proc.stderr
    return report


def run_check(cli, path: Path):
    res = cli("check", path, "--format", "json")
    return res, json.loads(res.stdout)


def test_converted_int8_model_is_fully_mapped(cli, tiny_model, converted):
    res, data = run_check(cli, tiny_model)
    assert res.exit_code == 0
    assert set(data) == {"model", "ops", "summary"}
    assert data["model"] == str(tiny_model)
    for i, o in enumerate(data["ops"]):
        assert set(o) == {"index", "op", "mapped", "reason"}
        assert o["index"] == i and o["mapped"] is True and o["reason"] is None
    s = data["summary"]
    assert s["verdict"] == "fully_mapped" and s["ops_tpu"] == s["ops_total"] == len(data["ops"])
    assert s["macs_tpu_share"] == 1.0 and s["macs_total"] > 0
    assert s["inputs"][0]["dtype"] == "uint8" and s["outputs"][0]["dtype"] == "uint8"
    assert s["advice"] == []
    # convert reports the same verdict, in its JSON and its table
    assert converted["edgetpu_check"]["verdict"] == "fully_mapped"
    assert converted["edgetpu_verdict"].startswith("fully mapped to the Edge TPU")
    table = cli("check", tiny_model)
    assert table.exit_code == 0
    assert "CONV_2D" in table.stdout and "verdict     fully mapped" in table.stdout
    assert "parameters" in table.stdout and "~8 MiB" in table.stdout


def test_float_model_is_not_mapped(cli, tf_models):
    res, data = run_check(cli, tf_models / "float.tflite")
    assert res.exit_code == ExitCode.NOT_MAPPABLE
    assert data["summary"]["verdict"] == "not_mapped"
    assert all(not o["mapped"] and "float32" in o["reason"] for o in data["ops"])
    assert any("full-integer quantization" in a for a in data["summary"]["advice"])


def test_dynamic_batch_model(cli, tf_models):
    m = load_model(tf_models / "dynbatch.tflite")
    assert m.input_tensors[0].has_dynamic_batch and "SHAPE" in m.op_names
    res, data = run_check(cli, tf_models / "dynbatch.tflite")
    assert res.exit_code == ExitCode.NOT_MAPPABLE
    s = data["summary"]
    assert s["verdict"] == "not_mapped" and s["blockers"]
    shape_op = next(o for o in data["ops"] if o["op"] == "SHAPE")
    assert "SHAPE is not supported" in shape_op["reason"]
    assert any("re-convert with a fixed batch of 1" in a for a in s["advice"])


def test_batch_4_model(cli, tf_models):
    m = load_model(tf_models / "batch4.tflite")
    assert m.input_tensors[0].shape[0] == 4
    res, data = run_check(cli, tf_models / "batch4.tflite")
    assert res.exit_code == ExitCode.NOT_MAPPABLE
    conv = next(o for o in data["ops"] if o["op"] == "CONV_2D")
    assert not conv["mapped"] and "batch 4" in conv["reason"]
    assert "batch is 4: re-convert with batch 1" in data["summary"]["advice"]
    table = cli("check", tf_models / "batch4.tflite").stdout
    assert "advice      batch is 4: re-convert with batch 1" in table


def _descendants(m: TfliteModel, root: int) -> set[int]:
    made = {t: op.index for op in m.operators for t in op.outputs}
    down: set[int] = set()
    for op in m.operators:  # operators are stored in execution order
        if any(made.get(t) == root or made.get(t) in down for t in op.inputs):
            down.add(op.index)
    return down


def test_unsupported_op_in_the_middle_keeps_independent_branch(cli, branchy):
    path = branchy["path"]
    m = load_model(path)
    res, data = run_check(cli, path)
    assert res.exit_code == ExitCode.NOT_MAPPABLE
    ops = data["ops"]
    (leaky,) = [o["index"] for o in ops if o["op"] == "LEAKY_RELU"]
    down = _descendants(m, leaky)
    assert down  # the conv after it, its pooling, the concatenation, dense, softmax...
    for o in ops:
        if o["index"] == leaky:
            assert not o["mapped"] and "LEAKY_RELU is not supported" in o["reason"]
        elif o["index"] in down:
            assert not o["mapped"], o
            assert f"depends on op {leaky} (LEAKY_RELU)" in o["reason"]
        else:
            assert o["mapped"], o
    # the other branch: a conv that does not depend on LEAKY_RELU is mapped
    convs = [o for o in ops if o["op"] == "CONV_2D"]
    assert any(o["mapped"] for o in convs if o["index"] > 0) and any(not o["mapped"] for o in convs)
    s = data["summary"]
    assert s["verdict"] == "partially_mapped" and s["first_cpu_op"] == leaky
    assert 0 < s["macs_tpu_share"] < 1
    assert branchy["edgetpu_check"]["verdict"] == "partially_mapped"
    assert "Edge TPU check: partially mapped" in branchy["stderr"]


def test_pooling_with_fused_activation(cli, branchy, tmp_path):
    """The converter does not fuse activations into pooling: write one with the schema."""
    import flatbuffers

    schema = tflite_schema()

    src = branchy["path"]
    mt = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(src.read_bytes(), 0))
    codes = [c.builtinCode for c in mt.operatorCodes]
    sg = mt.subgraphs[0]
    pool = next(i for i, op in enumerate(sg.operators)
                if codes[op.opcodeIndex] == schema.BuiltinOperator.MAX_POOL_2D)
    sg.operators[pool].builtinOptions.fusedActivationFunction = schema.ActivationFunctionType.RELU
    b = flatbuffers.Builder(1024)
    b.Finish(mt.Pack(b), file_identifier=b"TFL3")
    edited = tmp_path / "fused_pool.tflite"
    edited.write_bytes(bytes(b.Output()))

    res, data = run_check(cli, edited)
    assert res.exit_code == ExitCode.NOT_MAPPABLE
    ops = data["ops"]
    assert ops[pool]["op"] == "MAX_POOL_2D" and not ops[pool]["mapped"]
    assert ops[pool]["reason"] == "fused RELU activation on pooling is not supported"
    m = load_model(edited)
    for i in _descendants(m, pool):
        if ops[i]["op"] != "LEAKY_RELU":
            assert f"depends on op {pool} (MAX_POOL_2D)" in ops[i]["reason"]
    assert all(o["mapped"] for o in ops[:pool])
    assert any("fused activation on pooling" in a for a in data["summary"]["advice"])


def test_check_invalid_model(cli, tmp_path):
    bad = tmp_path / "x.tflite"
    bad.write_bytes(b"\0" * 4)
    res = cli("check", bad)
    assert res.exit_code == ExitCode.MODEL_INVALID and "not a TFLite model" in res.stderr


def test_check_bundled_model_without_tensorflow(cli):
    res, data = run_check(cli, ROOT / "models" / "digits_int8.tflite")
    assert res.exit_code == 0 and data["summary"]["verdict"] == "fully_mapped"


# ----------------------------------------------------------------------------- pose/segmentation rules


def test_resize_precision_rule_by_upscale_factor():
    """x2 maps (MoveNet), x33 stays on the CPU (DeepLab's 1x1 -> 33x33), x4 maps with a warning."""
    g = Graph()
    size = g.t((2,), dtype="int32", const=True)
    x2_in, x33_in, x4_in = g.t((1, 8, 8, 8)), g.t((1, 1, 1, 8)), g.t((1, 8, 8, 8))
    g.op("RESIZE_BILINEAR", (x2_in, size), (g.t((1, 16, 16, 8)),))
    g.op("RESIZE_BILINEAR", (x33_in, size), (g.t((1, 33, 33, 8)),))
    g.op("RESIZE_NEAREST_NEIGHBOR", (x4_in, size), (g.t((1, 32, 32, 8)),))
    m = g.model([x2_in, x33_in, x4_in], [])
    preds, _ = R.predict(m)
    assert [p.mapped for p in preds] == [True, False, True]
    assert preds[1].causes == ("precision",)
    assert "1x1 to 33x33 (x33)" in preds[1].reason and "loss of precision" in preds[1].reason
    assert "1/33" in preds[1].reason  # why: the interpolation steps are too fine
    s = CR.summarize(m, preds)
    assert any(w.startswith("op 2 RESIZE_NEAREST_NEIGHBOR upscales x4") for w in s["warnings"])
    assert not any(w.startswith("op 0") for w in s["warnings"])  # x2 is recorded mapping
    assert any("upscale in steps of at most x8" in a for a in s["advice"])


def test_int8_lstm_cell_state_in_int16_is_allowed():
    def lstm(cell_dtype: str, input_dtype: str = "int8") -> bool:
        g = Graph()
        x = g.t((1, 8, 4), dtype=input_dtype)
        weights = [g.t((8, 4 if i < 4 else 8), const=True) for i in range(8)]  # inputs 1..8
        biases = [g.t((8,), dtype="int32", const=True) for _ in range(4)]     # inputs 12..15
        hidden, cell = g.t((1, 8)), g.t((1, 8), dtype=cell_dtype)              # inputs 18, 19
        ins = [x, *weights, -1, -1, -1, *biases, -1, -1, hidden, cell, -1, -1, -1, -1]
        assert ins[19] == cell
        g.op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, (g.t((1, 8, 8)),))
        (p,), _ = R.predict(g.model([x], []))
        return p.mapped

    assert lstm("int16")  # TFLite's int8 LSTM: compiler 16 maps it
    assert not lstm("int16", input_dtype="int16")  # a 16x8 LSTM is refused
    assert not lstm("float32")


def test_tile_is_mapped():
    g = Graph()
    x = g.t((1, 4, 4, 8))
    multiples = g.t((4,), dtype="int32", const=True)
    g.op("TILE", (x, multiples), (g.t((1, 8, 8, 8)),))
    (p,), _ = R.predict(g.model([x], []))
    assert p.mapped and p.reason is None


def test_segmentation_advice_points_to_edgeapp_segment():
    g = Graph()
    x = g.t((1, 8, 8, 3), dtype="uint8")
    scores = g.conv(g.unary("QUANTIZE", x), channels=4)
    axis = g.t((1,), dtype="int32", const=True)
    classes = g.t((1, 8, 8), dtype="int32")
    g.op("ARG_MAX", (scores, axis), (classes,))
    m = g.model([x], [classes])
    preds, _ = R.predict(m)
    assert [p.mapped for p in preds] == [True, True, False]
    advice = CR.summarize(m, preds)["advice"]
    tip = next(a for a in advice if a.startswith("segmentation model"))
    assert "ARG_MAX runs on the CPU" in tip and "`edgeapp segment`" in tip
    assert "argmax on the CPU" in tip
    g2 = Graph()  # the same ending at the class scores: fully mapped, and the tip says how to run it
    x2 = g2.t((1, 8, 8, 3), dtype="uint8")
    s2 = g2.conv(g2.unary("QUANTIZE", x2), channels=4)
    m2 = g2.model([x2], [s2])
    preds2, _ = R.predict(m2)
    assert all(p.mapped for p in preds2)
    assert any("`edgeapp segment`" in a for a in CR.summarize(m2, preds2)["advice"])


def test_the_compiler_predicted_without_one_installed_is_said_in_words(cli, tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEAPP_DATA_DIR", str(tmp_path))  # nothing installed by edgeapp
    r = cli("check", tiny_model)
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("compiler ")]
    assert line.endswith("(Edge TPU runtime 14): the last release, as edgeapp has installed no "
                         "compiler (`edgeapp compiler install`)"), line
