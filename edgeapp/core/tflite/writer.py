"""A small TFLite flatbuffer writer: int8 graphs of FULLY_CONNECTED / CONV_2D layers.

Built directly on the `flatbuffers` package's Builder with the field slots of
tensorflow/lite/schema/schema.fbs, so it works where only a TFLite *runtime* is installed
(tflite-runtime ships no schema bindings, TensorFlow is not needed). It writes what `bench
--synthetic` needs and no more; `edgeapp.core.tflite.model.load_model` reads the result back.

    w = ModelWriter("two dense layers")
    x = w.add_tensor("x", (1, 64), "int8", scale=0.05, zero_point=0)
    ...
    w.add_operator("FULLY_CONNECTED", [x, weights, bias], [y])
    data = w.build(inputs=[x], outputs=[y])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from edgeapp.core.tflite.schema import (
    ACTIVATIONS,
    BUILTIN_OPS,
    BUILTIN_OPTIONS,
    PADDING,
    TENSOR_TYPES,
    options_type,
)

SCHEMA_VERSION = 3
# The op versions that declare int8 kernels.
_INT8_VERSION = {"CONV_2D": 3, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 4}
_BYTE_FIELDS = ("padding", "fused_activation_function")  # enums stored as int8
_BUFFER_ALIGN = 16  # constant data aligned for the runtime's SIMD kernels


@dataclass
class _TensorDef:
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: int
    scale: tuple[float, ...] = ()
    zero_point: tuple[int, ...] = ()
    quantized_dimension: int = 0


@dataclass
class _OperatorDef:
    op: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: dict = field(default_factory=dict)


class ModelWriter:
    """Collects tensors and operators of one subgraph, then serialises a .tflite file."""

    def __init__(self, description: str = "edgeapp tflite_writer") -> None:
        self.description = description
        self._tensors: list[_TensorDef] = []
        self._operators: list[_OperatorDef] = []
        self._buffers: list[bytes] = [b""]  # buffer 0: the schema's empty sentinel

    def add_tensor(self, name: str, shape: Sequence[int], dtype: str, *,
                   data: Optional[np.ndarray] = None, scale: float | Sequence[float] | None = None,
                   zero_point: int | Sequence[int] | None = None,
                   quantized_dimension: int = 0) -> int:
        """Add a tensor (constant when `data` is given); return its index."""
        if dtype not in TENSOR_TYPES:
            raise ValueError(f"unknown tensor type {dtype!r}")
        shape = tuple(int(d) for d in shape)
        buffer = 0
        if data is not None:
            arr = np.ascontiguousarray(data, dtype=np.dtype(dtype))
            if arr.shape != shape:
                raise ValueError(f"tensor {name}: data shape {arr.shape} != {shape}")
            self._buffers.append(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
            buffer = len(self._buffers) - 1
        scales = () if scale is None else tuple(float(s) for s in np.atleast_1d(scale))
        zeros = () if zero_point is None else tuple(int(z) for z in np.atleast_1d(zero_point))
        if scales and not zeros:
            zeros = (0,) * len(scales)
        if scales and len(zeros) != len(scales):
            raise ValueError(f"tensor {name}: {len(scales)} scales but {len(zeros)} zero points")
        self._tensors.append(_TensorDef(name, shape, dtype, buffer, scales, zeros,
                                        quantized_dimension))
        return len(self._tensors) - 1

    def add_operator(self, op: str, inputs: Sequence[int], outputs: Sequence[int], *,
                     padding: str = "SAME", stride: int | tuple[int, int] = 1,
                     activation: str = "NONE", dilation: int | tuple[int, int] = 1,
                     depth_multiplier: int = 1) -> None:
        """Add a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED operator (execution order)."""
        if op not in _INT8_VERSION:
            raise ValueError(f"tflite_writer does not write {op} (only {', '.join(_INT8_VERSION)})")
        for t in (*inputs, *outputs):
            if not -1 <= t < len(self._tensors):
                raise ValueError(f"{op}: no tensor {t}")
        sh, sw = (stride, stride) if isinstance(stride, int) else stride
        dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
        self._operators.append(_OperatorDef(op, tuple(inputs), tuple(outputs), {
            "padding": PADDING[padding], "stride_h": sh, "stride_w": sw, "dilation_h_factor": dh,
            "dilation_w_factor": dw, "fused_activation_function": ACTIVATIONS[activation],
            "depth_multiplier": depth_multiplier}))

    # -- serialisation -----------------------------------------------------------------------

    def build(self, inputs: Sequence[int], outputs: Sequence[int]) -> bytes:
        """The finished flatbuffer (file identifier TFL3)."""
        import flatbuffers

        size = sum(len(b) for b in self._buffers) + 4096 + 256 * len(self._tensors)
        b = flatbuffers.Builder(size)
        # Big constant data first (deepest in the file), each aligned.
        buffer_offsets = [self._buffer_table(b, data) for data in self._buffers]
        tensor_offsets = [self._tensor_table(b, t) for t in self._tensors]
        codes = sorted({o.op for o in self._operators}, key=lambda n: BUILTIN_OPS.index(n))
        op_offsets = [self._operator_table(b, o, codes.index(o.op)) for o in self._operators]

        sg_name = b.CreateString("main")
        sg_tensors = offset_vector(b, tensor_offsets)
        sg_inputs = int32_vector(b, inputs)
        sg_outputs = int32_vector(b, outputs)
        sg_ops = offset_vector(b, op_offsets)
        b.StartObject(5)  # SubGraph
        b.PrependUOffsetTRelativeSlot(0, sg_tensors, 0)
        b.PrependUOffsetTRelativeSlot(1, sg_inputs, 0)
        b.PrependUOffsetTRelativeSlot(2, sg_outputs, 0)
        b.PrependUOffsetTRelativeSlot(3, sg_ops, 0)
        b.PrependUOffsetTRelativeSlot(4, sg_name, 0)
        subgraph = b.EndObject()

        code_offsets = []
        for name in codes:
            code = BUILTIN_OPS.index(name)
            b.StartObject(4)  # OperatorCode
            b.PrependInt8Slot(0, min(code, 127), 0)  # deprecated_builtin_code
            b.PrependInt32Slot(2, _INT8_VERSION[name], 1)
            b.PrependInt32Slot(3, code, 0)
            code_offsets.append(b.EndObject())

        description = b.CreateString(self.description)
        codes_vec = offset_vector(b, code_offsets)
        subgraphs_vec = offset_vector(b, [subgraph])
        buffers_vec = offset_vector(b, buffer_offsets)
        b.StartObject(5)  # Model (fields 0..4 used)
        b.PrependUint32Slot(0, SCHEMA_VERSION, 0)
        b.PrependUOffsetTRelativeSlot(1, codes_vec, 0)
        b.PrependUOffsetTRelativeSlot(2, subgraphs_vec, 0)
        b.PrependUOffsetTRelativeSlot(3, description, 0)
        b.PrependUOffsetTRelativeSlot(4, buffers_vec, 0)
        model = b.EndObject()
        b.Finish(model, file_identifier=b"TFL3")
        return bytes(b.Output())

    def write(self, path: str | Path, inputs: Sequence[int], outputs: Sequence[int]) -> Path:
        p = Path(path)
        p.write_bytes(self.build(inputs, outputs))
        return p

    @staticmethod
    def _buffer_table(b, data: bytes) -> int:
        return buffer_table(b, data)

    @staticmethod
    def _tensor_table(b, t: _TensorDef) -> int:
        return tensor_table(b, t.name, t.shape, t.dtype, t.buffer, t.scale, t.zero_point,
                            t.quantized_dimension)

    @staticmethod
    def _operator_table(b, o: _OperatorDef, opcode_index: int) -> int:
        opt = o.options
        fields = BUILTIN_OPTIONS[o.op][1]
        b.StartObject(len(fields))
        for slot, name in enumerate(fields):
            if name not in opt:
                continue
            ints = (b.PrependInt8Slot if name in _BYTE_FIELDS else b.PrependInt32Slot)
            ints(slot, opt[name], 1 if name.startswith("dilation") else 0)
        options = b.EndObject()
        ins = int32_vector(b, o.inputs)
        outs = int32_vector(b, o.outputs)
        b.StartObject(5)  # Operator
        b.PrependUint32Slot(0, opcode_index, 0)
        b.PrependUOffsetTRelativeSlot(1, ins, 0)
        b.PrependUOffsetTRelativeSlot(2, outs, 0)
        b.PrependUint8Slot(3, options_type(o.op), 0)
        b.PrependUOffsetTRelativeSlot(4, options, 0)
        return b.EndObject()


def buffer_table(b, data: bytes) -> int:
    """A Buffer table holding `data` (aligned for the runtime's SIMD kernels); empty: none."""
    vec = None
    if data:
        b.StartVector(1, len(data), _BUFFER_ALIGN)
        b.head -= len(data)
        b.Bytes[b.head:b.head + len(data)] = data
        vec = b.EndVector()
    b.StartObject(1)  # Buffer
    if vec is not None:
        b.PrependUOffsetTRelativeSlot(0, vec, 0)
    return b.EndObject()


def tensor_table(b, name: str, shape: Sequence[int], dtype: str, buffer: int,
                 scale: Sequence[float] = (), zero_point: Sequence[int] = (),
                 quantized_dimension: int = 0) -> int:
    """A Tensor table (shape, type, buffer, name, quantization); zero points default to 0."""
    quant = None
    if scale:
        scales = b.CreateNumpyVector(np.asarray(scale, dtype="<f4"))
        zeros = b.CreateNumpyVector(np.asarray(zero_point or (0,) * len(scale), dtype="<i8"))
        b.StartObject(7)  # QuantizationParameters
        b.PrependUOffsetTRelativeSlot(2, scales, 0)
        b.PrependUOffsetTRelativeSlot(3, zeros, 0)
        b.PrependInt32Slot(6, quantized_dimension, 0)
        quant = b.EndObject()
    name_off = b.CreateString(name)
    shape_off = int32_vector(b, shape)
    b.StartObject(5)  # Tensor
    b.PrependUOffsetTRelativeSlot(0, shape_off, 0)
    b.PrependInt8Slot(1, TENSOR_TYPES.index(dtype), 0)
    b.PrependUint32Slot(2, buffer, 0)
    b.PrependUOffsetTRelativeSlot(3, name_off, 0)
    if quant is not None:
        b.PrependUOffsetTRelativeSlot(4, quant, 0)
    return b.EndObject()


def int32_vector(b, values: Sequence[int]) -> int:
    """A little-endian int32 vector (tensor and operator index lists)."""
    return b.CreateNumpyVector(np.asarray(list(values), dtype="<i4"))


def offset_vector(b, offsets: Sequence[int]) -> int:
    """A vector of tables (offsets), in the order given."""
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


# -- int8 layer helpers ------------------------------------------------------------------------

@dataclass(frozen=True)
class Activation:
    """An int8 activation tensor being threaded through a stack of layers."""

    index: int
    shape: tuple[int, ...]
    scale: float
    zero_point: int


def int8_input(w: ModelWriter, name: str, shape: Sequence[int], scale: float,
               zero_point: int = 0) -> Activation:
    idx = w.add_tensor(name, shape, "int8", scale=scale, zero_point=zero_point)
    return Activation(idx, tuple(shape), scale, zero_point)


def dense_layer(w: ModelWriter, x: Activation, weights: np.ndarray, bias: np.ndarray,
                weight_scale: float, out_scale: float, out_zero_point: int = 0,
                name: str = "dense", activation: str = "NONE") -> Activation:
    """FULLY_CONNECTED: int8 weights [units, depth] (per-tensor scale), int32 bias [units]."""
    units, depth = weights.shape
    wi = w.add_tensor(f"{name}/weights", weights.shape, "int8", data=weights,
                      scale=weight_scale, zero_point=0)
    bi = w.add_tensor(f"{name}/bias", (units,), "int32", data=bias,
                      scale=x.scale * weight_scale, zero_point=0)
    out_shape = (int(np.prod(x.shape)) // depth, units)
    oi = w.add_tensor(name, out_shape, "int8", scale=out_scale, zero_point=out_zero_point)
    w.add_operator("FULLY_CONNECTED", [x.index, wi, bi], [oi], activation=activation)
    return Activation(oi, out_shape, out_scale, out_zero_point)


def conv_layer(w: ModelWriter, x: Activation, filters: np.ndarray, bias: np.ndarray,
               weight_scales: Sequence[float], out_scale: float, out_zero_point: int = 0,
               stride: int = 1, padding: str = "SAME", name: str = "conv",
               activation: str = "NONE") -> Activation:
    """CONV_2D on NHWC: int8 filters [O, KH, KW, I] (per-output-channel scales), int32 bias [O]."""
    o, kh, kw, _i = filters.shape
    n, h, wd, _c = x.shape
    ws = np.asarray(weight_scales, dtype=np.float64)
    fi = w.add_tensor(f"{name}/filters", filters.shape, "int8", data=filters,
                      scale=ws, zero_point=[0] * o, quantized_dimension=0)
    bi = w.add_tensor(f"{name}/bias", (o,), "int32", data=bias, scale=x.scale * ws,
                      zero_point=[0] * o)
    if padding == "SAME":
        oh, ow = -(-h // stride), -(-wd // stride)
    else:
        oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out_shape = (n, oh, ow, o)
    oi = w.add_tensor(name, out_shape, "int8", scale=out_scale, zero_point=out_zero_point)
    w.add_operator("CONV_2D", [x.index, fi, bi], [oi], padding=padding, stride=stride,
                   activation=activation)
    return Activation(oi, out_shape, out_scale, out_zero_point)
