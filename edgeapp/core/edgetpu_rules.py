"""Which operators of a TFLite model the Edge TPU compiler will map, predicted from the file alone.

Pure functions over `tflite_model.Model` (plus, optionally, the file's bytes to read small
constant tensors such as Mean axes or Pad paddings): no compiler, no runtime, any OS. The
report a user reads (verdict, summary, warnings, advice) is built by `check_report`.

The rules are those of Coral's model requirements page (g.co/coral/model-reqs, the table for
compiler 16), completed by what compiler 16 is recorded doing:

* every activation tensor is 8-bit (int8/uint8) and quantized; constants are 8-bit weights,
  int32 biases or int32/int64 shape/axis operands; a QUANTIZE from a float input or a
  DEQUANTIZE to a float output runs on the CPU;
* tensor sizes are static, and a tensor of more than 3 dimensions may be larger than 1 only in
  its 3 innermost dimensions (so batch 1);
* only the operators of `SUPPORTED` run, each within its documented limits (no fused activation
  on pooling and concatenation; same x/y dilation; Mean/Sum/ReduceMax/ReduceMin/Pad/Split/Pack
  not along the batch dimension, a Mean over channels needs a multiple of 4 channels; Softmax
  on a 1-D tensor of at most 16,000 elements; FullyConnected with default weights and a 1-D
  output; ResizeBilinear/ResizeNearestNeighbor on 3-D tensors; StridedSlice with strides 1 and
  no ellipsis/new-axis mask; Concatenation with a constant input only as a 2-input zero pad;
  PReLU with a 1-D alpha); a resize upscaling more than x8 stays on the CPU (precision: see
  RESIZE_MAX_FACTOR);
* TILE maps although the table does not list it, and an int8 LSTM's int16 cell state is no
  reason to refuse the LSTM;
* model-level blockers make the compiler refuse the whole model (nothing is mapped): an
  operator version newer than compiler 16 knows ("Didn't find op for builtin opcode"), and
  dynamic-sized tensors ("Attempting to use a delegate that only supports static-sized
  tensors").

Propagation (the compiler makes ONE Edge TPU subgraph), applied in data-flow order:

1. An operator that breaks a rule above runs on the CPU.
2. A CPU operator is *after the TPU* when one of its inputs comes, directly or transitively,
   from a mapped operator; otherwise it is *before the TPU* (it reads only graph inputs,
   constants and other before-the-TPU CPU operators, so it can run first, on the CPU, and
   feed the Edge TPU subgraph — e.g. a QUANTIZE of a float input).
3. An operator that depends, directly or transitively, on an after-the-TPU CPU operator runs
   on the CPU even if it is supported: mapping it would need a second Edge TPU subgraph (the
   compiler's "More than one subgraph is not supported").
4. Every other supported operator is mapped — including operators placed after a CPU
   operator in file order when they do not depend on it (an independent branch).

The mapped set is therefore convex (no path leaves it and comes back), i.e. one subgraph.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Optional

from edgeapp.core.compat import prod
from edgeapp.core.tflite.model import EDGETPU_CUSTOM_OP, Model, Operator, Tensor, _Table
from edgeapp.core.tflite.schema import ACTIVATIONS, options_type

SOFTMAX_MAX_ELEMENTS = 16000
COMPILER_VERSION = 16

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

# Operators whose output shape depends on a non-constant operand become dynamic-sized.
_SHAPE_OPERAND = {"RESHAPE": 1, "BROADCAST_TO": 1, "FILL": 0, "RESIZE_BILINEAR": 1,
                  "RESIZE_NEAREST_NEIGHBOR": 1, "STRIDED_SLICE": (1, 2, 3), "SLICE": (1, 2),
                  "TILE": 1, "PAD": 1, "EXPAND_DIMS": 1}

_INT_FORMATS = {"int32": "i", "int64": "q", "int8": "b", "uint8": "B", "int16": "h"}
EIGHT_BIT_TYPES = ("int8", "uint8")


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class OpPrediction:
    index: int
    op: str
    mapped: bool
    reason: Optional[str]
    # causes: version, dynamic, float, float_io, dtype, batch, rank, unsupported_op, limit,
    # precision (a resize the compiler keeps off), depends_on_cpu, blocked (the compiler
    # refuses the whole model) or compiled (a builtin op of an already compiled model: CPU)
    causes: tuple[str, ...] = ()
    problems: tuple[tuple[str, str], ...] = ()  # (cause, text) of the op's own problems
    inputs: tuple[str, ...] = ()  # "int8[1,16,16,3]" of the non-constant inputs
    outputs: tuple[str, ...] = ()
    constants: int = 0  # number of constant inputs (weights, bias, shapes)
    macs: int = 0
    after_tpu: bool = False  # a CPU op fed, directly or not, by a mapped op
    blocked_by: Optional[int] = None  # the after-TPU CPU op this one depends on

    def to_json(self) -> dict:
        return {"index": self.index, "op": self.op, "mapped": self.mapped, "reason": self.reason}


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


# ----------------------------------------------------------------------------- MACs


def count_macs(model: Model) -> dict[int, int]:
    """Multiply-accumulates of every operator (index in the main subgraph -> MACs).

    The counts are `opcount`'s (the canonical counter `bench` uses too): matrix operators
    only; every other operator, and a MAC operator whose shapes are unknown, counts 0.
    """
    from edgeapp.core.opcount import macs_per_op

    per_op = macs_per_op(model)
    return {op.index: per_op.get(op.index, 0) for op in model.operators}


# ----------------------------------------------------------------------------- per-op rules


def _fmt_tensor(t: Tensor) -> str:
    shape = t.shape_signature if t.shape_signature and -1 in t.shape_signature else t.shape
    return f"{t.dtype}[{','.join(str(d) for d in shape)}]"


def _label(t: Tensor) -> str:
    return f"'{t.name}'" if t.name else f"#{t.index}"


def _outer_dims_over_1(shape: tuple[int, ...]) -> list[int]:
    """Sizes > 1 outside the 3 innermost dimensions."""
    return [d for d in shape[:-3] if d > 1] if len(shape) > 3 else []


def _non1(shape: tuple[int, ...]) -> list[int]:
    return [d for d in shape if d != 1]


def _axes(values: list[int], rank: int) -> set[int]:
    return {a + rank if a < 0 else a for a in values}


def _tensor_rules(model: Model, op: Operator) -> list[tuple[str, str]]:
    """Data type, static size and rank rules, over the op's tensors."""
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()

    def add(cause: str, text: str) -> None:
        if cause not in seen:  # one message per cause is enough
            seen.add(cause)
            problems.append((cause, text))

    graph_in, graph_out = set(model.inputs), set(model.outputs)
    for pos, i in enumerate(op.inputs + op.outputs):
        if i < 0:
            continue
        t = model.tensors[i]
        is_output = pos >= len(op.inputs)
        if op.op in LSTM_OPS and pos == LSTM_CELL_STATE_INPUT and t.dtype == "int16":
            continue  # the int8 LSTM's cell state: see LSTM_CELL_STATE_INPUT
        if t.is_constant:
            if t.dtype in ("float32", "float16", "float64"):
                add("float", f"{t.dtype} constant {_label(t)} (weights are not quantized)")
            elif t.dtype not in EIGHT_BIT_TYPES + ("int32", "int64"):
                add("dtype", f"{t.dtype} constant {_label(t)}")
            continue
        if t.dtype in EIGHT_BIT_TYPES:
            if t.quantization is None:
                add("float", f"{t.dtype} tensor {_label(t)} has no quantization parameters")
        elif t.dtype in ("float32", "float16", "float64"):
            if op.op == "QUANTIZE" and not is_output and i in graph_in:
                add("float_io", "quantizes the float model input (runs on the CPU, before the "
                                "Edge TPU)")
            elif op.op == "DEQUANTIZE" and is_output and i in graph_out:
                add("float_io", "dequantizes to a float model output (runs on the CPU)")
            else:
                add("float", f"{t.dtype} tensor {_label(t)}: the Edge TPU computes in 8 bits only")
        else:
            add("dtype", f"{t.dtype} tensor {_label(t)}: the Edge TPU computes in 8 bits only")
        outer = _outer_dims_over_1(t.shape)
        if outer:
            if len(t.shape) == 4 and t.shape[0] > 1:
                add("batch", f"tensor {_label(t)} {list(t.shape)} has batch {t.shape[0]} (only the "
                             "3 innermost dimensions may be larger than 1)")
            else:
                add("rank", f"tensor {_label(t)} {list(t.shape)}: only the 3 innermost "
                            "dimensions may be larger than 1")
    return problems


def _fused(op: Operator) -> int:
    return op.option("fused_activation_function", "b")


def _limit_rules(model: Model, op: Operator, read: Optional[ConstantReader]) -> list[str]:
    """The documented per-operator limits of supported operators."""
    name, ins, T = op.op, op.inputs, model.tensors
    problems: list[str] = []

    def tensor(k: int) -> Optional[Tensor]:
        return T[ins[k]] if len(ins) > k and ins[k] >= 0 else None

    def ints(k: int) -> Optional[list[int]]:
        t = tensor(k)
        return _int_values(t, read) if t is not None and t.is_constant else None

    x = tensor(0)
    rank = len(x.shape) if x is not None else 0
    if name in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        act = _fused(op)
        if act:
            problems.append(f"fused {_act(act)} activation on pooling is not supported")
    elif name == "CONCATENATION":
        act = _fused(op)
        if act:
            problems.append(f"fused {_act(act)} activation on concatenation is not supported")
        consts = [T[i] for i in ins if i >= 0 and T[i].is_constant]
        if consts:
            if len(ins) != 2:
                problems.append("a constant input is only supported in a 2-input concatenation "
                                "(a zero pad)")
            elif read is not None:
                raw = read(consts[0])
                if raw is not None and not _all_zero_q(consts[0], raw):
                    problems.append("its constant input is not all zeros (only a zero pad is "
                                    "supported)")
    elif name in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        dw, dh = op.option("dilation_w_factor", "i", 1), op.option("dilation_h_factor", "i", 1)
        if dw != dh:
            problems.append(f"dilation {dh}x{dw} differs in y and x")
    elif name == "FULLY_CONNECTED":
        if op.option("weights_format", "b"):
            problems.append("only the default weights format is supported (not shuffled)")
        if op.outputs and op.outputs[0] >= 0 and len(_non1(T[op.outputs[0]].shape)) > 1:
            problems.append(f"output {list(T[op.outputs[0]].shape)} is not one-dimensional")
    elif name in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN") and x is not None:
        axes = ints(1)
        if axes is not None:
            axes_set = _axes(axes, rank)
            if rank >= 2 and 0 in axes_set:
                problems.append("reduces along the batch dimension")
            if name == "MEAN" and rank >= 3 and rank - 1 in axes_set and x.shape[-1] % 4:
                problems.append(f"reduces along channels ({x.shape[-1]}, must be a multiple of 4)")
    elif name == "PAD":
        pads = ints(1)
        if pads is not None and rank >= 3 and len(pads) >= 2 and (pads[0] or pads[1]):
            problems.append("pads along the batch dimension")
    elif name == "SPLIT":
        axis = ints(0)
        x = tensor(1)
        if axis and x is not None and len(x.shape) >= 3 and _axes(axis[:1], len(x.shape)) == {0}:
            problems.append("splits along the batch dimension")
    elif name == "PACK":
        if op.options_type == options_type("PACK") and op.option("axis", "i") == 0 and len(ins) > 1:
            problems.append("packs along the batch dimension (axis 0)")
    elif name == "SOFTMAX" and x is not None:
        if len(_non1(x.shape)) > 1:
            problems.append(f"input {list(x.shape)} is not 1-D (Softmax runs on a 1-D tensor only)")
        elif prod(x.shape) > SOFTMAX_MAX_ELEMENTS:
            problems.append(f"input has {prod(x.shape)} elements (max {SOFTMAX_MAX_ELEMENTS})")
    elif name in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR") and x is not None:
        if len(_non1(x.shape[:-3])) or rank > 4:
            problems.append(f"input {list(x.shape)} is not 3-dimensional")
    elif name == "STRIDED_SLICE":
        strides = ints(3)
        if strides is not None and any(s != 1 for s in strides):
            problems.append(f"strides {strides} (only strides of 1 are supported)")
        if op.option("ellipsis_mask", "i") or op.option("new_axis_mask", "i"):
            problems.append("ellipsis or new-axis mask is not supported")
    elif name == "PRELU":
        alpha = tensor(1)
        if alpha is not None and len(_non1(alpha.shape[:-1])):
            problems.append(f"alpha {list(alpha.shape)} is not 1-D (use shared_axes=[1, 2])")
    return problems


def _all_zero_q(t: Tensor, raw: bytes) -> bool:
    """A quantized constant is all zeros when every value equals its zero point."""
    zero = t.quantization.per_tensor[1] if t.quantization else 0
    if t.dtype in EIGHT_BIT_TYPES:
        fmt = "b" if t.dtype == "int8" else "B"
        return all(v == zero for v in struct.unpack(f"<{len(raw)}{fmt}", raw))
    return not any(raw)


def _act(code: int) -> str:
    return ACTIVATION_NAMES.get(code, str(code))


def _special(op: Operator) -> Optional[tuple[str, str]]:
    """Operators the table does not cover as plain supported / unsupported."""
    if op.op == "TRANSPOSE":
        return ("unsupported_op", "TRANSPOSE is listed for runtime 14 but compiler 16 leaves it "
                                  "on the CPU ('otherwise supported, but not mapped'); "
                                  + OP_HINTS["TRANSPOSE"])
    if op.is_custom:
        return ("unsupported_op", f"custom operator '{op.op}' is not supported by the Edge TPU")
    return None


def op_problems(model: Model, op: Operator, read: Optional[ConstantReader] = None
                ) -> list[tuple[str, str]]:
    """(cause, text) for every rule `op` breaks on its own; empty when it can be mapped."""
    if op.op == EDGETPU_CUSTOM_OP:
        return []
    if model.is_edgetpu_compiled:  # e.g. a head `retrain` appended after the compiled part
        return [("compiled", "the model is already compiled: only edgetpu-custom-op runs on the "
                             "Edge TPU, this operator runs on the CPU")]
    problems: list[tuple[str, str]] = []
    known = MAX_KNOWN_VERSION.get(op.op)
    if known is not None and op.version > known:
        fix = VERSION_WORKAROUND.get(op.op, "convert with an older TensorFlow")
        problems.append(("version", f"{op.op} version {op.version} is newer than edgetpu_compiler "
                                    f"{COMPILER_VERSION} knows (up to {known}): {fix}"))
    special = _special(op)
    if special:
        problems.append(special)
    elif op.op not in SUPPORTED:
        hint = OP_HINTS.get(op.op)
        problems.append(("unsupported_op", f"{op.op} is not supported by the Edge TPU"
                                           + (f" ({hint})" if hint else "")))
    problems += _tensor_rules(model, op)
    if op.op in SUPPORTED:
        problems += [("limit", text) for text in _limit_rules(model, op, read)]
        factor = resize_factor(model, op)
        if factor is not None and factor > RESIZE_MAX_FACTOR:
            problems.append(("precision", _resize_text(model, op, factor) + ": compiler 16 leaves "
                             f"upscales beyond x{RESIZE_MAX_FACTOR:g} on the CPU to avoid a loss of "
                             f"precision (interpolation weights in steps of 1/{factor:g} are finer "
                             "than the Edge TPU's 8-bit arithmetic resolves)"))
    return problems


def resize_factor(model: Model, op: Operator) -> Optional[float]:
    """The largest per-axis upscale (output/input height or width) of a resize op, else None."""
    if op.op not in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR") or not op.inputs or \
            not op.outputs or op.inputs[0] < 0 or op.outputs[0] < 0:
        return None
    src, dst = model.tensors[op.inputs[0]].shape, model.tensors[op.outputs[0]].shape
    if len(src) != 4 or len(dst) != 4 or min(src[1:3]) <= 0:
        return None
    return max(dst[1] / src[1], dst[2] / src[2])


def _resize_text(model: Model, op: Operator, factor: float) -> str:
    src, dst = model.tensors[op.inputs[0]].shape, model.tensors[op.outputs[0]].shape
    return f"upscales {src[1]}x{src[2]} to {dst[1]}x{dst[2]} (x{factor:.3g})"


# ----------------------------------------------------------------------------- graph


def _producers(model: Model) -> dict[int, int]:
    made = {}
    for op in model.operators:
        for t in op.outputs:
            if t >= 0:
                made.setdefault(t, op.index)
    return made


def _topological(model: Model, made: dict[int, int]) -> list[int]:
    """Operator indices in data-flow order (the file order when it is already one)."""
    order, state = [], {}

    def visit(i: int) -> None:
        stack = [(i, False)]
        while stack:
            j, done = stack.pop()
            if done:
                state[j] = 2
                order.append(j)
                continue
            if state.get(j):
                continue
            state[j] = 1
            stack.append((j, True))
            for t in model.operators[j].inputs:
                p = made.get(t)
                if p is not None and not state.get(p):
                    stack.append((p, False))

    for op in model.operators:
        if not state.get(op.index):
            visit(op.index)
    return order


def dynamic_tensor_ops(model: Model, made: Optional[dict[int, int]] = None) -> list[int]:
    """Operators whose output size is computed at run time (their shape operand is not a
    constant): the compiler refuses a model with dynamic-sized tensors."""
    made = _producers(model) if made is None else made
    found = []
    for op in model.operators:
        slots = _SHAPE_OPERAND.get(op.op)
        if slots is None:
            continue
        for k in (slots if isinstance(slots, tuple) else (slots,)):
            if k < len(op.inputs) and op.inputs[k] >= 0 and op.inputs[k] in made:
                found.append(op.index)
                break
    return found


def predict(model: Model, read: Optional[ConstantReader] = None) -> tuple[list[OpPrediction], list[str]]:
    """Per-operator predictions (in the model's operator order) and model-level blockers."""
    made = _producers(model)
    macs = count_macs(model)
    own = {op.index: op_problems(model, op, read) for op in model.operators}
    blockers = [f"op {i} ({model.operators[i].op}): {text}" for i, probs in own.items()
                for cause, text in probs if cause == "version"]
    dyn = dynamic_tensor_ops(model, made)
    for i in dyn:
        own[i].append(("dynamic", "its output size is computed at run time (a dynamic-sized "
                                  "tensor)"))
    if dyn:
        blockers.append(f"dynamic-sized tensors (op {dyn[0]} {model.operators[dyn[0]].op} takes a "
                        "shape computed at run time): the compiler stops with 'Attempting to use a "
                        "delegate that only supports static-sized tensors'")

    mapped: dict[int, bool] = {}
    tpu_upstream: dict[int, bool] = {}  # depends on a mapped op, directly or not
    after: dict[int, bool] = {}  # a CPU op after the Edge TPU subgraph
    root: dict[int, int] = {}  # for after-TPU CPU ops: the first cut they descend from
    blocked_by: dict[int, Optional[int]] = {}
    for i in _topological(model, made):
        op = model.operators[i]
        parents = {made[t] for t in op.inputs if t in made}
        upstream = any(mapped.get(p) or tpu_upstream.get(p) for p in parents)
        cut = min((root[p] for p in parents if after.get(p)), default=None)
        tpu_upstream[i] = upstream
        mapped[i] = not own[i] and cut is None
        after[i] = not mapped[i] and (upstream or cut is not None)
        if after[i]:
            root[i] = cut if cut is not None else i
        blocked_by[i] = cut if not own[i] else None

    preds = []
    T = model.tensors
    for op in model.operators:
        i = op.index
        probs = own[i]
        if probs:
            causes = tuple(dict.fromkeys(c for c, _ in probs))
            reason = "; ".join(t for _, t in probs)
        elif blockers:
            causes, reason = ("blocked",), "the compiler refuses the whole model: " + blockers[0]
        elif not mapped[i]:
            b = blocked_by[i]
            causes = ("depends_on_cpu",)
            reason = (f"depends on op {b} ({model.operators[b].op}), which runs on the CPU after "
                      "the Edge TPU: the compiler makes only one Edge TPU subgraph")
        else:
            causes, reason = (), None
        preds.append(OpPrediction(
            index=i, op=op.op, mapped=not causes, reason=reason, causes=causes,
            problems=tuple(probs),
            inputs=tuple(_fmt_tensor(T[t]) for t in op.inputs if t >= 0 and not T[t].is_constant),
            outputs=tuple(_fmt_tensor(T[t]) for t in op.outputs if t >= 0),
            constants=sum(1 for t in op.inputs if t >= 0 and T[t].is_constant),
            macs=macs[i], after_tpu=after[i], blocked_by=blocked_by[i]))
    return preds, blockers
