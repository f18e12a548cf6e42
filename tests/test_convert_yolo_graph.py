"""Ultralytics YOLO ONNX exports recognised and cut before their decode, and other detectors
refused, before TensorFlow loads: stand-in exports built with onnx.helper (tests/yolo_onnx_models.py)
run through ONNX Runtime and edgeapp's own decoder (core/vision/yolo.py).
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yolo_onnx_models as standin
from conftest import ROOT

from edgeapp.core.vision import yolo
from edgeapp.errors import ConvertError, ExitCode, InvalidModel

onnx = pytest.importorskip("onnx", reason="the onnx extra: pip install -e '.[dev]'")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra")

from edgeapp.flows.convert import yolo_onnx  # noqa: E402 (needs onnx)
from edgeapp.flows.convert.onnx_graph import fixed_model, image_input  # noqa: E402


def head_of(path: Path):
    model = onnx.load(str(path))
    fixed = fixed_model(model, image_input(model, None, path))
    return fixed, yolo_onnx.find_head(fixed, path)


@pytest.mark.parametrize("joined", [False, True], ids=["8.4-apart", "8.3-joined"])
@pytest.mark.parametrize("nc", [1, 3, 64])
def test_head_found_and_cut_decodes_as_the_export_does(tmp_path, joined, nc):
    """The cut graph's two outputs, decoded on the CPU by core/vision/yolo.py (the `dfl` layout), give
    the boxes and scores the whole export computes itself, on every anchor."""
    path = standin.ultralytics_like(tmp_path / "m.onnx", size=64, nc=nc, joined=joined, seed=nc)
    fixed, head = head_of(path)
    assert head.nc == nc and head.strides == (8, 16, 32) and head.grids == [(8, 8), (4, 4), (2, 2)]
    assert head.anchors == 84 and head.metadata["task"] == "detect"
    assert head.names == (standin.NAMES if nc == 3 else {i: f"class{i}" for i in range(nc)})
    cut = yolo_onnx.cut_head(fixed, head)
    assert {n.op_type for n in cut.graph.node} == {"Conv", "Sigmoid", "Mul"}  # the decode is gone
    x = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
    whole = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"])
    parts = ort.InferenceSession(cut.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = whole.run(None, {"images": x})[0][0]  # (4 + nc, N): xywh in pixels, scores
    convs = parts.run(None, {"images": x})
    assert [c.shape for c in convs] == [(1, 64, 8, 8), (1, 64, 4, 4), (1, 64, 2, 2),
                                        (1, nc, 8, 8), (1, nc, 4, 4), (1, nc, 2, 2)]
    boxes, logits = yolo_onnx.join_levels([c.transpose(0, 2, 3, 1) for c in convs], head, np.reshape,
                                          lambda ts: np.concatenate(ts, axis=1))
    assert boxes.shape == (1, 84, 64) and logits.shape == (1, 84, nc)
    layout = yolo.sidecar_layout({"layout": "dfl", "boxes": 0, "scores": 1}, [boxes.shape, logits.shape],
                                 (64, 64))
    found = yolo.decode([boxes, logits], [(0.0, 0), (0.0, 0)], layout, (64, 64), conf=0.0)
    assert len(found.boxes) == 84  # every anchor passes conf 0: same order as the export's
    cx, cy, w, h = ref[:4]
    want = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    np.testing.assert_allclose(found.boxes, want, atol=1e-3)
    np.testing.assert_allclose(found.scores, ref[4:].max(axis=0), atol=1e-5)


@pytest.mark.parametrize("arch", ["yolov8", "yolo11", "yolov5u"])
def test_ultralytics_own_exports_are_recognised(arch):
    """The fixtures Ultralytics 8.4 exported itself (tests/fixtures/yolo_onnx)."""
    fixed, head = head_of(ROOT / "tests" / "fixtures" / "yolo_onnx" / f"{arch}_shapes_256.onnx")
    assert head.names == standin.NAMES and head.metadata["imgsz"] == [256, 256]
    assert head.strides == (8, 16, 32) and head.anchors == 1344
    cut = yolo_onnx.cut_head(fixed, head)
    assert [o.name for o in cut.graph.output] == head.box_convs + head.cls_convs
    assert yolo_onnx._dfl_conv(cut) is None and len(cut.graph.node) < len(fixed.graph.node)  # decode gone


def test_names_without_metadata_are_class_numbers(tmp_path):
    _, head = head_of(standin.ultralytics_like(tmp_path / "bare.onnx", metadata=False))
    assert head.names == {0: "0", 1: "1", 2: "2"} and head.metadata == {}


def test_a_classifier_is_no_detector(tmp_path):
    path = ROOT / "tests" / "fixtures" / "onnx" / "colors_nchw.onnx"
    assert head_of(path)[1] is None
    model = onnx.load(str(path))  # an Ultralytics classify export is a classifier like any other
    for k, v in standin.ultralytics_props({0: "a", 1: "b", 2: "c"}, 16, "classify").items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    onnx.save(model, str(tmp_path / "cls.onnx"))
    assert head_of(tmp_path / "cls.onnx")[1] is None


@pytest.mark.parametrize("build, says", [
    (lambda p: standin.classic_yolov5(p), "YOLOv5 (classic, anchor-based)"),
    (lambda p: standin.with_nms(p), "ending in NonMaxSuppression"),
    (lambda p: standin.ultralytics_like(p, task="segment"), "Ultralytics segment export"),
    (lambda p: standin.ultralytics_like(p, props={"end2end": "True"}), "end-to-end (NMS-free)"),
    (lambda p: standin.ultralytics_like(p, transposed=True), "export with nms=False"),
], ids=["yolov5", "nms-op", "segment", "end2end", "not-plain-output"])
def test_other_detectors_are_refused(tmp_path, build, says):
    path = build(tmp_path / "det.onnx")
    with pytest.raises(ConvertError, match="YOLOv8, YOLO11 and YOLOv5u") as e:
        head_of(path)
    assert says in str(e.value)


def test_refusal_is_one_line_and_exit_6_before_tensorflow(tmp_path):
    path = standin.classic_yolov5(tmp_path / "yolov5s.onnx")
    photos = tmp_path / "photos"
    photos.mkdir()
    from PIL import Image

    Image.new("RGB", (40, 30), (90, 30, 200)).save(photos / "a.png")
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "convert", str(path), "-o", str(tmp_path / "o.tflite"),
                           "-c", str(photos)], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == ExitCode.CONVERT_FAILED, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "YOLOv5 (classic, anchor-based)" in lines[0] and "YOLOv8, YOLO11 and YOLOv5u" in lines[0]
    assert not (tmp_path / "o.tflite").exists()


def test_sidecar_layout_tells_64_classes_from_box_logits():
    shapes = [(1, 2100, 64), (1, 2100, 64)]
    with pytest.raises(InvalidModel, match="both DFL outputs are 64 wide"):
        yolo.find_yolo_layout(shapes, (320, 320))
    t = yolo.sidecar_layout({"layout": "dfl", "boxes": 1, "scores": 0}, shapes, (320, 320))
    assert (t.kind, t.boxes, t.scores, t.classes) == ("dfl", 1, 0, 64)
    with pytest.raises(InvalidModel, match="not the dfl layout its sidecar names"):
        yolo.sidecar_layout({"layout": "dfl", "boxes": 0, "scores": 1}, [(1, 2100, 3), (1, 2100, 64)], (320, 320))


def test_one_class_dfl_outputs_are_read_without_a_sidecar():
    t = yolo.find_yolo_layout([(1, 2100, 64), (1, 2100, 1)], (320, 320))
    assert (t.kind, t.boxes, t.scores, t.classes) == ("dfl", 0, 1, 1)
