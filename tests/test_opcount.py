"""Operations per inference counted from model graphs, against hand-computed MACs."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SHARED
from media import SIZE

from edgeapp.core.edgetpu.opcount import count_ops, macs_per_op
from edgeapp.core.tflite.model import load_model, parse_model
from edgeapp.core.tflite.writer import ModelWriter
from edgeapp.flows.bench.synthetic import SyntheticSpec, build_synthetic


def test_tiny_model_conv_layer_by_hand(tiny_model):
    """The fixture is Conv2D(8,3,same) on 16x16x3 → pool → Conv2D(8,3,same) → GAP → Dense(3)."""
    model = load_model(tiny_model)
    macs = macs_per_op(model)
    convs = [op for op in model.operators if op.op == "CONV_2D"]
    assert len(convs) == 2
    first = convs[0]
    # Independently of opcount: read the shapes and apply N·OH·OW·O·KH·KW·I.
    n, oh, ow, o = model.tensors[first.outputs[0]].shape
    o2, kh, kw, i = model.tensors[first.inputs[1]].shape
    assert o == o2
    assert macs[first.index] == n * oh * ow * o * kh * kw * i
    # And from the Keras architecture alone.
    assert macs[first.index] == SIZE * SIZE * 8 * 3 * 3 * 3
    assert macs[convs[1].index] == (SIZE // 2) * (SIZE // 2) * 8 * 3 * 3 * 8

    counted = count_ops(model)
    assert counted.macs_by_type["CONV_2D"] == 16 * 16 * 8 * 27 + 8 * 8 * 8 * 72
    assert counted.macs_by_type["FULLY_CONNECTED"] == 8 * 3
    assert counted.macs == 55296 + 36864 + 24
    assert counted.ops == 2 * counted.macs
    assert counted.mac_operators == 3 and not counted.unknown and not counted.opaque
    # Pooling, softmax and the rest are counted apart, never folded into ops.
    assert "MAX_POOL_2D" in counted.other_ops and "SOFTMAX" in counted.other_ops
    assert not set(counted.other_ops) & set(counted.macs_by_type)
    assert counted.to_dict()["ops"] == counted.ops


@pytest.mark.parametrize("spec", [SyntheticSpec(layers=3, channels=32, size=8),
                                  SyntheticSpec(kind="fc", layers=3, channels=64, size=4)])
def test_synthetic_macs_known_by_construction(spec):
    counted = count_ops(parse_model(build_synthetic(spec)))
    assert counted.macs == spec.macs
    if spec.kind == "conv":
        assert counted.macs == 3 * 8 * 8 * 32 * 32 * 9
    else:
        assert counted.macs == 3 * 4 * 64 * 64


def _conv_model(op: str, in_shape, filt_shape, out_shape, stride, padding, depth_multiplier=1):
    w = ModelWriter()
    x = w.add_tensor("x", in_shape, "int8", scale=0.1)
    f = w.add_tensor("f", filt_shape, "int8", data=np.ones(filt_shape, np.int8), scale=0.1)
    y = w.add_tensor("y", out_shape, "int8", scale=0.1)
    w.add_operator(op, [x, f, -1], [y], stride=stride, padding=padding,
                   depth_multiplier=depth_multiplier)
    return parse_model(w.build([x], [y]))


def test_strides_and_padding_when_the_output_shape_is_missing():
    # No stored output shape: derived from input 9x9, 3x3 kernel, stride 2.
    same = _conv_model("CONV_2D", (1, 9, 9, 4), (6, 3, 3, 4), (), 2, "SAME")
    assert count_ops(same).macs == 5 * 5 * 6 * 3 * 3 * 4  # ceil(9/2) = 5
    valid = _conv_model("CONV_2D", (1, 9, 9, 4), (6, 3, 3, 4), (), 2, "VALID")
    assert count_ops(valid).macs == 4 * 4 * 6 * 3 * 3 * 4  # (9-3)/2+1 = 4


def test_grouped_conv_counts_the_filter_depth():
    # 8 input channels in 2 groups: the filter holds 4 input channels per output channel.
    grouped = _conv_model("CONV_2D", (1, 6, 6, 8), (8, 3, 3, 4), (1, 6, 6, 8), 1, "SAME")
    assert count_ops(grouped).macs == 6 * 6 * 8 * 3 * 3 * 4


def test_depthwise_with_multiplier():
    m = _conv_model("DEPTHWISE_CONV_2D", (1, 10, 10, 4), (1, 3, 3, 8), (1, 5, 5, 8), 2, "SAME",
                    depth_multiplier=2)
    assert count_ops(m).macs_by_type == {"DEPTHWISE_CONV_2D": 5 * 5 * 8 * 3 * 3}


def test_unknown_shapes_are_reported_not_guessed():
    m = _conv_model("CONV_2D", (1, 0, 0, 4), (6, 3, 3, 4), (), 1, "SAME")
    counted = count_ops(m)
    assert counted.macs == 0 and counted.unknown == (0,)
    assert macs_per_op(m) == {}


@pytest.mark.shared
@pytest.mark.parametrize("name, published_macs", [
    ("mobilenet_v1_0.25_128_quant.tflite", 14e6),
    ("mobilenet_v2_1.0_224_quant.tflite", 300e6),
])
def test_published_mac_counts(name, published_macs):
    counted = count_ops(load_model(SHARED / name))
    assert counted.macs == pytest.approx(published_macs, rel=0.04)
    assert not counted.unknown


@pytest.mark.shared
def test_compiled_model_is_opaque():
    counted = count_ops(load_model(SHARED / "mobilenet_v1_0.25_128_quant_edgetpu.tflite"))
    assert counted.opaque and counted.macs == 0
    assert counted.other_ops == {"edgetpu-custom-op": 1}
