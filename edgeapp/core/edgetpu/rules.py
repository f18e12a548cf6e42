"""Which operators of a TFLite model the Edge TPU compiler will map, predicted from the file alone.

Pure functions over `tflite_model.Model` (plus, optionally, the file's bytes to read small
constant tensors such as Mean axes or Pad paddings): no compiler, no runtime, any OS. The
report a user reads (verdict, summary, warnings, advice) is built by `check_report`.

The rules one operator breaks on its own are checked in `edgetpu_ops` (its limits are a
table of per-operator rule functions); this module propagates them over the graph. The rules
are those of Coral's model requirements page (g.co/coral/model-reqs, the table for
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

from dataclasses import dataclass
from typing import Optional

from typing_extensions import TypedDict

from edgeapp.core.edgetpu.opcount import macs_per_op

# The per-operator rules, re-exported: importers (check_report, compiler_output, the tests) read
# the whole prediction here.
from edgeapp.core.edgetpu.ops import (
    ACTIVATION_NAMES,
    COMPILER_VERSION,
    EIGHT_BIT_TYPES,
    LIMIT_RULES,
    LSTM_CELL_STATE_INPUT,
    LSTM_OPS,
    MAX_KNOWN_VERSION,
    OP_HINTS,
    RESIZE_MAX_FACTOR,
    RESIZE_RECORDED_FACTOR,
    SOFTMAX_MAX_ELEMENTS,
    SUPPORTED,
    VERSION_WORKAROUND,
    ConstantReader,
    constant_reader,
    op_problems,
    resize_factor,
)
from edgeapp.core.tflite.model import Tensor, TfliteModel

__all__ = [
    "ACTIVATION_NAMES", "COMPILER_VERSION", "EIGHT_BIT_TYPES", "LIMIT_RULES", "LSTM_CELL_STATE_INPUT",
    "LSTM_OPS", "MAX_KNOWN_VERSION", "OP_HINTS", "RESIZE_MAX_FACTOR", "RESIZE_RECORDED_FACTOR",
    "SOFTMAX_MAX_ELEMENTS", "SUPPORTED", "VERSION_WORKAROUND", "ConstantReader", "constant_reader",
    "op_problems", "resize_factor", "OpPrediction", "count_macs", "dynamic_tensor_ops", "predict",
]

# Operators whose output shape depends on a non-constant operand become dynamic-sized.
_SHAPE_OPERAND = {"RESHAPE": 1, "BROADCAST_TO": 1, "FILL": 0, "RESIZE_BILINEAR": 1,
                  "RESIZE_NEAREST_NEIGHBOR": 1, "STRIDED_SLICE": (1, 2, 3), "SLICE": (1, 2),
                  "TILE": 1, "PAD": 1, "EXPAND_DIMS": 1}


# ----------------------------------------------------------------------------- results


class OpJson(TypedDict):
    """One operator of `check`'s JSON: where it is predicted to run, and why."""
    index: int
    op: str
    mapped: bool
    reason: Optional[str]


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

    def to_json(self) -> OpJson:
        return {"index": self.index, "op": self.op, "mapped": self.mapped, "reason": self.reason}


# ----------------------------------------------------------------------------- MACs


def count_macs(model: TfliteModel) -> dict[int, int]:
    """Multiply-accumulates of every operator (index in the main subgraph -> MACs).

    The counts are `opcount`'s (the canonical counter `bench` uses too): matrix operators
    only; every other operator, and a MAC operator whose shapes are unknown, counts 0.
    """
    per_op = macs_per_op(model)
    return {op.index: per_op.get(op.index, 0) for op in model.operators}


# ----------------------------------------------------------------------------- graph


def _fmt_tensor(t: Tensor) -> str:
    shape = t.shape_signature if t.shape_signature and -1 in t.shape_signature else t.shape
    return f"{t.dtype}[{','.join(str(d) for d in shape)}]"


def _producers(model: TfliteModel) -> dict[int, int]:
    made = {}
    for op in model.operators:
        for t in op.outputs:
            if t >= 0:
                made.setdefault(t, op.index)
    return made


def _topological(model: TfliteModel, made: dict[int, int]) -> list[int]:
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


def dynamic_tensor_ops(model: TfliteModel, made: Optional[dict[int, int]] = None) -> list[int]:
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


def predict(model: TfliteModel, read: Optional[ConstantReader] = None,
            compiler: int = COMPILER_VERSION) -> tuple[list[OpPrediction], list[str]]:
    """Per-operator predictions (in the model's operator order) and model-level blockers, for
    compiler version `compiler` (14 or 16)."""
    made = _producers(model)
    macs = count_macs(model)
    own = {op.index: op_problems(model, op, read, compiler) for op in model.operators}
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
