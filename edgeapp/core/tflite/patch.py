"""Operators newer than edgetpu_compiler 16, swapped in place for older ones that compute the
same int8 result.

TensorFlow 2.15+ fuses `relu6(x + 3) / 6` (HardSigmoid, and the gate of a decomposed
HardSwish) into RELU_0_TO_1, an operator compiler 16 (2019) does not know: every op after it
falls to the CPU. On int8 tensors an activation is a requantization clamped to the output
range. So RELU_0_TO_1 becomes RELU6 when its output tensor is given the range [0, 1] (scale
1/255, zero point -128): values over 1 then saturate at the top of int8, exactly the clamp at 1
(and [0, 1] is all RELU_0_TO_1 ever outputs, so the grid gets finer, not coarser). The
consumers read the tensor's new scale from the tensor itself; only ops that requantize their
inputs may consume it (not same-scale ops such as RESHAPE), and it may not be a model output.
All or nothing per operator code; the file keeps its size, a few numbers change in place.
"""

from __future__ import annotations

import struct

from edgeapp.core.tflite.model import _Table
from edgeapp.core.tflite.schema import BUILTIN_OPS

# newer op -> (the op compiler 16 knows, the output range that makes them equal)
EQUIVALENT_OLDER_OPS = {"RELU_0_TO_1": ("RELU6", 0.0, 1.0)}
REQUANTIZING_CONSUMERS = ("MUL", "ADD", "SUB", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def _op_name(code: _Table) -> str:
    builtin = max(code.scalar(3, "i"), code.scalar(0, "b"))
    return BUILTIN_OPS[builtin] if 0 <= builtin < len(BUILTIN_OPS) else ""


def older_equivalents(data: bytes) -> tuple[bytes, list]:
    """`data` with every op of EQUIVALENT_OLDER_OPS replaced where it can be, and what was."""
    buf = bytearray(data)
    root = _Table(bytes(data), struct.unpack_from("<I", data, 0)[0])
    codes = root.tables(1)
    names = [_op_name(c) for c in codes]
    targets = [i for i, n in enumerate(names) if n in EQUIVALENT_OLDER_OPS]
    subgraphs = root.tables(2)
    if not targets or len(subgraphs) != 1:
        return data, []
    sg = subgraphs[0]
    tensors, ops, outputs = sg.tables(0), sg.tables(3), set(sg.scalars(2, "i"))
    done = []
    for code_index in targets:
        new, low, high = EQUIVALENT_OLDER_OPS[names[code_index]]
        mine = [o for o in ops if o.scalar(0, "I") == code_index]
        outs = [o.scalars(2, "i")[0] for o in mine if len(o.scalars(2, "i")) == 1]
        if len(outs) != len(mine) or not all(_replaceable(t, ops, names, outputs, tensors) for t in outs):
            continue
        for t in outs:
            _set_range(buf, tensors[t], low, high)
        value = BUILTIN_OPS.index(new)
        code = codes[code_index]
        struct.pack_into("<b", buf, code.pos + code._off(0), value)
        struct.pack_into("<i", buf, code.pos + code._off(3), value)
        done.append(f"{names[code_index]} -> {new} ({len(mine)} op(s))")
    return bytes(buf), done


def _replaceable(t: int, ops: list, names: list, outputs: set, tensors: list) -> bool:
    if t in outputs or t < 0 or t >= len(tensors):
        return False
    tensor = tensors[t]
    q = tensor.table(4)
    if tensor.scalar(1, "b") != 9 or q is None:  # 9 = INT8
        return False
    if len(q.scalars(2, "f")) != 1 or len(q.scalars(3, "q")) != 1:
        return False
    consumers = [names[o.scalar(0, "I")] for o in ops if t in o.scalars(1, "i")]
    return all(c in REQUANTIZING_CONSUMERS for c in consumers)


def _set_range(buf: bytearray, tensor: _Table, low: float, high: float) -> None:
    """The int8 tensor's quantization set to [low, high] (scale, zero point, and min/max when
    the file records them)."""
    q = tensor.table(4)
    scale = (high - low) / 255.0
    zero = int(round(-128 - low / scale))
    for slot, fmt, value in ((2, "f", scale), (3, "q", zero), (0, "f", low), (1, "f", high)):
        start, n = q._vector(slot, struct.calcsize(fmt))
        if n == 1:
            struct.pack_into("<" + fmt, buf, start, value)


def replace_constants(data: bytes, values: dict) -> bytes:
    """`data` with constant tensors' bytes replaced in place (tensor index -> new raw bytes of
    the same length); a buffer another tensor also reads is refused (ValueError), since the
    change would reach that tensor too."""
    buf = bytearray(data)
    root = _Table(bytes(data), struct.unpack_from("<I", data, 0)[0])
    buffers = root.tables(4)
    tensors = root.tables(2)[0].tables(0)
    readers: dict = {}
    for t in tensors:
        readers[t.scalar(2, "I")] = readers.get(t.scalar(2, "I"), 0) + 1
    for index, raw in values.items():
        b = tensors[index].scalar(2, "I")
        start, n = buffers[b].bytes_span(0)
        if readers.get(b, 0) != 1 or n != len(raw) or not n:
            raise ValueError(f"tensor {index}: its buffer is shared, external or of another size")
        buf[start:start + n] = raw
    return bytes(buf)


def set_min_max(data: bytes, ranges: dict) -> bytes:
    """`data` with tensors' recorded ranges (a calibrated float model's min/max, which the
    quantizer reads) replaced in place (tensor index -> (low, high)); a tensor without a
    one-value min and max is refused (ValueError)."""
    buf = bytearray(data)
    root = _Table(bytes(data), struct.unpack_from("<I", data, 0)[0])
    tensors = root.tables(2)[0].tables(0)
    for index, (low, high) in ranges.items():
        q = tensors[index].table(4)
        spans = [q._vector(slot, 4) for slot in (0, 1)] if q is not None else []
        if len(spans) != 2 or any(n != 1 for _, n in spans):
            raise ValueError(f"tensor {index}: no recorded min/max to replace")
        for (start, _), value in zip(spans, (low, high)):
            struct.pack_into("<f", buf, start, float(value))
    return bytes(buf)
