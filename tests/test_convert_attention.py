"""Ultralytics' attention (YOLO11's C2PSA) rewritten in the ONNX graph into operators the Edge
TPU maps (flows/convert/attention.py), before TensorFlow loads: the rewritten graph computes
what the export computes, run by ONNX Runtime on stand-in blocks (tests/yolo_onnx_models.py)
and on the trained YOLO11 fixture with real images; other graphs are left as they are.
"""

from pathlib import Path

import numpy as np
import pytest
import yolo_onnx_models as standin
from conftest import ROOT
from PIL import Image

onnx = pytest.importorskip("onnx", reason="the onnx extra: pip install -e '.[dev]'")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra")

from edgeapp.flows.convert.attention import find_attention, rewrite_attention  # noqa: E402 (needs onnx)
from edgeapp.flows.convert.onnx_graph import fixed_model, image_input  # noqa: E402

FIX = ROOT / "tests" / "fixtures" / "yolo_onnx"


def fixed(path: Path):
    model = onnx.load(str(path))
    return fixed_model(model, image_input(model, None, path))


def run(model, x: np.ndarray) -> list:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})


@pytest.mark.parametrize("heads, key_dim, size, scale_on", [
    (1, 8, 64, "q"),  # 16x16 positions
    (2, 8, 32, "scores"),  # the scale after the MatMul, as older exports write it
    (3, 32, 32, "q"),  # value dim 64 = the 8x8 positions: products split in two
])
def test_rewritten_block_computes_what_the_export_computes(tmp_path, heads, key_dim, size, scale_on):
    model = fixed(standin.with_attention(tmp_path / "m.onnx", size=size, heads=heads, key_dim=key_dim,
                                         scale_on=scale_on))
    rewritten, found = rewrite_attention(model)
    n = (size // 4) ** 2
    assert len(found) == 1 and f"{heads} head(s), {n} positions" in found[0]
    ops = [node.op_type for node in rewritten.graph.node]
    assert "MatMul" not in ops and ops.count("Softmax") == heads * n  # one 1-D softmax per query row
    onnx.checker.check_model(rewritten)
    x = np.random.default_rng(heads).random((4, 3, size, size), dtype=np.float32)
    for image in x:
        want, = run(model, image[None])
        got, = run(rewritten, image[None])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_other_graphs_are_left_as_they_are(tmp_path):
    """A YOLOv8 (its DFL's Transpose and Softmax, no attention) and a MatMul by weights."""
    model = fixed(standin.ultralytics_like(tmp_path / "v8.onnx"))
    assert rewrite_attention(model) == (model, [])
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"]),
                               helper.make_node("Softmax", ["y"], ["z"], axis=-1)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 4])], [w])
    plain = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert find_attention(plain) == []


def test_yolo11_fixture_gives_the_same_outputs_on_real_images():
    """The trained YOLO11 export (Ultralytics 8.4), its one C2PSA block rewritten: the same boxes
    and scores on held-out images, letterboxed as `detect` feeds them."""
    from edgeapp.core.vision.yolo import letterbox

    model = fixed(FIX / "yolo11_shapes_256.onnx")
    rewritten, found = rewrite_attention(model)
    assert found == ["/model.10/m/m.0/attn: 1 head(s), 64 positions (8x8), key dim 16, value dim 32"]
    assert not {"MatMul", "Transpose"} & {n.op_type for n in rewritten.graph.node if "/attn/" in n.name
                                          and "/edgetpu/" not in n.name}
    best = []
    for path in sorted((FIX / "shapes_val" / "images").glob("*.jpg"))[:4]:
        pixels = letterbox(np.asarray(Image.open(path).convert("RGB")), (256, 256))[0]
        x = (pixels.astype(np.float32) / 255).transpose(2, 0, 1)[None]
        want, = run(model, x)  # (1, 7, 1344): boxes in input pixels, then class scores
        got, = run(rewritten, x)
        np.testing.assert_allclose(got[:, :4], want[:, :4], atol=2e-3)  # pixels of 0..256
        np.testing.assert_allclose(got[:, 4:], want[:, 4:], atol=1e-5)
        best.append(want[:, 4:].max())
    assert max(best) > 0.9  # shapes are found: the comparison is not of empty outputs
