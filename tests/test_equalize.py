"""Equalization's maths (core/quant/equalize.py) on a small numpy network in TFLite's weight layouts:
conv -> ReLU -> a constant added (one pixel of one channel 60x the others) -> max pool -> a
consumer. Rescaled, the float outputs stay the same and the activation's range shrinks to what
the other channels need."""

import numpy as np
import pytest

from edgeapp.core.quant import equalize as eq
from edgeapp.core.tflite.patch import set_min_max


def conv(x, w, b):
    """CONV_2D, SAME padding, stride 1: x [n, h, w, in], w [out, kh, kw, in]."""
    kh, kw = w.shape[1:3]
    p = np.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    h, wd = x.shape[1:3]
    patches = np.stack([p[:, i:i + h, j:j + wd] for i in range(kh) for j in range(kw)], axis=3)
    return np.einsum("nhwki,oki->nhwo", patches, w.reshape(w.shape[0], kh * kw, -1)) + b


def depthwise(x, w, b):
    """DEPTHWISE_CONV_2D, SAME padding: w [1, kh, kw, in * mult]."""
    mult = w.shape[-1] // x.shape[-1]
    return conv_grouped(np.repeat(x, mult, axis=-1), w[0], b)


def conv_grouped(x, w, b):
    kh, kw = w.shape[:2]
    p = np.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    h, wd = x.shape[1:3]
    return sum(p[:, i:i + h, j:j + wd] * w[i, j] for i in range(kh) for j in range(kw)) + b


def maxpool(x):
    n, h, w, c = x.shape
    return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


@pytest.fixture()
def net():
    rng = np.random.default_rng(0)
    w1, b1 = rng.normal(0, 0.3, (8, 3, 3, 3)), rng.normal(0, 0.1, 8)
    const = np.zeros((1, 8, 8, 8))
    const[0, 2, 5, 3] = 60.0 * 3.0  # one pixel of channel 3, far over the others' range
    consumers = {"CONV_2D": (rng.normal(0, 0.3, (4, 3, 3, 8)), rng.normal(0, 0.1, 4)),
                 "DEPTHWISE_CONV_2D": (rng.normal(0, 0.3, (1, 3, 3, 16)), rng.normal(0, 0.1, 16)),
                 "FULLY_CONNECTED": (rng.normal(0, 0.3, (5, 8)), rng.normal(0, 0.1, 5))}
    return rng.normal(0, 1, (6, 8, 8, 3)), w1, b1, const, consumers


def forward(x, w1, b1, const, consumer, w2, b2):
    act = maxpool(np.maximum(conv(x, w1, b1), 0) + const)
    if consumer == "CONV_2D":
        return act, conv(act, w2, b2)
    if consumer == "DEPTHWISE_CONV_2D":
        return act, depthwise(act, w2, b2)
    return act, act.mean(axis=(1, 2)) @ w2.T + b2  # through a global average pool


@pytest.mark.parametrize("consumer", ["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"])
@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_rescaling_keeps_the_float_outputs_and_shrinks_the_range(net, consumer, alpha):
    x, w1, b1, const, consumers = net
    w2, b2 = consumers[consumer]
    act, out = forward(x, w1, b1, const, consumer, w2, b2)
    ranges = eq.channel_ranges(act)
    assert eq.is_outlier_dominated(ranges) and int(np.argmax(ranges)) == 3
    s = eq.scales_for(ranges, alpha)
    target = eq.target_of(ranges)
    assert s[3] == pytest.approx((ranges[3] / target) ** alpha) and s[3] > 5
    assert np.delete(s, 3).max() < 1.5  # the other channels (nearly) as they were
    nw1, nb1 = eq.producer_scaled("CONV_2D", w1, b1, s)
    new_act, new_out = forward(x, nw1, nb1, eq.constant_scaled(const, s), consumer,
                               eq.consumer_scaled(consumer, w2, s), b2)
    np.testing.assert_allclose(new_out, out, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(new_act * s, act, rtol=1e-9, atol=1e-9)
    assert np.abs(act).max() > 40 * target
    outlier = target * (ranges[3] / target) ** (1 - alpha)  # alpha 1: down to the target
    assert np.abs(new_act).max() == pytest.approx(max(outlier, np.delete(ranges, 3).max()))
    assert np.abs(new_act).max() < np.abs(act).max() / 5
    assert eq.is_outlier_dominated(eq.channel_ranges(new_act)) == (alpha < 1)


def test_a_depthwise_producer_scales_its_last_axis():
    rng = np.random.default_rng(1)
    x, w, b = rng.normal(0, 1, (2, 6, 6, 4)), rng.normal(0, 1, (1, 3, 3, 4)), rng.normal(0, 1, 4)
    s = np.array([1.0, 2.0, 8.0, 1.0])
    nw, nb = eq.producer_scaled("DEPTHWISE_CONV_2D", w, b, s)
    np.testing.assert_allclose(depthwise(x, nw, nb) * s, depthwise(x, w, b), rtol=1e-9, atol=1e-12)


def test_the_target_ignores_the_outlier_channels():
    ranges = np.array([0.0, 0.0, 5.5, 400.0, 2.1, 1.4, 5.7, 3.9, 6.2, 0.0, 8.6, 4.5])
    assert eq.target_of(ranges) == 8.6  # dead channels left out, never between 8.6 and 400
    assert eq.is_outlier_dominated(ranges)
    assert not eq.is_outlier_dominated(np.array([1.0, 2.0, 3.0, 5.0, 9.0]))
    assert eq.scales_for(np.array([1.0, 2.0]), 1.0, target=0.0).tolist() == [1.0, 1.0]


def test_a_tensors_range_after_rescaling_keeps_zero_inside():
    low, high = np.array([0.0, -1.0, 0.0]), np.array([4.0, 2.0, 400.0])
    assert eq.scaled_range(low, high, np.array([1.0, 1.0, 100.0])) == (-1.0, 4.0)
    assert eq.scaled_range(np.array([1.0]), np.array([3.0]), np.array([1.0])) == (0.0, 3.0)


def test_the_output_error_is_relative_to_each_outputs_power():
    ref = [np.array([3.0, 4.0]), np.array([10.0])]
    assert eq.output_error(ref, ref) == 0.0
    assert eq.output_error(ref, [np.array([3.0, 4.0]), np.array([9.0])]) == pytest.approx(0.01)


def test_a_range_is_set_only_where_one_is_recorded(tiny_model):
    """The int8 model records no calibrated min/max: refused, not written somewhere else."""
    from edgeapp.core.tflite.model import parse_model

    data = tiny_model.read_bytes()
    m = parse_model(data)
    act = next(op.outputs[0] for op in m.operators if op.op == "CONV_2D")
    with pytest.raises(ValueError, match="no recorded min/max"):
        set_min_max(data, {act: (0.0, 1.0)})
