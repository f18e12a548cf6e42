"""The flatbuffer writer: read back with our reader, run in the real runtime, checked against
numpy int8 arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from edgeapp.core.edgetpu.specs import ON_CHIP_CACHE_BYTES
from edgeapp.core.tflite.model import load_model
from edgeapp.core.tflite.writer import ModelWriter, conv_layer, dense_layer, int8_input
from edgeapp.flows.bench.synthetic import DEFAULT_SPEC, SyntheticSpec, build_synthetic, write_synthetic
from edgeapp.hw.runtime import open_engine


def _requantize(acc: np.ndarray, multiplier, out_zero: int) -> np.ndarray:
    return np.clip(np.round(acc * multiplier) + out_zero, -128, 127)


def _dense_ref(x, x_zero, w, b, multiplier, out_zero):
    acc = (x.astype(np.int64) - x_zero) @ w.astype(np.int64).T + b
    return _requantize(acc, multiplier, out_zero)


def _conv_ref(x, x_zero, f, b, multipliers, out_zero, stride):
    """NHWC conv, SAME padding filled with the input zero point (a real 0)."""
    n, h, w, c = x.shape
    o, kh, kw, _ = f.shape
    oh, ow = -(-h // stride), -(-w // stride)
    pad_h = max((oh - 1) * stride + kh - h, 0)
    pad_w = max((ow - 1) * stride + kw - w, 0)
    xp = np.full((n, h + pad_h, w + pad_w, c), x_zero, np.int64)
    xp[:, pad_h // 2:pad_h // 2 + h, pad_w // 2:pad_w // 2 + w, :] = x
    xp -= x_zero
    acc = np.zeros((n, oh, ow, o), np.int64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            acc[:, i, j, :] = np.tensordot(patch, f.astype(np.int64), axes=([1, 2, 3], [1, 2, 3]))
    return _requantize(acc + b, np.asarray(multipliers), out_zero)


def _run(path, x):
    engine = open_engine(path, "cpu")
    return engine.run(x)[0]


def test_dense_stack_reads_back_and_runs(tmp_path):
    rng = np.random.default_rng(3)
    w = ModelWriter("dense test")
    x = int8_input(w, "input", (2, 16), scale=0.05, zero_point=-3)
    w1 = rng.integers(-127, 128, (8, 16), dtype=np.int8)
    b1 = rng.integers(-500, 500, 8, dtype=np.int32)
    h = dense_layer(w, x, w1, b1, weight_scale=0.02, out_scale=0.3, out_zero_point=5, name="d1")
    w2 = rng.integers(-127, 128, (4, 8), dtype=np.int8)
    b2 = rng.integers(-500, 500, 4, dtype=np.int32)
    y = dense_layer(w, h, w2, b2, weight_scale=0.03, out_scale=0.5, out_zero_point=-2, name="d2")
    path = w.write(tmp_path / "dense.tflite", [x.index], [y.index])

    model = load_model(path)
    assert model.op_names == ["FULLY_CONNECTED", "FULLY_CONNECTED"]
    assert model.description == "dense test"
    assert [op.version for op in model.operators] == [4, 4]
    t_in, t_out = model.input_tensors[0], model.output_tensors[0]
    assert (t_in.shape, t_in.dtype, t_in.quantization.per_tensor) == ((2, 16), "int8", (pytest.approx(0.05), -3))
    assert (t_out.shape, t_out.quantization.per_tensor) == ((2, 4), (pytest.approx(0.5), -2))
    weights = model.tensors[model.operators[0].inputs[1]]
    assert weights.is_constant and weights.data_size == 8 * 16
    bias = model.tensors[model.operators[0].inputs[2]]
    assert bias.dtype == "int32" and bias.quantization.scale[0] == pytest.approx(0.05 * 0.02)

    xin = rng.integers(-128, 128, (2, 16), dtype=np.int8)
    hid = _dense_ref(xin, -3, w1, b1, 0.05 * 0.02 / 0.3, 5)
    want = _dense_ref(hid, 5, w2, b2, 0.3 * 0.03 / 0.5, -2)
    got = _run(path, xin)
    assert got.dtype == np.int8 and got.shape == (2, 4)
    assert np.abs(got.astype(int) - want).max() <= 1  # fixed-point vs float rounding
    assert len(np.unique(got)) > 2  # not saturated: the check above means something


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_per_channel_runs_like_numpy(tmp_path, stride):
    rng = np.random.default_rng(stride)
    w = ModelWriter()
    x = int8_input(w, "input", (1, 7, 7, 3), scale=0.04, zero_point=2)
    f = rng.integers(-127, 128, (5, 3, 3, 3), dtype=np.int8)
    b = rng.integers(-300, 300, 5, dtype=np.int32)
    scales = [0.01, 0.02, 0.015, 0.03, 0.005]
    y = conv_layer(w, x, f, b, scales, out_scale=0.2, out_zero_point=-1, stride=stride)
    path = w.write(tmp_path / "conv.tflite", [x.index], [y.index])

    model = load_model(path)
    assert model.op_names == ["CONV_2D"]
    filt = model.tensors[model.operators[0].inputs[1]]
    assert filt.quantization.scale == pytest.approx(tuple(scales))
    assert filt.quantization.quantized_dimension == 0
    assert model.operators[0].option("stride_w", "i") == stride
    side = -(-7 // stride)
    assert model.output_tensors[0].shape == (1, side, side, 5)

    xin = rng.integers(-128, 128, (1, 7, 7, 3), dtype=np.int8)
    want = _conv_ref(xin, 2, f, b, [0.04 * s / 0.2 for s in scales], -1, stride)
    got = _run(path, xin)
    assert got.shape == want.shape
    assert np.abs(got.astype(int) - want).max() <= 1
    assert len(np.unique(got)) > 2


def test_writer_refuses_what_it_cannot_write():
    w = ModelWriter()
    x = w.add_tensor("x", (1, 4), "int8", scale=1.0)
    with pytest.raises(ValueError, match="does not write"):
        w.add_operator("SOFTMAX", [x], [x])
    with pytest.raises(ValueError, match="no tensor"):
        w.add_operator("FULLY_CONNECTED", [x, 7], [x])
    with pytest.raises(ValueError, match="data shape"):
        w.add_tensor("bad", (2, 2), "int8", data=np.zeros(3, np.int8))


def test_synthetic_model_fits_the_edgetpu_cache_and_runs(tmp_path):
    spec = DEFAULT_SPEC
    assert spec.parameter_bytes < ON_CHIP_CACHE_BYTES
    path = write_synthetic(tmp_path / "syn.tflite")
    model = load_model(path)
    assert model.parameter_bytes == spec.parameter_bytes
    assert path.stat().st_size < ON_CHIP_CACHE_BYTES
    assert model.op_names == ["CONV_2D"] * spec.layers
    assert model.input_tensors[0].shape == spec.input_shape

    small = write_synthetic(tmp_path / "small.tflite", SyntheticSpec(layers=4, channels=16, size=8))
    x = np.random.default_rng(0).integers(-128, 128, (1, 8, 8, 16), dtype=np.int8)
    out = _run(small, x)
    # The output scales keep activations alive through the stack: neither saturated nor zero.
    assert 5 < out.astype(float).std() < 100
    assert np.mean(np.abs(out.astype(int)) >= 127) < 0.2


def test_synthetic_refuses_to_outgrow_the_cache():
    with pytest.raises(ValueError, match="parameter budget"):
        build_synthetic(SyntheticSpec(layers=40, channels=256))
