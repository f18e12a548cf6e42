"""An Ultralytics YOLO detection export as convert reads it: cut before its decode (which runs on
the CPU), calibrated and measured on letterboxed images as `detect` feeds it, its boxes agreed
against the float export's (flows/convert/detection.py), its names and `dfl` layout written to
the sidecar. Its task is the one whose `ultralytics_task` is Ultralytics' name for detection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

from edgeapp.flows.convert.data import Dataset
from edgeapp.flows.convert.detection import BoxAgreement, letterboxer, sidecar_entry
from edgeapp.flows.convert.onnx import ort_session
from edgeapp.flows.convert.onnx_graph import OnnxInput, fixed_model
from edgeapp.flows.convert.onnx_source import OnnxSource
from edgeapp.flows.convert.yolo_onnx import YoloHead, cut_head
from edgeapp.flows.sources.float_engine import ULTRALYTICS_DETECT
from edgeapp.flows.sources.source import BoxCheck, FitPixels, SayLine, SidecarLayout
from edgeapp.tasks import for_ultralytics


class YoloOnnxSource(OnnxSource):
    """An Ultralytics detection export whose Detect head (`yolo`) was found in the graph. Its
    ranges are also tried re-measured by default, kept when they measure better: on the fixtures'
    labelled images neither the calibrator's ranges nor the re-measured ones win on every
    calibration sample (scripts/bench_yolo_calibration.py), so the user's data decides."""

    remeasures_ranges = True

    def __init__(self, path: Path, model, inp: OnnxInput, yolo: YoloHead) -> None:
        super().__init__(path, model, inp, cut_head(fixed_model(model, inp), yolo))
        self.yolo = yolo

    @property
    def task(self) -> Optional[str]:
        return for_ultralytics(ULTRALYTICS_DETECT)

    def describe(self, say: SayLine) -> None:
        say(f"an Ultralytics YOLO detection export ({self.yolo.nc} classes, strides "
            f"{'/'.join(map(str, self.yolo.strides))}): cut before its decode, which runs on the CPU")

    def head(self) -> Optional[YoloHead]:
        return self.yolo

    def fit(self) -> Optional[FitPixels]:
        return letterboxer((self.inp.width, self.inp.height))

    def labels(self) -> Optional[Dict[int, str]]:
        return self.yolo.names

    def sidecar_layout(self) -> SidecarLayout:
        return {"yolo": sidecar_entry(self.yolo, self.inp.width, self.inp.height)}

    def boxes(self, data: Dataset, mean: float, std: float, source: str, say: SayLine) -> Optional[BoxCheck]:
        """BoxAgreement on `data`: the float export's boxes found once."""
        say(f"measuring detections of float vs int8 on {len(data.x)} image(s)")
        session = ort_session(fixed_model(self.model, self.inp))
        return BoxAgreement(session, self.inp, data, mean, std,
                            sidecar_entry(self.yolo, self.inp.width, self.inp.height), source)
