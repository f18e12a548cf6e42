"""Classifier or embedding extractor? Both have one vector output; only one holds class scores.

An embedding extractor (Coral's `*_embedding_extractor.tflite`, a backbone cut before its
classifier) ends in a global pooling (AVERAGE_POOL_2D or MEAN), maybe reshaped or normalised:
its values are features, and `classify` would print them as class scores. A classifier's output
comes from a classifier layer (FULLY_CONNECTED or a 1×1 CONV_2D), mostly through SOFTMAX.
"""

from __future__ import annotations

from typing import Optional

from edgeapp.core.tflite.model import Model

POOLING = frozenset({"AVERAGE_POOL_2D", "MEAN", "L2_NORMALIZATION"})
PASS_THROUGH = frozenset({"RESHAPE", "SQUEEZE", "QUANTIZE", "DEQUANTIZE"})


def output_source(model: Model, output: int = 0) -> Optional[str]:
    """The operator that makes output `output`, looking through reshapes and (de)quantization."""
    producer = {t: op for op in model.operators for t in op.outputs}
    tensor = model.outputs[output] if output < len(model.outputs) else -1
    seen = set()
    while tensor in producer and tensor not in seen:
        seen.add(tensor)
        op = producer[tensor]
        if op.op not in PASS_THROUGH or not op.inputs:
            return op.op
        tensor = op.inputs[0]
    return None


def embedding_note(model: Model) -> Optional[str]:
    """Why a one-output model's values are no class scores, or None when they may be."""
    if len(model.outputs) != 1:
        return None
    source = output_source(model)
    if source not in POOLING:
        return None
    size = 1
    for d in model.output_tensors[0].shape:
        size *= max(int(d), 1)
    return (f"{model.path} looks like an embedding model: its output ({size} values) comes from "
            f"{source}, not from a classifier layer, so the 'scores' below are feature values, "
            "not class probabilities; train a classifier on them (the Python API's model.run "
            "gives the vector) or use the model with its classification head")
