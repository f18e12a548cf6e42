"""The source class of a model file (flows/sources/source.ModelSource): Keras, ONNX or an
Ultralytics YOLO ONNX export, told apart once, before TensorFlow loads.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, Optional

from edgeapp.errors import UsageError
from edgeapp.flows.convert import onnx_graph, yolo_onnx
from edgeapp.flows.convert.onnx_source import OnnxSource
from edgeapp.flows.convert.yolo_source import YoloOnnxSource
from edgeapp.flows.sources.keras import KerasSource
from edgeapp.flows.sources.source import ModelSource


def open_source(path: Path, fmt: str, input_size: Optional[tuple], times: Dict[str, float]) -> ModelSource:
    """The source of `path` (whose `fmt` flows/sources.source_format said); for ONNX the whole
    graph check, timed into `times` (exit 6/7 for what onnx2tf or the Edge TPU cannot take)."""
    if fmt != "onnx":
        if input_size is not None:
            raise UsageError("--input-size is for ONNX models with symbolic height/width")
        return KerasSource(path)
    start = time.perf_counter()
    onnx_graph.onnx2tf_ops_folder()  # the extra is installed (exit 7 otherwise)
    model = onnx_graph.read_onnx(path)
    inp = onnx_graph.image_input(model, input_size, path)
    head = yolo_onnx.find_head(onnx_graph.fixed_model(model, inp), path)
    source = OnnxSource(path, model, inp) if head is None else YoloOnnxSource(path, model, inp, head)
    onnx_graph.refuse_unmappable(source.converted, path)
    times["read and check the ONNX graph"] = round(time.perf_counter() - start, 2)
    return source
