"""Operations per inference, from the model graph alone (no runtime).

The canonical MAC counter of edgeapp: `bench` turns it into achieved TOPS, `check` may use it
to weigh operators. Only the multiply-accumulate operators count as "ops", the way accelerator
vendors count them: one MAC = 2 ops (a multiply and an add).

    CONV_2D            N·OH·OW·O · KH·KW·(I/groups)   filter [O, KH, KW, I/groups]
    DEPTHWISE_CONV_2D  N·OH·OW·(C·M) · KH·KW           filter [1, KH, KW, C·M]
    FULLY_CONNECTED    (output elements) · I           weights [O, I]
    TRANSPOSE_CONV     N·H·W·I · KH·KW·O               per INPUT pixel; weights [O, KH, KW, I]
    BATCH_MATMUL       (output elements) · K           A [..., M, K] (adj_x: [..., K, M])

Strides, padding and dilation act through the output shape, which the converter stores; when
an output shape is missing or dynamic it is derived from the input shape, strides and padding.
Groups act through the filter's input depth. Everything else (adds, pooling, activations,
reshapes...) is counted separately, by type and by output elements, never folded into "ops".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from typing_extensions import TypedDict

from edgeapp.core.compat import prod
from edgeapp.core.tflite.model import Operator, TfliteModel
from edgeapp.core.tflite.schema import PADDING

MAC_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "BATCH_MATMUL")



class OpCountJson(TypedDict):
    """An OpCount as bench's and check's JSON show it."""
    macs: int
    ops: int
    mac_operators: int
    macs_by_type: Dict[str, int]
    other_ops: Dict[str, int]
    other_elements: int
    uncounted_operators: List[int]
    opaque: bool


@dataclass(frozen=True)
class OpCount:
    """What one inference of a model costs, as counted from its graph."""

    macs: int  # multiply-accumulates of the MAC operators
    macs_by_op: dict[int, int]  # operator index -> MACs (MAC operators only)
    macs_by_type: dict[str, int]  # CONV_2D -> MACs summed over all conv layers, ...
    mac_operators: int  # how many MAC operators
    other_ops: dict[str, int] = field(default_factory=dict)  # op name -> operator count
    other_elements: int = 0  # output elements of the other operators (a rough extra-work gauge)
    unknown: tuple[int, ...] = ()  # MAC operators whose shapes did not allow a count
    opaque: bool = False  # the graph hides its work (edgetpu-custom-op): count is not the model's

    @property
    def ops(self) -> int:
        """Operations per inference: 2 × MACs."""
        return 2 * self.macs

    def to_dict(self) -> OpCountJson:
        return {"macs": self.macs, "ops": self.ops, "mac_operators": self.mac_operators,
                "macs_by_type": dict(self.macs_by_type), "other_ops": dict(self.other_ops),
                "other_elements": self.other_elements, "uncounted_operators": list(self.unknown),
                "opaque": self.opaque}


def _numel(shape: tuple[int, ...]) -> int:
    return prod(max(int(d), 0) for d in shape) if shape else 1


def _known(shape: Optional[tuple[int, ...]], rank: int) -> bool:
    return shape is not None and len(shape) == rank and all(int(d) > 0 for d in shape)


def _tensor_shape(model: TfliteModel, index: int) -> Optional[tuple[int, ...]]:
    if index < 0 or index >= len(model.tensors):
        return None
    return tuple(int(d) for d in model.tensors[index].shape)


def _io_shape(model: TfliteModel, indices: tuple[int, ...], k: int) -> Optional[tuple[int, ...]]:
    """Shape of an operator's k-th input or output; None when a damaged model lacks it."""
    return _tensor_shape(model, indices[k]) if k < len(indices) else None


def _out_size(size: int, kernel: int, stride: int, dilation: int, padding: int) -> int:
    """Spatial output size as TFLite computes it (SAME / VALID)."""
    stride = max(stride, 1)
    if padding == PADDING["SAME"]:
        return (size + stride - 1) // stride
    effective = (kernel - 1) * max(dilation, 1) + 1
    return max((size - effective + stride) // stride, 0)


def _spatial_out(model: TfliteModel, op: Operator, kernel_hw: tuple[int, int]
                 ) -> Optional[tuple[int, int, int]]:
    """(N, OH, OW) of a conv: from its output tensor, else from input shape and options."""
    out = _io_shape(model, op.outputs, 0)
    if _known(out, 4):
        return out[0], out[1], out[2]
    inp = _io_shape(model, op.inputs, 0)
    if not _known(inp, 4):
        return None
    padding = op.option("padding", "b", 0)
    sw, sh = op.option("stride_w", "i", 1), op.option("stride_h", "i", 1)
    dw, dh = op.option("dilation_w_factor", "i", 1), op.option("dilation_h_factor", "i", 1)
    return (inp[0], _out_size(inp[1], kernel_hw[0], sh, dh, padding),
            _out_size(inp[2], kernel_hw[1], sw, dw, padding))


def op_macs(model: TfliteModel, op: Operator) -> Optional[int]:
    """MACs of one operator; 0 for non-MAC operators; None when its shapes are unknown."""
    name = op.op
    if name not in MAC_OPS:
        return 0
    if name == "CONV_2D":
        w = _io_shape(model, op.inputs, 1)
        if not _known(w, 4):
            return None
        o, kh, kw, i_per_group = w
        nhw = _spatial_out(model, op, (kh, kw))
        return None if nhw is None else _numel(nhw) * o * kh * kw * i_per_group
    if name == "DEPTHWISE_CONV_2D":
        w = _io_shape(model, op.inputs, 1)
        if not _known(w, 4):
            return None
        _one, kh, kw, channels = w  # channels = input depth × depth multiplier
        nhw = _spatial_out(model, op, (kh, kw))
        return None if nhw is None else _numel(nhw) * channels * kh * kw
    if name == "FULLY_CONNECTED":
        w = _io_shape(model, op.inputs, 1)
        if not _known(w, 2):
            return None
        units, depth = w
        out = _io_shape(model, op.outputs, 0)
        if out and all(d > 0 for d in out):
            return _numel(out) * depth
        inp = _io_shape(model, op.inputs, 0)
        if inp and all(d > 0 for d in inp):
            return (_numel(inp) // depth) * units * depth
        return None
    if name == "TRANSPOSE_CONV":
        # inputs: output_shape, weights [O, KH, KW, I], input [N, H, W, I], (bias)
        w = _io_shape(model, op.inputs, 1)
        inp = _io_shape(model, op.inputs, 2)
        if not (_known(w, 4) and _known(inp, 4)):
            return None
        o, kh, kw, _i = w
        return _numel(inp) * kh * kw * o
    if name == "BATCH_MATMUL":
        a = _io_shape(model, op.inputs, 0)
        out = _io_shape(model, op.outputs, 0)
        if not a or len(a) < 2 or not out or any(d <= 0 for d in out):
            return None
        k = a[-2] if op.option("adj_x", "b", 0) else a[-1]
        return _numel(out) * k if k > 0 else None
    return None


def macs_per_op(model: TfliteModel) -> dict[int, int]:
    """Operator index -> MACs per inference, for every MAC operator whose shapes are known."""
    out = {}
    for op in model.operators:
        if op.op in MAC_OPS:
            m = op_macs(model, op)
            if m is not None:
                out[op.index] = m
    return out


def count_ops(model: TfliteModel) -> OpCount:
    """Count MACs (by operator and by type) and the other operators of the main subgraph."""
    by_op: dict[int, int] = {}
    by_type: Counter = Counter()
    other: Counter = Counter()
    other_elements = 0
    unknown = []
    mac_operators = 0
    for op in model.operators:
        if op.op in MAC_OPS:
            mac_operators += 1
            m = op_macs(model, op)
            if m is None:
                unknown.append(op.index)
                continue
            by_op[op.index] = m
            by_type[op.op] += m
        else:
            other[op.op] += 1
            for t in op.outputs:
                shape = _tensor_shape(model, t)
                if shape is not None and all(d > 0 for d in shape):
                    other_elements += _numel(shape)
    return OpCount(macs=sum(by_op.values()), macs_by_op=by_op, macs_by_type=dict(by_type),
                   mac_operators=mac_operators, other_ops=dict(other),
                   other_elements=other_elements, unknown=tuple(unknown),
                   opaque=model.is_edgetpu_compiled)
