"""Which rules of the Edge TPU compiler one operator breaks on its own, from the file alone.

Rule 1 of `edgetpu_rules` (which then propagates these findings over the graph): tensor data
types, static sizes and ranks, the operators of `SUPPORTED` and their documented limits, and
operator versions newer than compiler 16 knows. The limits are a table, `LIMIT_RULES`: operator
name -> a small function giving that operator's findings, so a new limit is one function and
one table line. Pure functions over `tflite_model.Model`, plus optionally the file's bytes to
read small constant tensors (Mean axes, Pad paddings, StridedSlice strides).
"""

from __future__ import annotations

import struct
from typing import Callable, Iterator, Optional

from edgeapp.core.compat import prod
from edgeapp.core.tflite.model import EDGETPU_CUSTOM_OP, Operator, Tensor, TfliteModel, _Table
from edgeapp.core.tflite.schema import ACTIVATIONS, options_type

SOFTMAX_MAX_ELEMENTS = 16000
COMPILER_VERSION = 16

# The Edge TPU runtime version each operator needs where that is newer than 13 (Coral's
# "Supported operations" table, column "Runtime version required"). Compilers 14 and 15 emit
# runtime 13 and leave these on the CPU; compiler 16 emits runtime 14 and maps them.
RUNTIME_14_OPS = frozenset({"LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM", "RSQRT", "SQUARED_DIFFERENCE",
                            "TRANSPOSE"})

# Operators of the compiler-16 table. TRANSPOSE is listed (runtime 14) but compiler 16 leaves
# it on the CPU in practice ("otherwise supported, but not mapped"): see _special().
SUPPORTED = frozenset({
    "ADD", "AVERAGE_POOL_2D", "CONCATENATION", "CONV_2D", "DEPTHWISE_CONV_2D", "EXPAND_DIMS",
    "FULLY_CONNECTED", "L2_NORMALIZATION", "LOGISTIC", "LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "MAXIMUM", "MAX_POOL_2D", "MEAN", "MINIMUM", "MUL", "PACK", "PAD", "PRELU", "QUANTIZE",
    "REDUCE_MAX", "REDUCE_MIN", "RELU", "RELU6", "RELU_N1_TO_1", "RESHAPE", "RESIZE_BILINEAR",
    "RESIZE_NEAREST_NEIGHBOR", "RSQRT", "SLICE", "SOFTMAX", "SPACE_TO_DEPTH", "SPLIT",
    "SQUEEZE", "SQUARED_DIFFERENCE", "STRIDED_SLICE", "SUB", "SUM", "TANH", "TILE",
    "TRANSPOSE_CONV",
})
# TILE is not in the table, but compiler 16 maps it: Coral's compiled DeepLab edgetpu-slim
# Cityscapes model runs its TILE broadcast on the Edge TPU.

# RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR: "depending on input/output size, this operation
# might not be mapped to the Edge TPU to avoid loss in precision" (the table's footnote; the
# compiler says "Image-interpolation layer won't run precisely enough on Edge TPU"). An upscale
# by f interpolates with weights in steps of 1/f, which the Edge TPU's 8-bit fixed-point
# arithmetic resolves less precisely the larger f is. Modelled by the largest per-axis factor:
# compiler 16 maps MoveNet's x2 upscales and leaves DeepLab v3's 1x1 -> 33x33 (x33) on the CPU
# (Coral's compiled models), and a DeepLab's final x16 upscale is reported not to map; above
# RESIZE_MAX_FACTOR the resize is predicted on the CPU, and a mapped one above x2 (where nothing
# is recorded) gets a warning.
RESIZE_MAX_FACTOR = 8.0
RESIZE_RECORDED_FACTOR = 2.0

# TFLite's int8 LSTM keeps its cell state in int16 (input 19 of LSTM and
# UNIDIRECTIONAL_SEQUENCE_LSTM): that tensor alone does not keep the op off the Edge TPU
# (compiler 16 maps Coral's Keras LSTM MNIST model, keras_lstm_mnist_ptq, entirely).
LSTM_OPS = ("LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM")
LSTM_CELL_STATE_INPUT = 19

# Highest builtin version compiler 16 parses, where a newer one is recorded failing with
# "Didn't find op for builtin opcode 'X' version 'N'" (the whole model is refused).
MAX_KNOWN_VERSION = {"CONV_2D": 5, "TRANSPOSE_CONV": 3, "QUANTIZE": 2, "EXP": 1}
VERSION_WORKAROUND = {
    "CONV_2D": "convert with TensorFlow 2.8 (Coral's advice for CONV_2D version 6)",
    "TRANSPOSE_CONV": "convert with converter.experimental_new_converter = False, or an older "
                      "TensorFlow",
}

# Why a common unsupported operator appears and what to use instead.
OP_HINTS = {
    "DEQUANTIZE": "it outputs float; the Edge TPU computes in 8 bits",
    "LEAKY_RELU": "use ReLU, or PReLU with shared_axes=[1, 2]",
    "HARD_SWISH": "use ReLU or ReLU6",
    "GELU": "use ReLU",
    "ELU": "use ReLU",
    "TRANSPOSE": "keep the model channels-last (NHWC) so no transpose is needed",
    "SHAPE": "a dynamic batch adds SHAPE/STRIDED_SLICE/PACK: re-convert with batch 1",
    "ARG_MAX": "end the model at the class scores and take the argmax on the CPU (for "
               "segmentation, `edgeapp segment` does)",
    "ARG_MIN": "take the argmin on the CPU after the model",
    "CAST": "keep all tensors 8-bit",
    "DIV": "multiply by a constant reciprocal instead",
    "EXP": "move it after the model, or approximate it",
    "BIDIRECTIONAL_SEQUENCE_LSTM": "only unidirectional LSTM is supported",
    "PADV2": "pad with zeros (PAD)",
    "MIRROR_PAD": "pad with zeros (PAD)",
    "BATCH_MATMUL": "use a Dense/FullyConnected layer with constant weights",
    "GATHER": "move it after the model",
}

ACTIVATION_NAMES = {v: k for k, v in ACTIVATIONS.items()}


_INT_FORMATS = {"int32": "i", "int64": "q", "int8": "b", "uint8": "B", "int16": "h"}
EIGHT_BIT_TYPES = ("int8", "uint8")

# ----------------------------------------------------------------------------- constants


ConstantReader = Callable[[Tensor], Optional[bytes]]


def constant_reader(data: bytes) -> ConstantReader:
    """A function giving the raw bytes of a constant tensor of the model file `data`.

    `data` must have been validated by `tflite_model.parse_model` first.
    """
    root = _Table(data, struct.unpack_from("<I", data, 0)[0])
    buffers = root.tables(4)

    def read(tensor: Tensor) -> Optional[bytes]:
        if not tensor.is_constant or tensor.buffer >= len(buffers):
            return None
        b = buffers[tensor.buffer]
        start, n = b.bytes_span(0)
        if n:
            return bytes(data[start:start + n])
        off, size = b.scalar(1, "Q"), b.scalar(2, "Q")
        return bytes(data[off:off + size]) if off > 1 else None

    return read


def _int_values(tensor: Tensor, read: Optional[ConstantReader]) -> Optional[list[int]]:
    if read is None or tensor.dtype not in _INT_FORMATS:
        return None
    raw = read(tensor)
    if raw is None:
        return None
    fmt = _INT_FORMATS[tensor.dtype]
    n = len(raw) // struct.calcsize(fmt)
    return list(struct.unpack_from(f"<{n}{fmt}", raw))


# ----------------------------------------------------------------------------- tensor rules


def _label(t: Tensor) -> str:
    return f"'{t.name}'" if t.name else f"#{t.index}"


def _outer_dims_over_1(shape: tuple[int, ...]) -> list[int]:
    """Sizes > 1 outside the 3 innermost dimensions."""
    return [d for d in shape[:-3] if d > 1] if len(shape) > 3 else []


def _non1(shape: tuple[int, ...]) -> list[int]:
    return [d for d in shape if d != 1]


def _axes(values: list[int], rank: int) -> set[int]:
    return {a + rank if a < 0 else a for a in values}



_FLOAT_TYPES = ("float32", "float16", "float64")
_EIGHT_BITS_ONLY = "the Edge TPU computes in 8 bits only"


def _constant_findings(t: Tensor) -> Iterator[tuple[str, str]]:
    """Constants are 8-bit weights, int32 biases or int32/int64 shapes and axes."""
    if t.dtype in _FLOAT_TYPES:
        yield "float", f"{t.dtype} constant {_label(t)} (weights are not quantized)"
    elif t.dtype not in EIGHT_BIT_TYPES + ("int32", "int64"):
        yield "dtype", f"{t.dtype} constant {_label(t)}"


def _float_findings(op: Operator, t: Tensor, quantizes_input: bool, dequantizes_output: bool
                    ) -> Iterator[tuple[str, str]]:
    """A float activation keeps the op off the Edge TPU; at the model's edges it is a CPU
    QUANTIZE/DEQUANTIZE around the Edge TPU subgraph rather than a fault of the model."""
    if op.op == "QUANTIZE" and quantizes_input:
        yield "float_io", "quantizes the float model input (runs on the CPU, before the Edge TPU)"
    elif op.op == "DEQUANTIZE" and dequantizes_output:
        yield "float_io", "dequantizes to a float model output (runs on the CPU)"
    else:
        yield "float", f"{t.dtype} tensor {_label(t)}: {_EIGHT_BITS_ONLY}"


def _activation_findings(model: TfliteModel, op: Operator, i: int, is_output: bool
                         ) -> Iterator[tuple[str, str]]:
    """Activations are quantized 8-bit tensors."""
    t = model.tensors[i]
    if t.dtype in EIGHT_BIT_TYPES:
        if t.quantization is None:
            yield "float", f"{t.dtype} tensor {_label(t)} has no quantization parameters"
    elif t.dtype in _FLOAT_TYPES:
        yield from _float_findings(op, t, not is_output and i in model.inputs,
                                   is_output and i in model.outputs)
    else:
        yield "dtype", f"{t.dtype} tensor {_label(t)}: {_EIGHT_BITS_ONLY}"


def _shape_findings(t: Tensor) -> Iterator[tuple[str, str]]:
    """Only the 3 innermost dimensions may be larger than 1 (so batch 1)."""
    if not _outer_dims_over_1(t.shape):
        return
    if len(t.shape) == 4 and t.shape[0] > 1:
        yield "batch", (f"tensor {_label(t)} {list(t.shape)} has batch {t.shape[0]} (only the "
                        "3 innermost dimensions may be larger than 1)")
    else:
        yield "rank", (f"tensor {_label(t)} {list(t.shape)}: only the 3 innermost "
                       "dimensions may be larger than 1")


def _tensor_findings(model: TfliteModel, op: Operator) -> Iterator[tuple[str, str]]:
    """Every data type and shape finding over the op's tensors, repeats included."""
    for pos, i in enumerate(op.inputs + op.outputs):
        if i < 0:
            continue
        t = model.tensors[i]
        if op.op in LSTM_OPS and pos == LSTM_CELL_STATE_INPUT and t.dtype == "int16":
            continue  # the int8 LSTM's cell state: see LSTM_CELL_STATE_INPUT
        if t.is_constant:
            yield from _constant_findings(t)
            continue
        yield from _activation_findings(model, op, i, pos >= len(op.inputs))
        yield from _shape_findings(t)


def _tensor_rules(model: TfliteModel, op: Operator) -> list[tuple[str, str]]:
    """Data type, static size and rank rules, over the op's tensors: one message per cause."""
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for cause, text in _tensor_findings(model, op):
        if cause not in seen:
            seen.add(cause)
            problems.append((cause, text))
    return problems


# ----------------------------------------------------------------------------- operator limits


class _Operands:
    """What a limit rule reads of one operator: its tensors and its small constant operands."""

    def __init__(self, model: TfliteModel, op: Operator, read: Optional[ConstantReader]) -> None:
        self.model, self.op, self.read = model, op, read
        self.x = self.tensor(0)
        self.rank = len(self.x.shape) if self.x is not None else 0

    def tensor(self, k: int) -> Optional[Tensor]:
        ins = self.op.inputs
        return self.model.tensors[ins[k]] if len(ins) > k and ins[k] >= 0 else None

    def ints(self, k: int) -> Optional[list[int]]:
        """The values of constant integer input `k`, when the file's bytes were given."""
        t = self.tensor(k)
        return _int_values(t, self.read) if t is not None and t.is_constant else None


LimitRule = Callable[[_Operands], Iterator[str]]


def _fused(op: Operator) -> int:
    return op.option("fused_activation_function", "b")


def _act(code: int) -> str:
    return ACTIVATION_NAMES.get(code, str(code))


def _pool_limits(v: _Operands) -> Iterator[str]:
    act = _fused(v.op)
    if act:
        yield f"fused {_act(act)} activation on pooling is not supported"


def _concatenation_limits(v: _Operands) -> Iterator[str]:
    act = _fused(v.op)
    if act:
        yield f"fused {_act(act)} activation on concatenation is not supported"
    T, ins = v.model.tensors, v.op.inputs
    consts = [T[i] for i in ins if i >= 0 and T[i].is_constant]
    if not consts:
        return
    if len(ins) != 2:
        yield "a constant input is only supported in a 2-input concatenation (a zero pad)"
    elif v.read is not None:
        raw = v.read(consts[0])
        if raw is not None and not _all_zero_q(consts[0], raw):
            yield "its constant input is not all zeros (only a zero pad is supported)"


def _all_zero_q(t: Tensor, raw: bytes) -> bool:
    """A quantized constant is all zeros when every value equals its zero point."""
    zero = t.quantization.per_tensor[1] if t.quantization else 0
    if t.dtype in EIGHT_BIT_TYPES:
        fmt = "b" if t.dtype == "int8" else "B"
        return all(v == zero for v in struct.unpack(f"<{len(raw)}{fmt}", raw))
    return not any(raw)


def _conv_limits(v: _Operands) -> Iterator[str]:
    dw, dh = v.op.option("dilation_w_factor", "i", 1), v.op.option("dilation_h_factor", "i", 1)
    if dw != dh:
        yield f"dilation {dh}x{dw} differs in y and x"


def _fully_connected_limits(v: _Operands) -> Iterator[str]:
    op, T = v.op, v.model.tensors
    if op.option("weights_format", "b"):
        yield "only the default weights format is supported (not shuffled)"
    if op.outputs and op.outputs[0] >= 0 and len(_non1(T[op.outputs[0]].shape)) > 1:
        yield f"output {list(T[op.outputs[0]].shape)} is not one-dimensional"


def _reduce_limits(v: _Operands) -> Iterator[str]:
    axes = v.ints(1) if v.x is not None else None
    if axes is None:
        return
    axes_set = _axes(axes, v.rank)
    if v.rank >= 2 and 0 in axes_set:
        yield "reduces along the batch dimension"
    if v.op.op == "MEAN" and v.rank >= 3 and v.rank - 1 in axes_set and v.x.shape[-1] % 4:
        yield f"reduces along channels ({v.x.shape[-1]}, must be a multiple of 4)"


def _pad_limits(v: _Operands) -> Iterator[str]:
    pads = v.ints(1)
    if pads is not None and v.rank >= 3 and len(pads) >= 2 and (pads[0] or pads[1]):
        yield "pads along the batch dimension"


def _split_limits(v: _Operands) -> Iterator[str]:
    axis, x = v.ints(0), v.tensor(1)  # SPLIT takes the axis first, then the tensor
    if axis and x is not None and len(x.shape) >= 3 and _axes(axis[:1], len(x.shape)) == {0}:
        yield "splits along the batch dimension"


def _pack_limits(v: _Operands) -> Iterator[str]:
    op = v.op
    if op.options_type == options_type("PACK") and op.option("axis", "i") == 0 and len(op.inputs) > 1:
        yield "packs along the batch dimension (axis 0)"


def _softmax_limits(v: _Operands) -> Iterator[str]:
    if v.x is None:
        return
    if len(_non1(v.x.shape)) > 1:
        yield f"input {list(v.x.shape)} is not 1-D (Softmax runs on a 1-D tensor only)"
    elif prod(v.x.shape) > SOFTMAX_MAX_ELEMENTS:
        yield f"input has {prod(v.x.shape)} elements (max {SOFTMAX_MAX_ELEMENTS})"


def _resize_limits(v: _Operands) -> Iterator[str]:
    if v.x is not None and (len(_non1(v.x.shape[:-3])) or v.rank > 4):
        yield f"input {list(v.x.shape)} is not 3-dimensional"


def _strided_slice_limits(v: _Operands) -> Iterator[str]:
    strides = v.ints(3)
    if strides is not None and any(s != 1 for s in strides):
        yield f"strides {strides} (only strides of 1 are supported)"
    if v.op.option("ellipsis_mask", "i") or v.op.option("new_axis_mask", "i"):
        yield "ellipsis or new-axis mask is not supported"


def _prelu_limits(v: _Operands) -> Iterator[str]:
    alpha = v.tensor(1)
    if alpha is not None and len(_non1(alpha.shape[:-1])):
        yield f"alpha {list(alpha.shape)} is not 1-D (use shared_axes=[1, 2])"


# The documented per-operator limits of supported operators (g.co/coral/model-reqs): operator
# name -> its rule. A supported operator missing here has no limit beyond the tensor rules.
LIMIT_RULES: dict[str, LimitRule] = {
    "AVERAGE_POOL_2D": _pool_limits,
    "MAX_POOL_2D": _pool_limits,
    "CONCATENATION": _concatenation_limits,
    "CONV_2D": _conv_limits,
    "DEPTHWISE_CONV_2D": _conv_limits,
    "FULLY_CONNECTED": _fully_connected_limits,
    "MEAN": _reduce_limits,
    "SUM": _reduce_limits,
    "REDUCE_MAX": _reduce_limits,
    "REDUCE_MIN": _reduce_limits,
    "PAD": _pad_limits,
    "SPLIT": _split_limits,
    "PACK": _pack_limits,
    "SOFTMAX": _softmax_limits,
    "RESIZE_BILINEAR": _resize_limits,
    "RESIZE_NEAREST_NEIGHBOR": _resize_limits,
    "STRIDED_SLICE": _strided_slice_limits,
    "PRELU": _prelu_limits,
}


def _limit_rules(model: TfliteModel, op: Operator, read: Optional[ConstantReader]) -> list[str]:
    """The documented per-operator limits `op` breaks (see `LIMIT_RULES`)."""
    rule = LIMIT_RULES.get(op.op)
    return list(rule(_Operands(model, op, read))) if rule else []


# ----------------------------------------------------------------------------- one operator


def _special(op: Operator) -> Optional[tuple[str, str]]:
    """Operators the table does not cover as plain supported / unsupported."""
    if op.op == "TRANSPOSE":
        return ("unsupported_op", "TRANSPOSE is listed for runtime 14 but compiler 16 leaves it "
                                  "on the CPU ('otherwise supported, but not mapped'); "
                                  + OP_HINTS["TRANSPOSE"])
    if op.is_custom:
        return ("unsupported_op", f"custom operator '{op.op}' is not supported by the Edge TPU")
    return None


def _version_problem(op: Operator) -> Optional[tuple[str, str]]:
    """An operator version newer than compiler 16 parses (it then refuses the whole model)."""
    known = MAX_KNOWN_VERSION.get(op.op)
    if known is None or op.version <= known:
        return None
    fix = VERSION_WORKAROUND.get(op.op, "convert with an older TensorFlow")
    return ("version", f"{op.op} version {op.version} is newer than edgetpu_compiler "
                       f"{COMPILER_VERSION} knows (up to {known}): {fix}")


def _operator_problem(op: Operator) -> Optional[tuple[str, str]]:
    """An operator the Edge TPU does not run at all."""
    special = _special(op)
    if special or op.op in SUPPORTED:
        return special
    hint = OP_HINTS.get(op.op)
    return ("unsupported_op", f"{op.op} is not supported by the Edge TPU" + (f" ({hint})" if hint else ""))


def _precision_problem(model: TfliteModel, op: Operator) -> Optional[tuple[str, str]]:
    """A resize upscaling so much that the compiler keeps it on the CPU (RESIZE_MAX_FACTOR)."""
    factor = resize_factor(model, op)
    if factor is None or factor <= RESIZE_MAX_FACTOR:
        return None
    return ("precision", _resize_text(model, op, factor) + ": compiler 16 leaves "
            f"upscales beyond x{RESIZE_MAX_FACTOR:g} on the CPU to avoid a loss of "
            f"precision (interpolation weights in steps of 1/{factor:g} are finer "
            "than the Edge TPU's 8-bit arithmetic resolves)")


def _runtime_problem(op: Operator, compiler: int) -> Optional[tuple[str, str]]:
    """An operator that needs a newer Edge TPU runtime than this compiler version emits."""
    if compiler >= 16 or op.op not in RUNTIME_14_OPS:
        return None
    return ("unsupported_op", f"{op.op} needs Edge TPU runtime 14, which only compiler 16 emits "
                              f"(compiler {compiler} emits runtime 13 and leaves it on the CPU)")


def op_problems(model: TfliteModel, op: Operator, read: Optional[ConstantReader] = None,
                compiler: int = COMPILER_VERSION) -> list[tuple[str, str]]:
    """(cause, text) for every rule `op` breaks on its own with compiler version `compiler`
    (14 or 16); empty when it can be mapped."""
    if op.op == EDGETPU_CUSTOM_OP:
        return []
    if model.is_edgetpu_compiled:  # e.g. a head `retrain` appended after the compiled part
        return [("compiled", "the model is already compiled: only edgetpu-custom-op runs on the "
                             "Edge TPU, this operator runs on the CPU")]
    problems = [p for p in (_version_problem(op), _operator_problem(op)) if p]
    runtime = _runtime_problem(op, compiler)
    if runtime and not any(cause == "unsupported_op" for cause, _ in problems):
        problems.append(runtime)
    problems += _tensor_rules(model, op)
    if op.op in SUPPORTED:
        problems += [("limit", text) for text in _limit_rules(model, op, read)]
        precision = _precision_problem(model, op)
        if precision:
            problems.append(precision)
    return problems


def resize_factor(model: TfliteModel, op: Operator) -> Optional[float]:
    """The largest per-axis upscale (output/input height or width) of a resize op, else None."""
    if op.op not in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR") or not op.inputs or \
            not op.outputs or op.inputs[0] < 0 or op.outputs[0] < 0:
        return None
    src, dst = model.tensors[op.inputs[0]].shape, model.tensors[op.outputs[0]].shape
    if len(src) != 4 or len(dst) != 4 or min(src[1:3]) <= 0:
        return None
    return max(dst[1] / src[1], dst[2] / src[2])


def _resize_text(model: TfliteModel, op: Operator, factor: float) -> str:
    src, dst = model.tensors[op.inputs[0]].shape, model.tensors[op.outputs[0]].shape
    return f"upscales {src[1]}x{src[2]} to {dst[1]}x{dst[2]} (x{factor:.3g})"
