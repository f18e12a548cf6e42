"""Tiny stand-ins of Ultralytics' ONNX detection exports, built with onnx.helper (no torch).

`ultralytics_like` mirrors the graph Ultralytics' `format="onnx"` export writes for YOLOv8 /
YOLO11 / YOLOv5u (Detect head, reg_max 16): per level a box branch ending in a 1x1 Conv to 64
channels and a class branch ending in a 1x1 Conv to nc channels, joined by Concat(axis=1),
flattened and joined over the levels (Concat axis 2), split, the DFL (Reshape, Transpose,
Softmax, a 1x1 Conv with weights 0..15), dist2bbox against the anchors, times the strides, the
class sigmoid, and one output `output0` (1, 4 + nc, N) with boxes in input pixels. Its
metadata_props are Ultralytics' (names, imgsz, stride, task, ...), written as Ultralytics
writes them (str() of Python values). Weights are random: the graph's shape is what these
models test, not what they detect.

`classic_yolov5` has YOLOv5's (1, 3N, 5 + nc) output and the metadata its export.py writes;
`with_nms` ends in ONNX's NonMaxSuppression (an exporter's end-to-end detector).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OPSET = 13
NAMES = {0: "circle", 1: "square", 2: "triangle"}


class _Graph:
    def __init__(self, seed: int) -> None:
        self.nodes, self.inits, self.rng, self.n = [], [], np.random.default_rng(seed), 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, value, base: str = "c") -> str:
        from onnx import numpy_helper

        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list, name: str = "", **attrs) -> str:
        from onnx import helper

        out = self.name(name or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name or out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1, name: str = "",
             act: bool = True) -> str:
        w = self.const((self.rng.normal(0, 1.0 / np.sqrt(cin * k * k), (cout, cin, k, k))).astype(np.float32),
                       "w")
        b = self.const(self.rng.normal(0, 0.1, cout).astype(np.float32), "b")
        y = self.op("Conv", [x, w, b], name, kernel_shape=[k, k], strides=[stride, stride],
                    pads=[k // 2] * 4)
        if not act:
            return y
        return self.op("Mul", [y, self.op("Sigmoid", [y])])  # SiLU as the exporter writes it


def ultralytics_like(path: Path, size: int = 64, nc: int = 3, names: dict = None,
                     task: str = "detect", seed: int = 0, metadata: bool = True,
                     strides=(8, 16, 32), joined: bool = False, props: dict = None,
                     transposed: bool = False) -> Path:
    """A YOLOv8-shaped detector (see the module docstring), saved to `path`. Ultralytics 8.4
    flattens the box and class Convs apart (two Concats over the levels); `joined`: as 8.0-8.3,
    one Concat(axis=1) of both per level, flattened together and split. `props` are added to
    the metadata; `transposed` ends in (1, N, 4 + nc) instead (not the plain export)."""
    from onnx import TensorProto, helper

    g = _Graph(seed)
    x, cin, feats = "images", 3, []
    level_of = {s: i for i, s in enumerate(strides)}
    for i, s in enumerate((2, 4, 8, 16, 32, 64)[:len(strides) + 3]):
        cout = 8 * min(i + 1, 4)
        x = g.conv(x, cin, cout, 3, 2, name=f"/model.{i}/conv/Conv")
        cin = cout
        if s in level_of:
            feats.append((x, cout))
    head = len(strides) + 3
    levels, boxes, classes = [], [], []
    for i, (f, c) in enumerate(feats):
        b = g.conv(f, c, 16, 3, name=f"/model.{head}/cv2.{i}/cv2.{i}.0/conv/Conv")
        b = g.conv(b, 16, 64, 1, name=f"/model.{head}/cv2.{i}/cv2.{i}.2/Conv", act=False)
        c3 = max(16, min(nc, 100))  # Ultralytics' class branch width, for ch[0] = 16
        k = g.conv(f, c, c3, 3, name=f"/model.{head}/cv3.{i}/cv3.{i}.0/conv/Conv")
        k = g.conv(k, c3, c3, 3, name=f"/model.{head}/cv3.{i}/cv3.{i}.1/conv/Conv")
        k = g.conv(k, c3, nc, 1, name=f"/model.{head}/cv3.{i}/cv3.{i}.2/Conv", act=False)
        if joined:
            cat = g.op("Concat", [b, k], f"/model.{head}/Concat" + (f"_{i}" if i else ""), axis=1)
            levels.append(g.op("Reshape", [cat, g.const(np.array([1, 64 + nc, -1], np.int64))]))
        else:
            boxes.append(g.op("Reshape", [b, g.const(np.array([1, 64, -1], np.int64))]))
            classes.append(g.op("Reshape", [k, g.const(np.array([1, nc, -1], np.int64))]))
    n = sum((size // s) ** 2 for s in strides)
    if joined:
        xcat = g.op("Concat", levels, f"/model.{head}/Concat_3", axis=2)
        box, cls = g.name("box"), g.name("cls")
        g.nodes.append(helper.make_node("Split", [xcat, g.const(np.array([64, nc], np.int64))], [box, cls],
                                        name=f"/model.{head}/Split", axis=1))
    else:
        box = g.op("Concat", boxes, f"/model.{head}/Concat", axis=-1)
        cls = g.op("Concat", classes, f"/model.{head}/Concat_1", axis=-1)
    d = g.op("Reshape", [box, g.const(np.array([1, 4, 16, n], np.int64))], f"/model.{head}/dfl/Reshape")
    d = g.op("Transpose", [d], f"/model.{head}/dfl/Transpose", perm=[0, 2, 1, 3])
    d = g.op("Softmax", [d], f"/model.{head}/dfl/Softmax", axis=1)
    d = g.op("Conv", [d, g.const(np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1))],
             f"/model.{head}/dfl/conv/Conv", kernel_shape=[1, 1])
    d = g.op("Reshape", [d, g.const(np.array([1, 4, n], np.int64))], f"/model.{head}/dfl/Reshape_1")
    points, steps = _anchors(size, strides)
    lt = g.op("Slice", [d, g.const(np.array([0], np.int64)), g.const(np.array([2], np.int64)),
                        g.const(np.array([1], np.int64))], f"/model.{head}/Slice")
    rb = g.op("Slice", [d, g.const(np.array([2], np.int64)), g.const(np.array([4], np.int64)),
                        g.const(np.array([1], np.int64))], f"/model.{head}/Slice_1")
    anchors = g.const(points.T[None].astype(np.float32), "anchors")
    x1y1 = g.op("Sub", [anchors, lt], f"/model.{head}/Sub")
    x2y2 = g.op("Add", [anchors, rb], f"/model.{head}/Add_1")
    cxy = g.op("Div", [g.op("Add", [x1y1, x2y2], f"/model.{head}/Add_2"), g.const(np.float32(2))],
               f"/model.{head}/Div_1")
    wh = g.op("Sub", [x2y2, x1y1], f"/model.{head}/Sub_1")
    dbox = g.op("Mul", [g.op("Concat", [cxy, wh], f"/model.{head}/Concat_4", axis=1),
                        g.const(steps[None, None].astype(np.float32), "strides")], f"/model.{head}/Mul_2")
    scores = g.op("Sigmoid", [cls], f"/model.{head}/Sigmoid")
    out = g.op("Concat", [dbox, scores], f"/model.{head}/Concat_5", axis=1) if transposed else "output0"
    if transposed:
        g.nodes.append(helper.make_node("Transpose", [out], ["output0"], name="/Transpose", perm=[0, 2, 1]))
    else:
        g.nodes.append(helper.make_node("Concat", [dbox, scores], ["output0"], name=f"/model.{head}/Concat_5",
                                        axis=1))
    shape = [1, n, 4 + nc] if transposed else [1, 4 + nc, n]
    graph = helper.make_graph(g.nodes, "main_graph",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, shape)],
                              g.inits)
    if names is None:
        names = NAMES if nc == 3 else {i: f"class{i}" for i in range(nc)}
    meta = {**ultralytics_props(names, size, task, max(strides)), **(props or {})} if metadata else {}
    return _save(graph, path, meta)


def ultralytics_props(names: dict, size: int, task: str = "detect", stride: int = 32) -> dict:
    """metadata_props as Ultralytics' ONNX export writes them: str() of each value."""
    return {"description": "Ultralytics YOLOv8n model trained on shapes.yaml", "author": "Ultralytics",
            "date": "2026-11-27T12:00:00", "version": "8.4.190", "license": "AGPL-3.0 License",
            "docs": "https://docs.ultralytics.com", "stride": str(stride), "task": task, "batch": "1",
            "imgsz": str([size, size]), "names": str(names), "args": str({"batch": 1, "half": False}),
            "channels": "3", "end2end": "False"}


def classic_yolov5(path: Path, size: int = 64, nc: int = 3, seed: int = 1) -> Path:
    """YOLOv5's own export: one (1, 3N, 5 + nc) output, metadata {stride, names} only."""
    from onnx import TensorProto, helper

    g = _Graph(seed)
    x, cin, outs = "images", 3, []
    for i, s in enumerate((2, 4, 8, 16, 32)):
        x = g.conv(x, cin, 8, 3, 2, name=f"/model.{i}/conv/Conv")
        cin = 8
        if s >= 8:
            y = g.conv(x, 8, 3 * (5 + nc), 1, name=f"/model.24/m.{len(outs)}/Conv", act=False)
            y = g.op("Reshape", [y, g.const(np.array([1, 3, 5 + nc, -1], np.int64))])
            y = g.op("Transpose", [y], perm=[0, 1, 3, 2])
            outs.append(g.op("Reshape", [g.op("Sigmoid", [y]), g.const(np.array([1, -1, 5 + nc], np.int64))]))
    n = 3 * sum((size // s) ** 2 for s in (8, 16, 32))
    g.nodes.append(helper.make_node("Concat", outs, ["output0"], name="/model.24/Concat", axis=1))
    graph = helper.make_graph(g.nodes, "main_graph",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, n, 5 + nc])],
                              g.inits)
    return _save(graph, path, {"stride": "32", "names": str({i: f"class{i}" for i in range(nc)})})


def with_nms(path: Path, size: int = 64, seed: int = 2) -> Path:
    """A detector ending in NonMaxSuppression: boxes (1, N, 4), scores (1, 1, N) -> indices."""
    from onnx import TensorProto, helper

    g = _Graph(seed)
    x = g.conv("images", 3, 8, 3, 2)
    x = g.conv(x, 8, 8, 3, 2)
    n = (size // 4) ** 2
    boxes = g.op("Transpose", [g.op("Reshape", [g.conv(x, 8, 4, 1, act=False),
                                                 g.const(np.array([1, 4, n], np.int64))])], perm=[0, 2, 1])
    scores = g.op("Reshape", [g.op("Sigmoid", [g.conv(x, 8, 1, 1, act=False)]),
                              g.const(np.array([1, 1, n], np.int64))])
    g.nodes.append(helper.make_node("NonMaxSuppression", [boxes, scores, g.const(np.array([10], np.int64))],
                                    ["selected"], name="nms"))
    graph = helper.make_graph(g.nodes, "main_graph",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("selected", TensorProto.INT64, [None, 3])],
                              g.inits)
    return _save(graph, path, {})


def _anchors(size: int, strides) -> tuple:
    points, steps = [], []
    for s in strides:
        h = w = size // s
        ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        points.append(np.stack((xs.ravel(), ys.ravel()), axis=1) + 0.5)
        steps.append(np.full(h * w, s))
    return np.concatenate(points), np.concatenate(steps)


def _save(graph, path: Path, props: dict) -> Path:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="pytorch", producer_version="2.14.1")
    model.ir_version = 8
    for k, v in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def with_attention(path: Path, size: int = 64, heads: int = 2, key_dim: int = 8, scale_on: str = "q",
                   seed: int = 3, classes: int = 4) -> Path:
    """A small classifier around the attention block of Ultralytics' C2PSA (YOLO11), written as
    its ONNX export writes it: the qkv 1x1 Conv, Reshape to (1, heads, 2·key_dim + head_dim, N),
    Split, the scale (on q before its Transpose as torch's exporter folds it, or on the scores:
    `scale_on` "q" or "scores"), MatMul, Softmax, Transpose, MatMul by v, Reshape back, plus the
    positional depthwise Conv of v, the projection Conv; then pooled class logits."""
    from onnx import TensorProto, helper

    g = _Graph(seed)
    head_dim = 2 * key_dim
    dim = heads * head_dim
    x = g.conv("images", 3, dim, 3, 2, name="/model.0/conv/Conv")
    x = g.conv(x, dim, dim, 3, 2, name="/model.1/conv/Conv")
    h = w = size // 4
    n, per = h * w, 2 * key_dim + head_dim
    scope = "/model.2/m/m.0/attn"
    qkv = g.conv(x, dim, heads * per, 1, name=f"{scope}/qkv/conv/Conv", act=False)
    r = g.op("Reshape", [qkv, g.const(np.array([1, heads, per, n], np.int64))], f"{scope}/Reshape")
    q, k, v = g.name("q"), g.name("k"), g.name("v")
    g.nodes.append(helper.make_node("Split", [r, g.const(np.array([key_dim, key_dim, head_dim], np.int64))],
                                    [q, k, v], name=f"{scope}/Split", axis=2))
    scale = g.const(np.array(key_dim ** -0.5, np.float32), "scale")
    if scale_on == "q":
        q = g.op("Mul", [q, scale], f"{scope}/Mul")
    scores = g.op("MatMul", [g.op("Transpose", [q], f"{scope}/Transpose", perm=[0, 1, 3, 2]), k],
                  f"{scope}/MatMul")
    if scale_on == "scores":
        scores = g.op("Mul", [scores, scale], f"{scope}/Mul")
    p = g.op("Softmax", [scores], f"{scope}/Softmax", axis=-1)
    out = g.op("MatMul", [v, g.op("Transpose", [p], f"{scope}/Transpose_1", perm=[0, 1, 3, 2])],
               f"{scope}/MatMul_1")
    out = g.op("Reshape", [out, g.const(np.array([1, dim, h, w], np.int64))], f"{scope}/Reshape_1")
    v4 = g.op("Reshape", [v, g.const(np.array([1, dim, h, w], np.int64))], f"{scope}/Reshape_2")
    wpe = g.const(g.rng.normal(0, 0.3, (dim, 1, 3, 3)).astype(np.float32), "w")
    pe = g.op("Conv", [v4, wpe], f"{scope}/pe/conv/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=dim)
    x = g.op("Add", [x, g.conv(g.op("Add", [out, pe], f"{scope}/Add"), dim, dim, 1,
                               name=f"{scope}/proj/conv/Conv", act=False)])
    x = g.conv(g.op("GlobalAveragePool", [x]), dim, classes, 1, name="/head/Conv", act=False)
    g.nodes.append(helper.make_node("Flatten", [x], ["logits"], name="/head/Flatten"))
    graph = helper.make_graph(g.nodes, "main_graph",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
                              g.inits)
    return _save(graph, path, {})
