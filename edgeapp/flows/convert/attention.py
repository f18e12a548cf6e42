"""Ultralytics' attention (the `Attention` of YOLO11's C2PSA and YOLOv10's PSA) rewritten in the
ONNX graph into operators the Edge TPU maps, computing the same float function.

The export computes, per head, p = softmax(qᵀk · scale) over the key positions, then v pᵀ: a
MatMul of two activations (TFLite BATCH_MATMUL) and TRANSPOSEs, which compiler 16 leaves on the
CPU; as it makes one Edge TPU subgraph, everything after them (the neck, the head) follows.
Rewritten per head, with N = H·W positions, in the channels-last layout TensorFlow runs:

* q, k and v are channel slices of the qkv Conv's output, (N, 1, C) after a reshape;
* scores[n, m] = Σ_c q[n, c]·k[m, c]: a broadcast MUL of q (N, 1, dk) by k (1, N, dk), SUM over
  the channels;
* the softmax over m one query row at a time (the Edge TPU's SOFTMAX takes a 1-D tensor):
  SPLIT of the (N, N) scores into rows, one SOFTMAX each, CONCATENATION;
* out[n, c] = Σ_m p[n, m]·v[m, c]: a broadcast MUL of p (N, N, 1) by v (1, N, dh), SUM over m.

Only reshapes that keep the memory order, no transpose, once onnx2tf has converted it: it turns
the Transpose to (1, H, W, C) that starts the block into nothing (its tensor already is), keeps
every tensor after a Reshape as ONNX has it, and the Transpose back to (1, C, H, W) meets its
inverse before the position Conv's Add (the TFLite converter folds both). Products whose last
three sizes would be equal, (1, N, N, N), are split in two: onnx2tf takes such a tensor for a
channels-first one. onnx2tf picks a Concat's axis by comparing with ONNX Runtime up to a
transpose, so the rows are joined as 2-D (N, N), where no other axis fits.

Recognised by the graph, not by names: a MatMul of two activations, an optional scalar Mul, a
Softmax over the last axis, a Transpose of the last two axes and a MatMul by v, where q, k and v
are one Split of one Reshape of a (1, C, H, W) tensor into (1, heads, 2·dk + dh, N). Anything
else is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from edgeapp.flows.convert.yolo_onnx import tensor_shapes

SWAP_LAST = [0, 1, 3, 2]


@dataclass
class Attention:
    """One recognised attention block: what the rewrite reads, writes and replaces."""

    source: str  # the (1, heads·(2·dk + dh), H, W) tensor q, k and v are sliced from
    heads: int
    key_dim: int
    head_dim: int
    height: int
    width: int
    scale: float  # the product of the scalar Muls (and 1 / Divs) on q, k or the scores
    output: str  # (1, heads·dh, H, W): the block's result, v attnᵀ reshaped
    v_outputs: list  # (1, heads·dh, H, W) tensors that are v reshaped back (the position Conv's)
    nodes: list = field(default_factory=list)  # the nodes replaced
    name: str = ""  # the first MatMul's node name, a scope for the new nodes

    @property
    def positions(self) -> int:
        return self.height * self.width

    @property
    def scope(self) -> str:
        """The block's name scope in the export (/model.10/m/m.0/attn), else its MatMul's name."""
        return self.name.rsplit("/", 1)[0] if "/" in self.name.strip("/") else (self.name or self.output)

    def describe(self) -> str:
        return (f"{self.scope}: {self.heads} head(s), {self.positions} positions "
                f"({self.height}x{self.width}), key dim {self.key_dim}, value dim {self.head_dim}")


class _Graph:
    """Who makes and who reads each tensor of a graph, its static shapes and constants."""

    def __init__(self, model) -> None:
        from onnx import numpy_helper

        self.made = {o: n for n in model.graph.node for o in n.output}
        self.users: dict = {}
        for n in model.graph.node:
            for i in n.input:
                self.users.setdefault(i, []).append(n)
        self.outputs = {o.name for o in model.graph.output}
        self.consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        for n in model.graph.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        self.shapes = _shapes(model)

    def only_user(self, tensor: str):
        users = self.users.get(tensor, [])
        return users[0] if len(users) == 1 and tensor not in self.outputs else None

    def scalar(self, tensor: str) -> Optional[float]:
        value = self.consts.get(tensor)
        return float(value.reshape(())) if value is not None and value.size == 1 else None

    def is_activation(self, tensor: str) -> bool:
        return tensor not in self.consts


def _shapes(model) -> dict:
    """Tensor name -> static shape, for the tensors ONNX shape inference fixes completely."""
    return {k: v for k, v in tensor_shapes(model).items() if v and None not in v}


def _attr(node, name: str, default=None):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _scaled(g: _Graph, tensor: str, forward: bool) -> tuple:
    """(tensor, scale, Mul/Div node or None) through an optional multiplication or division by a
    scalar constant: forward from `tensor` to its one user, or back to what made it."""
    node = g.only_user(tensor) if forward else g.made.get(tensor)
    if node is None or node.op_type not in ("Mul", "Div") or len(node.input) != 2:
        return tensor, 1.0, None
    a, b = node.input
    other = b if (a == tensor if forward else g.is_activation(a)) else a
    value = g.scalar(other)
    if value is None or (node.op_type == "Div" and other != node.input[1]) or value == 0:
        return tensor, 1.0, None
    nxt = node.output[0] if forward else (a if other == b else b)
    return nxt, (1.0 / value if node.op_type == "Div" else value), node


def _is_swap(node) -> bool:
    return node is not None and node.op_type == "Transpose" and list(_attr(node, "perm", [])) == SWAP_LAST


def _tail(g: _Graph, first) -> Optional[tuple]:
    """From the scores MatMul to the block's output: (scale, nodes, v, output)."""
    scores, scale, mul = _scaled(g, first.output[0], True)
    soft = g.only_user(scores)
    if soft is None or soft.op_type != "Softmax" or _attr(soft, "axis", -1) not in (-1, 3):
        return None
    swap = g.only_user(soft.output[0])
    second = g.only_user(swap.output[0]) if _is_swap(swap) else None
    if second is None or second.op_type != "MatMul" or second.input[1] != swap.output[0]:
        return None
    back = g.only_user(second.output[0])
    if back is None or back.op_type != "Reshape":
        return None
    nodes = [n for n in (mul, soft, swap, second, back) if n is not None]
    return scale, nodes, second.input[0], back.output[0]


def _head(g: _Graph, first) -> Optional[tuple]:
    """From the scores MatMul back to q and k: (q, k, scale, nodes)."""
    swap = g.made.get(first.input[0])
    if not _is_swap(swap) or g.only_user(swap.output[0]) is not first:
        return None
    q, q_scale, q_mul = _scaled(g, swap.input[0], False)
    k, k_scale, k_mul = _scaled(g, first.input[1], False)
    q_reader = q_mul if q_mul is not None else swap
    k_reader = k_mul if k_mul is not None else first
    if g.only_user(q) is not q_reader or g.only_user(k) is not k_reader:
        return None  # q or k read elsewhere too: they must stay
    nodes = [n for n in (q_mul, swap, k_mul) if n is not None]
    return q, k, q_scale * k_scale, nodes


def _qkv(g: _Graph, q: str, k: str, v: str) -> Optional[tuple]:
    """The Split of the Reshape that q, k and v come from: (source, heads, dk, dh, H, W, nodes)."""
    split = g.made.get(q)
    if split is None or split.op_type != "Split" or list(split.output) != [q, k, v]:
        return None
    reshape = g.made.get(split.input[0])
    if reshape is None or reshape.op_type != "Reshape" or g.only_user(reshape.output[0]) is not split:
        return None
    src, mid = g.shapes.get(reshape.input[0]), g.shapes.get(reshape.output[0])
    qs, ks, vs = (g.shapes.get(t) for t in (q, k, v))
    if not (src and mid and qs and ks and vs) or len(src) != 4 or len(mid) != 4 or src[0] != 1:
        return None
    _, heads, per, n = mid
    dk, dh = qs[2], vs[2]
    if _attr(split, "axis", 0) not in (2, -2) or ks[2] != dk or 2 * dk + dh != per:
        return None
    if heads * per != src[1] or n != src[2] * src[3] or mid[0] != 1:
        return None
    return reshape.input[0], heads, dk, dh, src[2], src[3], [reshape, split]


def _v_reshapes(g: _Graph, v: str, second, want: list) -> Optional[list]:
    """The other readers of v: Reshapes back to (1, heads·dh, H, W) only (the position Conv's
    input); None when v has another use."""
    found = []
    for user in g.users.get(v, []):
        if user is second:
            continue
        if user.op_type != "Reshape" or g.shapes.get(user.output[0]) != want:
            return None
        found.append(user)
    return found


def match(g: _Graph, first) -> Optional[Attention]:
    """The attention block whose scores MatMul is `first`, or None."""
    if first.op_type != "MatMul" or not all(g.is_activation(t) for t in first.input):
        return None
    tail, head = _tail(g, first), _head(g, first)
    if tail is None or head is None:
        return None
    scale, tail_nodes, v, output = tail
    q, k, head_scale, head_nodes = head
    qkv = _qkv(g, q, k, v)
    if qkv is None:
        return None
    source, heads, dk, dh, h, w, qkv_nodes = qkv
    want = [1, heads * dh, h, w]
    v_users = _v_reshapes(g, v, tail_nodes[-2], want)
    if v_users is None or g.shapes.get(output) != want:
        return None
    return Attention(source, heads, dk, dh, h, w, scale * head_scale, output,
                     [n.output[0] for n in v_users], qkv_nodes + head_nodes + [first] + tail_nodes + v_users,
                     first.name)


def find_attention(model) -> list:
    """The attention blocks of `model` (static shapes, as onnx_graph.fixed_model makes them)."""
    g = _Graph(model)
    found = []
    for node in model.graph.node:
        block = match(g, node) if node.op_type == "MatMul" else None
        if block is not None:
            found.append(block)
    return found


class _Builder:
    """New nodes, their constants and unique names, for one block."""

    def __init__(self, scope: str, opset: int, taken: set) -> None:
        self.scope, self.opset, self.taken = scope, opset, taken
        self.nodes: list = []
        self.inits: list = []

    def name(self, base: str) -> str:
        n, out = 0, f"{self.scope}/{base}"
        while out in self.taken:
            n += 1
            out = f"{self.scope}/{base}_{n}"
        self.taken.add(out)
        return out

    def const(self, value, base: str) -> str:
        from onnx import numpy_helper

        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list, base: str, outputs: int = 1, **attrs) -> list:
        from onnx import helper

        name = self.name(base)
        outs = [name + "_output_0"] if outputs == 1 else [f"{name}_output_{i}" for i in range(outputs)]
        self.taken.update(outs)
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs

    def reshape(self, x: str, shape: list, base: str) -> str:
        return self.op("Reshape", [x, self.const(np.array(shape, np.int64), base + "_shape")], base)[0]

    def split(self, x: str, sizes: list, axis: int, base: str) -> list:
        if self.opset >= 13:
            return self.op("Split", [x, self.const(np.array(sizes, np.int64), base + "_sizes")], base,
                           outputs=len(sizes), axis=axis)
        return self.op("Split", [x], base, outputs=len(sizes), axis=axis, split=sizes)

    def reduce_sum(self, x: str, axis: int, base: str) -> str:
        if self.opset >= 13:
            return self.op("ReduceSum", [x, self.const(np.array([axis], np.int64), base + "_axes")], base,
                           keepdims=1)[0]
        return self.op("ReduceSum", [x], base, axes=[axis], keepdims=1)[0]


def _chunks(b: _Builder, x: str, size: int, positions: int, base: str) -> list:
    """`x` split along its last axis so that no product is (1, N, N, N) (see the docstring)."""
    if size != positions or size % 2:
        return [x]
    return b.split(x, [size // 2] * 2, 3, base)


def _one_head(b: _Builder, a: Attention, q: str, k: str, v: str, i: int) -> str:
    """out (1, N, 1, dh) of head i from its q, k (1, N, 1, dk) and v (1, N, 1, dh)."""
    n, dk, dh = a.positions, a.key_dim, a.head_dim
    if a.scale != 1.0:
        q = b.op("Mul", [q, b.const(np.array(a.scale, np.float32), f"h{i}/scale")], f"h{i}/q_scaled")[0]
    k = b.reshape(k, [1, 1, n, dk], f"h{i}/k_columns")
    v = b.reshape(v, [1, 1, n, dh], f"h{i}/v_columns")
    parts = [b.reduce_sum(b.op("Mul", [qc, kc], f"h{i}/qk")[0], 3, f"h{i}/qk_sum")
             for qc, kc in zip(_chunks(b, q, dk, n, f"h{i}/q_parts"), _chunks(b, k, dk, n, f"h{i}/k_parts"))]
    scores = parts[0]
    for part in parts[1:]:
        scores = b.op("Add", [scores, part], f"h{i}/scores")[0]  # (1, N, N, 1)
    rows = b.split(b.reshape(scores, [n, n], f"h{i}/scores_2d"), [1] * n, 0, f"h{i}/rows")  # (1, N) each
    probs = [b.op("Softmax", [row], f"h{i}/softmax{r}", axis=1)[0] for r, row in enumerate(rows)]
    p = b.op("Concat", probs, f"h{i}/p_rows", axis=0)[0]  # (N, N)
    p = b.reshape(p, [1, n, n, 1], f"h{i}/p")
    outs = [b.reduce_sum(b.op("Mul", [p, vc], f"h{i}/pv")[0], 2, f"h{i}/pv_sum")
            for vc in _chunks(b, v, dh, n, f"h{i}/v_parts")]  # (1, N, 1, dh)
    return outs[0] if len(outs) == 1 else b.op("Concat", outs, f"h{i}/out", axis=3)[0]


def _build(b: _Builder, a: Attention) -> dict:
    """The block's new nodes into `b`; returns the old tensor names -> the new ones."""
    sizes = [a.key_dim, a.key_dim, a.head_dim] * a.heads
    c3 = sum(sizes)
    nhwc = b.op("Transpose", [a.source], "qkv_nhwc", perm=[0, 2, 3, 1])[0]  # nothing after onnx2tf
    rows = b.reshape(nhwc, [1, a.positions, 1, c3], "qkv_rows")
    parts = b.split(rows, sizes, 3, "qkv")
    outs = [_one_head(b, a, *parts[3 * i:3 * i + 3], i) for i in range(a.heads)]
    out = outs[0] if a.heads == 1 else b.op("Concat", outs, "heads", axis=3)[0]
    out = b.reshape(out, [1, a.height, a.width, a.heads * a.head_dim], "out_nhwc")
    out = b.op("Transpose", [out], "out", perm=[0, 3, 1, 2])[0]
    vs = b.split(a.source, sizes, 1, "v")[2::3]  # channels-first, for the position Conv
    v = vs[0] if a.heads == 1 else b.op("Concat", vs, "v_heads", axis=1)[0]
    return {a.output: out, **{t: v for t in a.v_outputs}}


def rewrite_attention(model) -> tuple:
    """(a copy of `model` with every recognised attention block rewritten, their descriptions);
    `model` itself when there is none."""
    import onnx

    blocks = find_attention(model)
    if not blocks:
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), 13)
    taken = {n.name for n in graph.node} | {t for n in graph.node for t in n.output} | \
        {i.name for i in graph.initializer}
    nodes = [_copy(n) for n in graph.node]
    for a in blocks:
        b = _Builder(a.scope + "/edgetpu", opset, taken)
        renamed = _build(b, a)
        gone = {n.output[0] for n in a.nodes}  # a node's first output names it
        at = min(i for i, n in enumerate(nodes) if n.output[0] in gone)
        nodes = nodes[:at] + b.nodes + [n for n in nodes[at:] if n.output[0] not in gone]
        for n in nodes:
            for j, t in enumerate(n.input):
                if t in renamed:
                    n.input[j] = renamed[t]
        for o in graph.output:
            if o.name in renamed:  # a block's output that is the graph's: keep the name
                nodes.append(onnx.helper.make_node("Identity", [renamed[o.name]], [o.name]))
        graph.initializer.extend(b.inits)
    del graph.node[:]
    graph.node.extend(nodes)
    _drop_unused(graph)
    del graph.value_info[:]
    try:
        out = onnx.shape_inference.infer_shapes(out)
    except Exception:  # inference is a help, not a requirement: onnx2tf infers again
        pass
    return out, [a.describe() for a in blocks]


def _copy(node):
    from onnx import NodeProto

    out = NodeProto()
    out.CopyFrom(node)
    return out


def _drop_unused(graph) -> None:
    """Initializers no node reads any more (the old Reshape shapes, Split sizes, scales)."""
    used = {t for n in graph.node for t in n.input}
    keep = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
