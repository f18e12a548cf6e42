"""A model format as `convert` reads it: one class per format (Keras here; ONNX and Ultralytics
YOLO ONNX exports in flows/convert/), so that convert's steps ask the source instead of testing
which format it is.

A source owns what differs between formats: how the float model loads (and whether it needs the
calibration images first), how images become its inputs (a YOLO export's letterbox), what else
measures its agreement (a detector's boxes), its own labels, metadata and task, and what its
sidecar records of its layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager, Dict, Optional, Tuple

import numpy as np
from typing_extensions import Protocol, TypedDict

from edgeapp.core.meta import ModelMeta
from edgeapp.flows.sources.base import FloatModel, Progress

if TYPE_CHECKING:
    from edgeapp.core.meta import YoloSidecar

SayLine = Callable[[str], None]
TimeStep = Callable[[str], ContextManager[None]]  # timed(step): the block's seconds in the report's times
FitPixels = Callable[[np.ndarray], np.ndarray]  # decoded pixels -> the model's input pixels


class Images(Protocol):
    """Held-out images as convert holds them (flows/convert/data.Dataset): input pixels, NHWC."""

    x: np.ndarray


class BoxAgreementReport(TypedDict):
    """A detector's int8 boxes scored against its float export's (the agreement's `detection`)."""
    samples: int
    measured_on: str
    float_runtime: str
    float_boxes: int
    truth: str  # what counts as truth, in words
    map50_95: Optional[float]
    map50: Optional[float]
    note: Optional[str]  # why there is no score


class SidecarLayout(TypedDict, total=False):
    """What a source adds to the sidecar's `extra` to open the written model."""
    yolo: YoloSidecar


class BoxCheck(Protocol):
    """A detector's box agreement (flows/convert/detection.BoxAgreement): the float model's boxes
    on `data` found once, then any int8 file scored on them."""

    source: str  # where the images come from, in words
    data: Images

    @property
    def has_boxes(self) -> bool: ...

    def __call__(self, path: Path) -> BoxAgreementReport: ...


class ModelSource:
    """A float model file of one format, checked; `load` gives its FloatModel."""

    format = ""  # the report's `source_format`: "keras" or "onnx"
    # every tensor's range also tried re-measured by default, kept when it measures better
    # (flows/convert/tune.Tuning.remeasure): a YOLO export, whose mAP budget is one point
    remeasures_ranges = False

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def task(self) -> Optional[str]:
        """The task the format fixes (a YOLO export's), else None: the written model's outputs
        say it (tasks.guess_from), and an extractor of features is told apart by them."""
        return None

    def input_size(self) -> Optional[Tuple[int, int, int]]:
        """(width, height, channels) known before loading (ONNX: then the calibration images are
        loaded first, to seed the conversion), else None (the loaded model says it)."""
        return None

    def load(self, calibration: Optional[np.ndarray], output: Path, say: SayLine, progress: Progress,
             timed: TimeStep) -> FloatModel:
        """The float model; `calibration` (normalized NHWC inputs) when `input_size` is known."""
        raise NotImplementedError

    def fit(self) -> Optional[FitPixels]:
        """How images become inputs besides the plain resize, or None."""
        return None

    def labels(self) -> Optional[Dict[int, str]]:
        """The class names the model itself carries for its sidecar, or None (--labels or the
        class folders name them)."""
        return None

    def metadata(self) -> ModelMeta:
        """What the file says of itself (an Ultralytics export's names, task, pixels / 255)."""
        return ModelMeta()

    def sidecar_layout(self) -> SidecarLayout:
        """Entries the sidecar's `extra` needs to open the written model (a YOLO layout)."""
        return {}

    def boxes(self, data: Images, mean: float, std: float, source: str, say: SayLine) -> Optional[BoxCheck]:
        """A detector's box agreement on held-out `data` (flows/convert/detection.BoxAgreement:
        int8 file -> its report), or None for a model without boxes."""
        return None
