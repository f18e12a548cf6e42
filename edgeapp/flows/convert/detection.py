"""A YOLO conversion's own steps: calibration images letterboxed as `detect` letterboxes them,
agreement in detection terms, and the sidecar entry that lets `detect` read the outputs.

Agreement without labelled data: the float original (ONNX Runtime running the user's whole
export, Ultralytics' own decode included) finds boxes on held-out images; those boxes stand in
as ground truth for the int8 model, decoded on the CPU as `detect` decodes it; COCO mAP50-95
and mAP50 (core/eval/coco, as `eval` computes them) say how much of the float model's
detections the int8 one keeps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from edgeapp.core.eval.coco import box_metrics
from edgeapp.core.meta import YoloSidecar
from edgeapp.core.vision.preprocess import quantize_input
from edgeapp.core.vision.yolo import (
    CONF,
    IOU,
    MAX_DET,
    PAD_VALUE,
    YoloLayout,
    decode,
    engine_yolo_layout,
    find_yolo_layout,
    letterbox,
    nms,
    output_quantizations,
)
from edgeapp.errors import MissingDependency
from edgeapp.execution.runner import SingleRunner
from edgeapp.flows.convert.data import Dataset, normalize
from edgeapp.flows.convert.yolo_onnx import REG_MAX, YoloHead
from edgeapp.flows.sources.source import BoxAgreementReport
from edgeapp.hw.runtime import open_engine

EVAL_CONF = 0.001  # the score floor of a mAP evaluation (Ultralytics' val uses the same)


def letterboxer(size: tuple[int, int]):
    """Decoded pixels -> the model's input pixels, letterboxed exactly as `detect` does it
    (core/vision/yolo.letterbox: Ultralytics' LetterBox(auto=False), grey 114)."""

    def fit(pixels: np.ndarray) -> np.ndarray:
        return letterbox(pixels if pixels.ndim == 3 else pixels[:, :, None], size)[0]

    return fit


def sidecar_entry(head: YoloHead, width: int, height: int) -> YoloSidecar:
    """What `detect` needs beyond the graph: which output is which, the size, the letterbox."""
    meta = head.metadata
    entry: YoloSidecar = {"layout": "dfl", "boxes": 0, "scores": 1, "classes": head.nc, "reg_max": REG_MAX,
                          "input_size": [width, height], "strides": list(head.strides),
                          "letterbox": {"pad_value": PAD_VALUE, "centered": True, "auto": False},
                          "exported_by": " ".join(str(meta[k]) for k in ("author", "version") if meta.get(k)) or None,
                          "decode": "on the CPU: DFL softmax, anchors and strides, sigmoid (core/vision/yolo.py)"}
    if head.rewrites:  # what the int8 graph computes differently from the export (same function)
        entry["rewritten_for_edgetpu"] = [f"attention {r}" for r in head.rewrites]
    return entry


def _detections(boxes_xyxy, scores, classes) -> list:
    return [(float(s), int(c), [float(v) for v in b]) for b, s, c in zip(boxes_xyxy, scores, classes)]


def float_detections(session, input_name: str, layout_nchw: bool, x: np.ndarray, nc: int,
                     conf: float = CONF) -> list:
    """The whole export's own output (1, 4 + nc, N), boxes in input pixels, per image: NMS'd
    (score, class, xyxy) lists."""
    h, w = x.shape[1:3]
    layout = None
    out = []
    for i in range(len(x)):
        feed = x[i:i + 1].transpose(0, 3, 1, 2) if layout_nchw else x[i:i + 1]
        raw = session.run(None, {input_name: feed.astype(np.float32)})[0]
        raw = raw.reshape(raw.shape[-2:]).astype(np.float32).copy()
        raw[:4] /= np.array([w, h, w, h], np.float32)[:, None]  # decode_v8 reads normalized boxes
        if layout is None:
            layout = find_yolo_layout([(1,) + raw.shape], (w, h), "yolov8")
        out.append(_nms(decode([raw[None]], [(0.0, 0)], layout, (w, h), conf)))
    return out


def int8_detections(path: Path, data: Dataset, mean: float, std: float, entry: dict,
                    conf: float = EVAL_CONF) -> list:
    """The int8 model run as `detect` runs it (input quantization, the sidecar's layout, decode
    and NMS on the CPU), per image, through the batch spine's feed (`Runner.run_all`)."""
    engine = open_engine(path, "cpu")
    layout: YoloLayout = engine_yolo_layout(engine, None, entry)
    quant = output_quantizations(engine)
    scale, zero = engine.input_quantization
    h, w = data.x.shape[1:3]

    def prepare(pixels: np.ndarray) -> tuple:
        return quantize_input(pixels, engine.input_dtype, scale, zero, mean, std)[None], None

    return [_nms(decode(done.outputs, quant, layout, (w, h), conf))
            for _, _, done in SingleRunner(engine).run_all(data.x, prepare, workers=0)]


def _nms(found) -> list:
    keep = nms(found.boxes, found.scores, found.classes, IOU, MAX_DET)
    return _detections(found.boxes[keep], found.scores[keep], found.classes[keep])


def coco_map(truth: list, found: list, classes: int) -> Optional[dict]:
    """COCO box mAP50-95 and mAP50 of `found` against `truth` (per image lists of (score,
    class, xyxy); truth's scores ignored), by `eval`'s own evaluator (core/eval/coco); None
    without its library or without truth."""
    anns, dets = [], []
    for image, (t, f) in enumerate(zip(truth, found)):
        for _, c, b in t:
            anns.append({"id": len(anns) + 1, "image_id": image, "category_id": c, "iscrowd": 0,
                         "bbox": _xywh(b), "area": (b[2] - b[0]) * (b[3] - b[1])})
        dets += [{"image_id": image, "category_id": c, "bbox": _xywh(b), "score": s} for s, c, b in f]
    if not anns:
        return None
    gt = {"images": [{"id": i} for i in range(len(truth))], "annotations": anns,
          "categories": [{"id": c, "name": str(c)} for c in range(classes)]}
    try:
        scores = box_metrics(gt, dets)
    except MissingDependency:
        return None
    return {"map50_95": round(scores["map"], 4), "map50": round(scores["map50"], 4),
            "truth_boxes": len(anns), "found_boxes": len(dets)}


def _xywh(b) -> list:
    return [b[0], b[1], b[2] - b[0], b[3] - b[1]]


class BoxAgreement:
    """Detection agreement against one held-out set: the float export's boxes found once (the
    ground truth), then any int8 file (the conversion, each `--max-drop` trial) scored on them."""

    def __init__(self, session, inp, data: Dataset, mean: float, std: float, entry: dict,
                 source: str) -> None:
        self.data, self.mean, self.std, self.entry, self.source = data, mean, std, entry, source
        x = normalize(data, mean, std)
        self.truth = float_detections(session, inp.name, inp.layout == "NCHW", x, entry["classes"])

    @property
    def has_boxes(self) -> bool:
        return any(self.truth)

    def __call__(self, path: Path) -> BoxAgreementReport:
        found = int8_detections(path, self.data, self.mean, self.std, self.entry)
        scores = coco_map(self.truth, found, self.entry["classes"])
        return {"samples": int(len(self.data.x)), "measured_on": self.source, "float_runtime": "ONNX Runtime",
                "float_boxes": sum(len(t) for t in self.truth),
                "truth": f"the float model's boxes (score > {CONF})",
                "map50_95": None if scores is None else scores["map50_95"],
                "map50": None if scores is None else scores["map50"],
                "note": None if scores is not None else (
                    "no box found by the float model" if not self.has_boxes else
                    "the eval extra is not installed: pip install 'edgeapp[eval]'")}
