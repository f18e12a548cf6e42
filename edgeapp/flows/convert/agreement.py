"""Float original vs the int8 model it became, measured after every conversion.

The float model (Keras, or ONNX Runtime for ONNX) and the written .tflite run on images never
used for calibration (the held-out part of --calibration, or --eval); the int8 model runs as
`classify` runs it (the same input quantization, the CPU runtime edgeapp picks). Reported: per
output cosine and SQNR float vs dequantized int8; for class vectors top-1 agreement and, when
the images' class folders give labels, top-1/top-5 accuracy of both.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core.quant.metrics import OutputAgreement, align, class_agreement, compare_outputs, is_class_vector
from edgeapp.core.vision.preprocess import quantize_input
from edgeapp.execution.runner import SingleRunner
from edgeapp.flows.convert.data import Dataset, normalize
from edgeapp.flows.sources.base import FloatModel
from edgeapp.flows.sources.source import BoxAgreementReport
from edgeapp.hw.runtime import open_engine


class AgreementReport(TypedDict, total=False):
    """The int8 model against its float source on held-out images: per output cosine and SQNR;
    for class scores top-1 agreement (and accuracy when labelled; None otherwise); for a
    detector its boxes (`detection`)."""
    samples: int
    measured_on: str
    float_runtime: str
    outputs: List[OutputAgreement]
    agreement: Optional[float]
    float_accuracy: Optional[float]
    int8_accuracy: Optional[float]
    float_top5: Optional[float]
    int8_top5: Optional[float]
    detection: BoxAgreementReport

def run_int8(path: Path, data: Dataset, mean: float, std: float) -> list:
    """Dequantized outputs of the int8 model, one (N, ...) array per output, run through the
    batch spine's feed (`Runner.run_all`)."""
    engine = open_engine(path, "cpu")
    scale, zero = engine.input_quantization
    dtype = engine.input_dtype
    x = normalize(data, mean, std) if data.normalized else None

    def prepare(i: int) -> tuple:
        if x is not None:  # float model inputs (.npy): quantize them directly
            q = x[i].astype(dtype) if dtype.kind == "f" else np.clip(
                np.rint(x[i] / scale + zero), *_limits(dtype)).astype(dtype)
        else:
            q = quantize_input(data.x[i], dtype, scale, zero, mean, std)
        return q[None], None

    outs = [[_dequantize(r, o) for r, o in zip(done.outputs, engine.outputs)]
            for _i, _, done in SingleRunner(engine).run_all(range(len(data.x)), prepare, workers=0)]
    return [np.concatenate([o[k] for o in outs]) for k in range(len(engine.outputs))]


def _dequantize(raw: np.ndarray, detail: dict) -> np.ndarray:
    scale, zero = detail.get("quantization", (0.0, 0))
    if raw.dtype.kind == "f" or not scale:
        return raw.astype(np.float32)
    return (raw.astype(np.float32) - zero) * np.float32(scale)


def _limits(dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return info.min, info.max


def measure(path: Path, model: FloatModel, data: Dataset, mean: float, std: float,
            source: str, labels: Optional[np.ndarray] = None, class_scores: bool = True) -> AgreementReport:
    """The agreement report: where it was measured, per output cosine/SQNR, and for class
    scores (not `class_scores=False`: an embedding's features) top-1 agreement and accuracy."""
    reference = model.predict(normalize(data, mean, std))
    test = run_int8(path, data, mean, std)
    outputs = compare_outputs(reference, test, model.output_names)
    report: AgreementReport = {"samples": int(len(data.x)), "measured_on": source, "float_runtime": model.runtime,
                               "outputs": outputs, "agreement": None, "float_accuracy": None, "int8_accuracy": None,
                               "float_top5": None, "int8_top5": None}
    if class_scores and reference and test and is_class_vector(reference[0].shape):
        got = align(reference[0], test[0])
        if got is not None:
            report.update(class_agreement(reference[0], got, labels if labels is not None else data.y))
    return report


def truth_labels(data: Dataset, names: Optional[dict]) -> Optional[np.ndarray]:
    """Class indices of the images: their folder's position in the model's labels (--val-labels,
    else --labels) when every folder is found there, else the sorted folder order (Keras' and
    torchvision's ImageFolder's)."""
    if data.y is None or not data.class_names:
        return None
    if names:
        index = {str(v).strip().lower(): k for k, v in names.items()}
        found = [index.get(c.strip().lower()) for c in data.class_names]
        if all(f is not None for f in found):
            return np.array([found[c] if c >= 0 else -1 for c in data.y])
    return data.y
