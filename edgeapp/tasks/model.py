"""An opened image model and what every task needs of it besides its graph: labels, input layout.

`image_model` reads labels and normalization from the flags, else the model's sidecar or
metadata; `InputSpec` is how an image becomes this model's input tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Optional, Union

import numpy as np

from edgeapp.core.labels import read_labels
from edgeapp.core.meta import ModelMeta, read_meta
from edgeapp.core.vision.preprocess import CORAL_MEAN, CORAL_STD, DECODES
from edgeapp.errors import InvalidModel, UsageError

if TYPE_CHECKING:
    from edgeapp.hw.runtime import Engine


@dataclass(frozen=True)
class InputSpec:
    """How to turn an image into this model's input tensor."""

    width: int
    height: int
    channels: int
    dtype: np.dtype
    scale: float
    zero_point: int
    mean: float
    std: float
    decode: Optional[str] = None  # --decode: JPEGs "scaled" to what the input needs, or "full"
    # (core/vision/preprocess.py); None: neither the flag nor the sidecar says, the task decides (`decode_of`)
    normalization_given: bool = True  # mean/std from the flags or the model's metadata

    @property
    def size(self) -> tuple[int, int]:
        return self.width, self.height

    @property
    def decode_size(self) -> Optional[tuple[int, int]]:
        """What core/vision/preprocess.decode_image decodes JPEGs for: with --decode scaled the input
        size, with --decode full None (whole)."""
        return self.size if self.decode == "scaled" else None


def input_spec(engine: Engine, meta: ModelMeta, mean: Optional[float] = None,
               std: Optional[float] = None, decode: Optional[str] = None) -> InputSpec:
    """Input layout from the model; normalization from flags, else metadata, else Coral's 128/128;
    the JPEG decode as `decode_of` says (before a task is bound: the flag, else the sidecar)."""
    if len(engine.inputs) != 1:
        raise InvalidModel(f"{engine.model_path} has {len(engine.inputs)} inputs; an image model "
                           "has one")
    shape = engine.input_shape
    if len(shape) != 4 or shape[0] != 1 or shape[3] not in (1, 3):
        raise InvalidModel(f"{engine.model_path}: input shape {list(shape)} is not an image tensor "
                           "[1, height, width, 1 or 3]")
    if engine.input_dtype not in (np.uint8, np.int8, np.float32):
        raise InvalidModel(f"{engine.model_path}: input type {engine.input_dtype} is not supported "
                           "(uint8, int8 or float32)")
    scale, zero = engine.input_quantization
    return InputSpec(width=shape[2], height=shape[1], channels=shape[3], dtype=engine.input_dtype,
                     scale=scale, zero_point=zero,
                     mean=_first(mean, meta.mean, CORAL_MEAN), std=_first(std, meta.std, CORAL_STD),
                     decode=decode_of(decode, meta.decode),
                     normalization_given=(mean, std, meta.mean, meta.std) != (None,) * 4)


def decode_of(flag: Optional[str], calibrated: Optional[str] = None,
              task_default: Optional[str] = None) -> Optional[str]:
    """--decode's value, the one place its default is decided: the flag, else what the model
    was calibrated with (its sidecar's "decode"), else the task's own (TaskKind.decode; None
    while no task is bound to the model)."""
    return check_decode(flag) or check_decode(calibrated) or task_default


def check_decode(value: Union[str, Enum, None]) -> Optional[str]:
    """--decode's value (an enum member or its text), checked: the API takes the same words."""
    value = getattr(value, "value", value)
    if value is not None and value not in DECODES:
        raise UsageError(f"--decode {value!r}: one of {', '.join(DECODES)}")
    return value


@dataclass(frozen=True)
class ImageModel:
    """An opened image model and what it needs besides its graph: labels and input layout."""

    engine: Engine  # a .tflite, a float source, or a pipeline's view of its segments
    meta: ModelMeta
    labels: Optional[dict[int, str]]
    spec: InputSpec


def image_model(engine: Engine, model_path, labels_file=None, mean: Optional[float] = None,
                std: Optional[float] = None, decode: Optional[str] = None,
                labels: Optional[dict] = None) -> ImageModel:
    """Labels from `labels` or the file given, else the model's metadata; normalization likewise.

    The metadata is that of the file the engine opened, which for a model given by name
    (`edgeapp classify mobilenet_v2`) is the pulled file, not `model_path`."""
    meta = read_meta(engine.requested_model or model_path)
    if labels is None:
        labels = read_labels(labels_file) if labels_file else meta.labels
    return ImageModel(engine, meta, labels, input_spec(engine, meta, mean, std, decode))


def output_shapes(engine: Engine) -> list[tuple[int, ...]]:
    return [tuple(int(d) for d in o["shape"]) for o in engine.outputs]


def output_quantization(engine: Engine, index: int = 0) -> tuple[float, int]:
    """(scale, zero point) of one output; (0.0, 0) for a float output."""
    scale, zero = engine.outputs[index].get("quantization", (0.0, 0))
    return float(scale), int(zero)


def input_size(engine: Engine) -> Optional[tuple[int, int]]:
    """(width, height) of an image model's input, or None when it is not [1, H, W, C]."""
    shape = tuple(int(d) for d in engine.input_shape)
    return (shape[2], shape[1]) if len(shape) == 4 else None


def op_names(engine: Engine) -> list[str]:
    return [op.op for op in engine.model.operators]


def describe_outputs(engine: Engine) -> str:
    return ", ".join(str(list(s)) for s in output_shapes(engine))


def _first(*values):
    return next(v for v in values if v is not None)
