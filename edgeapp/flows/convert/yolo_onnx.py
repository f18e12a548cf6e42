"""Ultralytics YOLO detection exports (YOLOv8, YOLO11, YOLOv5u) recognised in an ONNX file and
cut where the Edge TPU's int8 stops helping, before TensorFlow loads (needs only `onnx`).

Recognised by the graph (the Detect head: per level a Concat(axis=1) of a box Conv with
4 x 16 DFL channels and a class Conv with nc channels; the DFL's 1x1 Conv with weights 0..15)
and by the metadata_props Ultralytics writes (names, imgsz, stride, task).

The cut keeps everything up to those Convs; their outputs, flattened and joined over the levels
in TensorFlow (`join_levels`), become the int8 model's two: DFL box logits (1, N, 64) and class
logits (1, N, nc), each quantized with its own scale. The decode (softmax
over the bins, anchors, strides, sigmoid), which in one int8 output would share a scale between
pixel coordinates and 0..1 scores, runs on the CPU in float (core/vision/yolo.py, the `dfl` layout).
Other detectors (classic YOLOv5, end-to-end exports, NonMaxSuppression in the graph) are
refused, saying what is converted.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from edgeapp.core.meta import UltralyticsMetadata
from edgeapp.errors import ConvertError

REG_MAX = 16  # DFL bins per box side in v8/11/v5u heads
SUPPORTED = ("edgeapp converts Ultralytics YOLOv8, YOLO11 and YOLOv5u detection exports "
             "(format='onnx', static size, batch 1)")
DETECTOR_OPS = ("NonMaxSuppression", "TopK", "RoiAlign")


@dataclass
class YoloHead:
    """An Ultralytics Detect head found in an ONNX graph."""

    names: dict  # class id -> name
    nc: int
    strides: tuple  # per level
    grids: list  # (h, w) per level
    box_convs: list  # tensor names of the box Convs' outputs (1, 64, h, w), per level
    cls_convs: list  # tensor names of the class Convs' outputs (1, nc, h, w), per level
    metadata: UltralyticsMetadata = field(default_factory=dict)  # type: ignore[assignment]  # metadata_props, parsed
    rewrites: list = field(default_factory=list)  # blocks rewritten for the Edge TPU (attention.py)

    @property
    def anchors(self) -> int:
        return sum(h * w for h, w in self.grids)


def metadata(model) -> UltralyticsMetadata:
    """The model's metadata_props with Python literals parsed (Ultralytics writes str() of
    each value: names as a dict literal, imgsz as a list)."""
    out: UltralyticsMetadata = {}
    for p in model.metadata_props:
        try:
            out[p.key] = ast.literal_eval(p.value)
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            out[p.key] = p.value
    return out


def _names(meta: UltralyticsMetadata) -> Optional[dict]:
    names = meta.get("names")
    if isinstance(names, list):
        names = dict(enumerate(names))
    if not isinstance(names, dict):
        return None
    try:
        return {int(k): str(v) for k, v in names.items()}
    except (TypeError, ValueError):
        return None


def find_head(model, path: Path) -> Optional[YoloHead]:
    """The Ultralytics Detect head of `model` (shapes inferred at batch 1, static size), None for
    a model that is no detector at all; ConvertError (exit 6) for a detector edgeapp does not
    convert, saying what it converts."""
    meta = metadata(model)
    names = _names(meta)
    ultralytics = "ultralytics" in str(meta.get("author", "")).lower() or "task" in meta
    task = meta.get("task")
    if ultralytics and task == "classify":
        return None  # a plain classifier: converted as any other
    if ultralytics and task not in (None, "detect"):
        raise ConvertError(f"{path}: an Ultralytics {task} export; {SUPPORTED}")
    if meta.get("end2end") is True:
        raise ConvertError(f"{path}: an end-to-end (NMS-free) Ultralytics export; {SUPPORTED}; "
                           "export again with end2end=False")
    head = _graph_head(model, names)
    if head is not None:
        head.metadata = meta
        _check_output(model, head, path)
        return head
    ops = {n.op_type for n in model.graph.node}
    if ultralytics or names is not None and "stride" in meta:
        what = "an Ultralytics export" if ultralytics else "a YOLOv5 (classic, anchor-based) export"
        raise ConvertError(f"{path}: {what} without the Detect head edgeapp knows (box Convs of "
                           f"{4 * REG_MAX} DFL channels beside class Convs); {SUPPORTED}")
    found = sorted(ops & set(DETECTOR_OPS))
    if found:
        raise ConvertError(f"{path}: a detector ending in {', '.join(found)} (post-processing inside "
                           f"the graph, which the Edge TPU cannot run); {SUPPORTED}")
    return None


def _check_output(model, head: YoloHead, path: Path) -> None:
    """The export's own output must be the plain (1, 4 + nc, N): the float original that
    agreement runs (an export with nms=True ends in its own NMS)."""
    shapes = tensor_shapes(model)
    outs = [shapes.get(o.name) for o in model.graph.output]
    if outs != [[1, 4 + head.nc, head.anchors]]:
        raise ConvertError(f"{path}: an Ultralytics export with outputs {outs}, not [1, {4 + head.nc}, "
                           f"{head.anchors}]; {SUPPORTED}: export with nms=False")


def _graph_head(model, names: Optional[dict]) -> Optional[YoloHead]:
    """The head's last Convs: reached walking back from the outputs through the decode (and
    through the DFL's own Conv) without passing another Conv; 64-channel ones carry the DFL box
    logits, the others the class logits; grouped into levels by grid size."""
    dfl = _dfl_conv(model)
    if dfl is None:
        return None
    produced = {o: n for n in model.graph.node for o in n.output}
    weights = {i.name: i for i in model.graph.initializer}
    shapes = tensor_shapes(model)
    convs = _last_convs(model, produced, dfl)
    by_grid: dict = {}
    for conv in convs:
        shape = shapes.get(conv.output[0])
        if not shape or len(shape) != 4 or None in shape or conv.input[1] not in weights:
            return None
        by_grid.setdefault((shape[2], shape[3]), []).append((int(weights[conv.input[1]].dims[0]), conv))
    levels = []
    for (h, w), found in sorted(by_grid.items(), key=lambda kv: -kv[0][0] * kv[0][1]):
        pair = _box_and_classes(found, model, dfl)
        if pair is None:
            return None
        levels.append((h, w) + pair)
    ncs = {lv[4] for lv in levels}
    inp = shapes.get(_input_name(model))
    if len(levels) not in (3, 4) or len(ncs) != 1 or not inp or None in inp[2:]:
        return None
    nc = ncs.pop()
    strides = tuple(int(inp[2]) // lv[0] for lv in levels)
    if names is None or len(names) != nc:
        names = {i: str(names.get(i, i)) if names else str(i) for i in range(nc)}
    return YoloHead(names, nc, strides, [(lv[0], lv[1]) for lv in levels], [lv[2] for lv in levels],
                    [lv[3] for lv in levels])


def _last_convs(model, produced: dict, dfl) -> list:
    """Convs feeding the outputs through Conv-free paths (the DFL's Conv walked through)."""
    seen, found, todo = set(), [], [o.name for o in model.graph.output]
    while todo:
        node = produced.get(todo.pop())
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op_type == "Conv" and node is not dfl:
            found.append(node)
            continue
        todo.extend(node.input)
    return found


def _box_and_classes(found: list, model, dfl) -> Optional[tuple]:
    """(box Conv output, class Conv output, nc) of one level: the Conv with 4 x 16 channels and
    the other; with 64 classes too, the box Conv is the first input of the Concat joining them
    (Ultralytics 8.0-8.3) or the one whose values reach the DFL (8.4)."""
    if len(found) != 2:
        return None
    (c0, n0), (c1, n1) = found
    if c0 == c1 == 4 * REG_MAX:
        users = [n for n in model.graph.node if n.op_type == "Concat" and list(n.input[:2]) in (
            [n0.output[0], n1.output[0]], [n1.output[0], n0.output[0]])]
        if users:
            box, cls = (n0, n1) if users[0].input[0] == n0.output[0] else (n1, n0)
        else:
            reach = [_reaches_dfl(n, model, dfl) for n in (n0, n1)]
            if reach.count(True) != 1:
                return None
            box, cls = (n0, n1) if reach[0] else (n1, n0)
        return box.output[0], cls.output[0], c1
    if 4 * REG_MAX not in (c0, c1):
        return None
    box, cls, nc = (n0, n1, c1) if c0 == 4 * REG_MAX else (n1, n0, c0)
    return box.output[0], cls.output[0], nc


def _reaches_dfl(conv, model, dfl) -> bool:
    """Whether `conv`'s values flow into the DFL's Conv without passing another Conv."""
    todo, seen = [conv.output[0]], set()
    while todo:
        tensor = todo.pop()
        for node in model.graph.node:
            if tensor in node.input and id(node) not in seen:
                seen.add(id(node))
                if node is dfl:
                    return True
                if node.op_type != "Conv":
                    todo.extend(node.output)
    return False


def _dfl_conv(model):
    """The DFL's 1x1 Conv: 16 input channels, one output, weights 0, 1, ..., 15."""
    from onnx import numpy_helper

    weights = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Conv" and len(node.input) >= 2 and node.input[1] in weights:
            w = weights[node.input[1]]
            if tuple(w.dims) == (1, REG_MAX, 1, 1):
                if np.allclose(numpy_helper.to_array(w).ravel(), np.arange(REG_MAX)):
                    return node
    return None


def _input_name(model) -> str:
    inits = {i.name for i in model.graph.initializer}
    return next(i.name for i in model.graph.input if i.name not in inits)


def tensor_shapes(model) -> dict:
    """Tensor name -> static shape (ints, or None per unknown dim), from ONNX shape inference."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # inference is a help: a graph it cannot follow has no head found
        inferred = model
    out = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        dims = v.type.tensor_type.shape.dim
        out[v.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    return out


def cut_head(model, head: YoloHead):
    """A copy of `model` ending at the head's Convs: its outputs are the box Convs' then the
    class Convs' (1, C, h, w), finest level first; `join_levels` makes the two outputs of them.

    The flattening is not left to onnx2tf: its Reshape of a tensor whose channels equal its
    height and width (80 classes on the 80x80 grid of a 640 input) adds a TRANSPOSE, which
    compiler 16 leaves on the CPU."""
    import onnx
    from onnx import TensorProto, helper

    cut = onnx.ModelProto()
    cut.CopyFrom(model)
    graph = cut.graph
    del graph.output[:]
    for tensors, width in ((head.box_convs, 4 * REG_MAX), (head.cls_convs, head.nc)):
        for t, (h, w) in zip(tensors, head.grids):
            graph.output.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, [1, width, h, w]))
    _prune(graph)
    return cut


def join_levels(outputs: list, head: YoloHead, reshape, concat) -> list:
    """The cut graph's outputs, channels-last (N, h, w, C), as the two the int8 model ends in:
    [DFL box logits (N, anchors, 64), class logits (N, anchors, nc)], anchors in Ultralytics'
    order (level, row, column). `reshape`/`concat` are TensorFlow's or numpy's."""
    levels = len(head.grids)
    joined = []
    for part, width in ((outputs[:levels], 4 * REG_MAX), (outputs[levels:], head.nc)):
        joined.append(concat([reshape(t, (-1, h * w, width)) for t, (h, w) in zip(part, head.grids)]))
    return joined


def _prune(graph) -> None:
    """Drop the nodes (and initializers) no output needs any more: the original decode."""
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(list(graph.node)):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(node.input)
    keep.reverse()
    del graph.node[:]
    graph.node.extend(keep)
    inits = [i for i in graph.initializer if i.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    del graph.value_info[:]
