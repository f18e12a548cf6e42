"""Whether a model is an embedding extractor: what `retrain --base` may put a new head on.

Coral's extractors (MobileNet v1 1024-d, EfficientNet-EdgeTPU S/M/L) end at the global average
pool: one output, a feature vector shaped [1, 1, 1, D] or [1, D]. A classifier's output has the
same shapes, so the shape alone cannot tell them apart; what can:

1. the operator producing the output (looking through RESHAPE/SQUEEZE/(DE)QUANTIZE, which only
   change its form) is not SOFTMAX, LOGISTIC or LOG_SOFTMAX: those make class scores;
2. a quantized output is not quantized as probabilities: TFLite's quantized softmax must output
   scale 1/256 with zero point 0 (uint8) or -128 (int8). This is what still shows on a compiled
   model, where the softmax is hidden inside the edgetpu-custom-op;
3. the model's labels, when it has any, do not name each of its D outputs (a classifier that
   stops at the logits has labels for them).
Detection (four outputs), pose and segmentation outputs fail the shape test and are named.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from edgeapp.core.tflite.model import Operator, Tensor, TfliteModel
from edgeapp.errors import InvalidModel

SCORE_OPS = frozenset({"SOFTMAX", "LOGISTIC", "LOG_SOFTMAX"})
FORM_OPS = frozenset({"RESHAPE", "SQUEEZE", "QUANTIZE", "DEQUANTIZE"})  # same values, new form
PROBABILITY_SCALE = 1.0 / 256
_HINT = ("--base takes an embedding extractor (one output, a feature vector [1, 1, 1, D] or "
         "[1, D]), e.g. mobilenet_v1_embedding (`edgeapp models list --task embed`)")


def embedding_depth(shape: Sequence[int]) -> Optional[int]:
    """D of a feature vector shaped [1, 1, 1, D] or [1, D] (D >= 2), else None."""
    dims = [int(d) for d in shape]
    if len(dims) == 4 and dims[:3] == [1, 1, 1] and dims[3] >= 2:
        return dims[3]
    if len(dims) == 2 and dims[0] == 1 and dims[1] >= 2:
        return dims[1]
    return None


def output_source(model: TfliteModel, tensor: int) -> Optional[Operator]:
    """The operator that computes `tensor`'s values, looking through form-only operators; None
    when the tensor is a graph input or constant."""
    made = {t: op for op in model.operators for t in op.outputs if t >= 0}
    op = made.get(tensor)
    for _ in range(len(model.operators)):  # bounded: a corrupt graph may loop
        if op is None or op.op not in FORM_OPS or not op.inputs or op.inputs[0] < 0:
            break
        op = made.get(op.inputs[0])
    return op


def quantized_as_probabilities(t: Tensor) -> bool:
    if t.quantization is None or t.dtype not in ("uint8", "int8"):
        return False
    scale, zero = t.quantization.per_tensor
    return abs(scale - PROBABILITY_SCALE) < 1e-9 and zero == (0 if t.dtype == "uint8" else -128)


# (output shapes, op names) -> what a model is for, in words ("a detection model"), or None
Guess = Callable[[Sequence[Sequence[int]], Sequence[str]], Optional[str]]


def require_extractor(model: TfliteModel, label_count: Optional[int] = None,
                      guess: Optional[Guess] = None) -> int:
    """The embedding depth D of `model`; InvalidModel (one line, with what fits) when it is not
    an embedding extractor. `label_count`: how many labels its metadata has, if any. `guess`
    (shapes, op names) -> what a model is for in words (its task's noun), to name it in refusals."""
    def output_task(shapes, ops) -> Optional[str]:
        return guess(shapes, ops) if guess is not None else None

    name = model.path
    if len(model.inputs) != 1:
        raise InvalidModel(f"{name} has {len(model.inputs)} inputs, not one image: {_HINT}")
    shapes = [t.shape for t in model.output_tensors]
    if len(shapes) != 1:
        kind = output_task(shapes, model.op_names) or "a model"
        raise InvalidModel(f"{name} is {kind} with {len(shapes)} outputs, not an embedding "
                           f"extractor: {_HINT}")
    out = model.output_tensors[0]
    depth = embedding_depth(out.shape)
    if depth is None:
        noun = output_task(shapes, model.op_names)
        kind = f" (it looks like {noun})" if noun else ""
        raise InvalidModel(f"{name}: output {list(out.shape)} is not a feature vector{kind}: {_HINT}")
    source = output_source(model, out.index)
    why = None
    if source is not None and source.op in SCORE_OPS:
        why = f"its output comes from {source.op}"
    elif quantized_as_probabilities(out):
        why = "its output is quantized as probabilities (scale 1/256)"
    elif label_count is not None and label_count in (depth, depth - 1):
        why = f"its labels name its {depth} outputs"
    if why:
        raise InvalidModel(f"{name} outputs class scores, not an embedding ({why}): {_HINT}")
    return depth


POOLING = frozenset({"AVERAGE_POOL_2D", "MEAN", "L2_NORMALIZATION"})


def pooled_output(model: TfliteModel) -> Optional[Operator]:
    """The global pooling (or L2 normalization) making a one-output model's output, as an
    embedding extractor ends; None when its output comes from anything else."""
    if len(model.outputs) != 1:
        return None
    source = output_source(model, model.outputs[0])
    return source if source is not None and source.op in POOLING else None


def embedding_output(model: TfliteModel, label_count: Optional[int] = None) -> Optional[int]:
    """D when `model` is an embedding extractor by its graph: one output, a feature vector
    [1, 1, 1, D] or [1, D] made by a global pooling (a classifier's scores come from a
    FULLY_CONNECTED or a SOFTMAX), and the labels, when there are `label_count`, not naming its D
    values (a classifier ending at a pooled convolution, such as SqueezeNet's logits). Else None.
    What `convert` records as the task `embed`, measuring agreement without class scores."""
    if pooled_output(model) is None:
        return None
    depth = embedding_depth(model.output_tensors[0].shape)
    if depth is None or (label_count is not None and label_count in (depth, depth - 1)):
        return None
    return depth


def embedding_note(model: TfliteModel, declared: bool = False) -> Optional[str]:
    """Why a one-output model's values are no class scores (it ends in a global pooling, as an
    embedding extractor does, or its sidecar says it is one: `declared`), or None when they may
    be."""
    if len(model.outputs) != 1:
        return None
    source = pooled_output(model)
    if source is None and not declared:
        return None
    size = 1
    for d in model.output_tensors[0].shape:
        size *= max(int(d), 1)
    why = (f"its output ({size} values) comes from {source.op}, not from a classifier layer"
           if source is not None else "its sidecar records it as an embedding extractor")
    return (f"{model.path} looks like an embedding model: {why}, so the 'scores' below are feature "
            "values, not class probabilities; `edgeapp retrain` puts a classifier on it")
