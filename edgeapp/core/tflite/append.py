"""Append tensors and operators to an EXISTING .tflite, keeping every byte of it.

`retrain` puts a new head after an embedding extractor, compiled ones included, whose
edgetpu-custom-op carries an opaque options blob that must survive untouched. So the model is
not decoded and re-encoded: its bytes are kept whole at the end of the new file, and a new root
is written in front of them. Flatbuffer references are relative and point forward, so the new
root's tables can refer to the old operator codes, tensors, operators, buffers, metadata,
description and other subgraphs exactly where they are; only what changes is new: the first
subgraph (its tensor, operator and output lists), the operator-code and buffer lists, and the
signatures whose outputs moved. The old root stays behind as a few dead bytes.

The old bytes start on a 16-byte boundary (padded at their end if needed), so every alignment
inside them holds. Buffers stored outside the flatbuffer (models over 2 GB) are addressed from
the start of the file and would move: such models are refused.

Only the `flatbuffers` package is needed, with the field slots of tensorflow/lite/schema/schema.fbs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from edgeapp.core.tflite.model import _Corrupt, _Table, parse_model
from edgeapp.core.tflite.schema import BUILTIN_OPS, option_slot, options_type
from edgeapp.core.tflite.writer import buffer_table, int32_vector, offset_vector, tensor_table
from edgeapp.errors import InvalidModel

_ALIGN = 16
_MODEL_FIELDS = 8  # version .. signature_defs; later fields (external buffers) are refused
_OPTION_KINDS = {"fused_activation_function": "b", "weights_format": "b", "keep_num_dims": "?",
                 "asymmetric_quantize_inputs": "?", "beta": "f"}


@dataclass(frozen=True)
class NewTensor:
    """A tensor to add; constant when `data` is given. Its index is len(model.tensors) + its
    position in the list passed to `append_operators`."""

    name: str
    shape: tuple
    dtype: str
    data: Optional[np.ndarray] = None
    scale: tuple = ()
    zero_point: tuple = ()


@dataclass(frozen=True)
class NewOperator:
    op: str  # a builtin whose options schema.BUILTIN_OPTIONS knows
    inputs: tuple
    outputs: tuple
    version: int = 1
    options: dict = field(default_factory=dict)  # field name -> value


@dataclass
class _Old:
    """Where the parts of the old model are (byte positions in it)."""

    version: int
    opcodes: list  # (builtin code, custom code, version)
    opcode_pos: list
    subgraph_pos: list
    buffer_pos: list
    empty_buffer: Optional[int]  # an old buffer without data, for new activation tensors
    description: Optional[int]
    metadata_buffer: Optional[int]
    metadata: Optional[int]
    signatures: list  # _Table of each SignatureDef
    tensor_pos: list
    operator_pos: list
    inputs: Optional[int]
    outputs: tuple
    name: Optional[int]
    debug_metadata: Optional[int]


def append_operators(data: bytes, tensors: Sequence[NewTensor], operators: Sequence[NewOperator],
                     outputs: Sequence[int], name: str = "<model>") -> bytes:
    """The model `data` with `tensors` and `operators` added to its first subgraph, whose
    outputs become `outputs`; signatures naming the old outputs name the new ones."""
    parse_model(data, name)  # validated: every position read below is inside the file
    try:
        old = _locate(bytes(data), name)
    except _Corrupt as e:
        raise InvalidModel(f"{name} is truncated or corrupt ({e})") from None
    import flatbuffers

    blob = bytes(data) + b"\0" * (-len(data) % _ALIGN)
    size = len(blob)
    b = flatbuffers.Builder(size + 4096 + sum(_nbytes(t) + 256 for t in tensors))
    b.Prep(_ALIGN, size)
    b.head -= size
    b.Bytes[b.head:b.head + size] = blob

    def at(pos: int) -> int:  # the builder's offset of an object of the old bytes
        return size - pos

    buffers = [at(p) for p in old.buffer_pos]
    empty = old.empty_buffer
    if empty is None:
        buffers.append(_buffer(b, b""))
        empty = len(buffers) - 1
    tensor_offs = [at(p) for p in old.tensor_pos]
    for t in tensors:
        index = empty
        if t.data is not None:
            buffers.append(_buffer(b, _raw(t)))
            index = len(buffers) - 1
        tensor_offs.append(_tensor(b, t, index))
    codes = [at(p) for p in old.opcode_pos]
    code_index: dict = {}
    op_offs = [at(p) for p in old.operator_pos]
    for o in operators:
        key = (BUILTIN_OPS.index(o.op), o.version)
        if key not in code_index:
            found = [i for i, (c, custom, v) in enumerate(old.opcodes) if (c, v) == key and not custom]
            if found:
                code_index[key] = found[0]
            else:
                codes.append(_opcode(b, *key))
                code_index[key] = len(codes) - 1
        op_offs.append(_operator(b, o, code_index[key]))
    subgraph = _subgraph(b, old, tensor_offs, op_offs, outputs, at)
    signatures = [_signature(b, s, dict(zip(old.outputs, outputs)), at) for s in old.signatures]
    root = _model(b, old, codes, [subgraph] + [at(p) for p in old.subgraph_pos[1:]], buffers,
                  signatures, at)
    b.Finish(root, file_identifier=b"TFL3")
    return bytes(b.Output())


def _nbytes(t: NewTensor) -> int:
    return 0 if t.data is None else int(np.asarray(t.data).nbytes)


def _raw(t: NewTensor) -> bytes:
    arr = np.ascontiguousarray(t.data, dtype=np.dtype(t.dtype).newbyteorder("<"))
    if tuple(arr.shape) != tuple(t.shape):
        raise ValueError(f"tensor {t.name}: data shape {arr.shape} != {t.shape}")
    return arr.tobytes()


def _locate(buf: bytes, name: str) -> _Old:
    root = _Table(buf, int.from_bytes(buf[:4], "little"))
    for slot in range(_MODEL_FIELDS, (root.vt_len - 4) // 2):
        if root._off(slot):
            raise InvalidModel(f"{name} keeps tensor data outside the flatbuffer (external "
                               "buffers), which edgeapp cannot rewrite")
    opcodes, opcode_pos = [], []
    for t in root.tables(1):
        opcodes.append((max(t.scalar(3, "i"), t.scalar(0, "b")), t.string(1), t.scalar(2, "i", 1)))
        opcode_pos.append(t.pos)
    buffer_tables = root.tables(4)
    empty = None
    for i, t in enumerate(buffer_tables):
        if t.scalar(1, "Q") > 1:
            raise InvalidModel(f"{name} stores buffers outside the flatbuffer (a model over 2 GB), "
                               "which edgeapp cannot rewrite")
        if empty is None and t.bytes_span(0)[1] == 0:
            empty = i
    subgraphs = root.tables(2)
    sg = subgraphs[0]
    for slot in range(6, (sg.vt_len - 4) // 2):
        if sg._off(slot):
            raise InvalidModel(f"{name}: its subgraph has fields newer than edgeapp knows")
    operators = sg.tables(3)
    if any(o._off(9) for o in operators):  # large_custom_options_offset: absolute, would move
        raise InvalidModel(f"{name} stores custom options outside the flatbuffer, which edgeapp "
                           "cannot rewrite")
    return _Old(
        version=root.scalar(0, "I"), opcodes=opcodes, opcode_pos=opcode_pos,
        subgraph_pos=[t.pos for t in subgraphs], buffer_pos=[t.pos for t in buffer_tables],
        empty_buffer=empty, description=root._indirect(3), metadata_buffer=root._indirect(5),
        metadata=root._indirect(6), signatures=root.tables(7),
        tensor_pos=[t.pos for t in sg.tables(0)], operator_pos=[t.pos for t in operators],
        inputs=sg._indirect(1), outputs=tuple(sg.scalars(2, "i")), name=sg._indirect(4),
        debug_metadata=sg.scalar(5, "i") if sg._off(5) else None)


def _buffer(b, data: bytes) -> int:
    return buffer_table(b, data)


def _tensor(b, t: NewTensor, buffer: int) -> int:
    return tensor_table(b, t.name, t.shape, t.dtype, buffer, t.scale, t.zero_point)


def _opcode(b, code: int, version: int) -> int:
    b.StartObject(4)  # OperatorCode
    b.PrependInt8Slot(0, min(code, 127), 0)  # deprecated_builtin_code
    b.PrependInt32Slot(2, version, 1)
    b.PrependInt32Slot(3, code, 0)
    return b.EndObject()


def _operator(b, o: NewOperator, opcode_index: int) -> int:
    options = None
    if o.options:
        b.StartObject(max(option_slot(o.op, k) for k in o.options) + 1)
        for key, value in o.options.items():
            slot, kind = option_slot(o.op, key), _OPTION_KINDS[key]
            if kind == "f":
                b.PrependFloat32Slot(slot, float(value), 0.0)
            elif kind == "?":
                b.PrependBoolSlot(slot, bool(value), False)
            else:
                b.PrependInt8Slot(slot, int(value), 0)
        options = b.EndObject()
    ins, outs = int32_vector(b, o.inputs), int32_vector(b, o.outputs)
    b.StartObject(5)  # Operator
    b.PrependUint32Slot(0, opcode_index, 0)
    b.PrependUOffsetTRelativeSlot(1, ins, 0)
    b.PrependUOffsetTRelativeSlot(2, outs, 0)
    if options is not None:
        b.PrependUint8Slot(3, options_type(o.op), 0)
        b.PrependUOffsetTRelativeSlot(4, options, 0)
    return b.EndObject()


def _subgraph(b, old: _Old, tensors: list, operators: list, outputs: Sequence[int], at) -> int:
    tensors_vec, ops_vec = offset_vector(b, tensors), offset_vector(b, operators)
    outputs_vec = int32_vector(b, outputs)
    b.StartObject(6)  # SubGraph
    b.PrependUOffsetTRelativeSlot(0, tensors_vec, 0)
    if old.inputs is not None:
        b.PrependUOffsetTRelativeSlot(1, at(old.inputs), 0)
    b.PrependUOffsetTRelativeSlot(2, outputs_vec, 0)
    b.PrependUOffsetTRelativeSlot(3, ops_vec, 0)
    if old.name is not None:
        b.PrependUOffsetTRelativeSlot(4, at(old.name), 0)
    if old.debug_metadata is not None:
        b.PrependInt32Slot(5, old.debug_metadata, -1)
    return b.EndObject()


def _signature(b, sig: _Table, moved: dict, at) -> int:
    """A SignatureDef as it was, with the outputs of the first subgraph that moved renamed."""
    if sig.scalar(4, "I") != 0 or not any(m.scalar(1, "I") in moved for m in sig.tables(1)):
        return at(sig.pos)
    maps = []
    for m in sig.tables(1):
        index = m.scalar(1, "I")
        name = m._indirect(0)
        b.StartObject(2)  # TensorMap
        if name is not None:
            b.PrependUOffsetTRelativeSlot(0, at(name), 0)
        b.PrependUint32Slot(1, moved.get(index, index), 0)
        maps.append(b.EndObject())
    outputs = offset_vector(b, maps)
    inputs, key = sig._indirect(0), sig._indirect(2)
    b.StartObject(5)  # SignatureDef: inputs, outputs, signature_key, (deprecated), subgraph_index
    if inputs is not None:
        b.PrependUOffsetTRelativeSlot(0, at(inputs), 0)
    b.PrependUOffsetTRelativeSlot(1, outputs, 0)
    if key is not None:
        b.PrependUOffsetTRelativeSlot(2, at(key), 0)
    return b.EndObject()


def _model(b, old: _Old, codes: list, subgraphs: list, buffers: list, signatures: list, at) -> int:
    codes_vec, subgraphs_vec = offset_vector(b, codes), offset_vector(b, subgraphs)
    buffers_vec = offset_vector(b, buffers)
    sigs_vec = offset_vector(b, signatures) if signatures else None
    b.StartObject(_MODEL_FIELDS)  # Model
    b.PrependUint32Slot(0, old.version, 0)
    b.PrependUOffsetTRelativeSlot(1, codes_vec, 0)
    b.PrependUOffsetTRelativeSlot(2, subgraphs_vec, 0)
    for slot, pos in ((3, old.description), (5, old.metadata_buffer), (6, old.metadata)):
        if pos is not None:
            b.PrependUOffsetTRelativeSlot(slot, at(pos), 0)
    b.PrependUOffsetTRelativeSlot(4, buffers_vec, 0)
    if sigs_vec is not None:
        b.PrependUOffsetTRelativeSlot(7, sigs_vec, 0)
    return b.EndObject()
