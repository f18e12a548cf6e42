"""An ONNX file as convert reads it: the graph read and checked before TensorFlow loads (exit
6/7 then), converted by onnx2tf (flows/convert/onnx.py) with its calibration images, loaded
first, seeding it; ONNX Runtime runs the float original.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from edgeapp.core.meta import ModelMeta
from edgeapp.core.naming import convert_log_path
from edgeapp.flows.convert.data import make_output_folder
from edgeapp.flows.convert.onnx import load_onnx
from edgeapp.flows.convert.onnx_graph import OnnxInput
from edgeapp.flows.convert.yolo_onnx import YoloHead
from edgeapp.flows.sources.base import FloatModel, Progress
from edgeapp.flows.sources.float_engine import meta_from_props
from edgeapp.flows.sources.source import ModelSource, SayLine, TimeStep


class OnnxSource(ModelSource):
    """A plain ONNX model (a classifier, a segmenter, ...): `model` the parsed ModelProto, `inp`
    its image input, `converted` what onnx2tf converts (here the model itself)."""

    format = "onnx"

    def __init__(self, path: Path, model, inp: OnnxInput, converted=None) -> None:
        super().__init__(path)
        self.model, self.inp = model, inp
        self.converted = model if converted is None else converted

    def input_size(self) -> Optional[Tuple[int, int, int]]:
        return self.inp.width, self.inp.height, self.inp.channels

    def load(self, calibration: Optional[np.ndarray], output: Path, say: SayLine, progress: Progress,
             timed: TimeStep) -> FloatModel:
        make_output_folder(output)  # for the log
        log = convert_log_path(output)
        say(f"converting {self.path} with onnx2tf (log: {log})")
        self.describe(say)
        with timed("onnx2tf: the float TensorFlow graph"):
            return load_onnx(self.converted, self.inp, calibration, log, progress, self.head())

    def describe(self, say: SayLine) -> None:
        """What is said of the model before onnx2tf runs, beyond its name (a YOLO export's cut)."""

    def head(self) -> Optional[YoloHead]:
        """The Ultralytics head whose Convs the converted graph ends at, or None."""
        return None

    def metadata(self) -> ModelMeta:
        return meta_from_props({m.key: m.value for m in getattr(self.model, "metadata_props", [])})
