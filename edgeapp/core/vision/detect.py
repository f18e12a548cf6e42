"""Detection post-processing: which output is which, then thresholded objects in pixels.

Models ending in TFLite's detection post-process op give four outputs: boxes [1, N, 4] as
normalized [ymin, xmin, ymax, xmax], class ids [1, N], scores [1, N] and the count [1]. Their
order in the model's output list depends on how it was exported, so `find_layout` works it out:

1. the post-process op itself, when the model has it: its outputs are, by the op's definition,
   (boxes, classes, scores, count) — this holds for every export, compiled or not;
2. a signature naming the outputs output_0..output_3: the two orders in use are each other's
   reverse — (boxes, classes, scores, count) as the converter writes a tuple-returning
   function, and (count, scores, classes, boxes) as pycoral reads TF2 exports — and the box
   tensor ([.., 4]) tells which one it is;
3. the position: TF1 SSD (boxes, classes, scores, count), TF2 (scores, boxes, count, classes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, NamedTuple, Optional, Sequence

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core.vision.boxes import BBox, Fit, to_original
from edgeapp.core.vision.classify import dequantize
from edgeapp.errors import InvalidModel


class ObjectItem(TypedDict):
    """An object in a record: class id, label (None without labels), score, and its box
    [xmin, ymin, xmax, ymax] in the image's pixels."""
    id: int
    label: Optional[str]
    score: float
    bbox: List[int]


POSTPROCESS_OP = "TFLite_Detection_PostProcess"
ROLES = ("boxes", "classes", "scores", "count")  # the op's own output order


@dataclass(frozen=True)
class OutputInfo:
    """What layout recognition needs of one model output: its tensor index, name and shape."""

    index: int
    name: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class SsdLayout:
    """Positions of the four detection outputs in the model's output list."""

    boxes: int
    classes: int
    scores: int
    count: int
    how: str  # how it was recognised, for messages and tests


class Object(NamedTuple):
    id: int
    score: float
    bbox: BBox  # in the original image's pixels


def _is_boxes(shape: Sequence[int]) -> bool:
    return len(shape) >= 2 and shape[-1] == 4


def _is_count(shape: Sequence[int]) -> bool:
    return int(np.prod(shape)) == 1 if len(shape) else True


def _is_vector(shape: Sequence[int]) -> bool:
    return not _is_boxes(shape) and len(shape) in (1, 2) and int(np.prod(shape)) > 1


def _layout(order: Sequence[str], positions: Sequence[int], how: str) -> SsdLayout:
    return SsdLayout(**dict(zip(order, positions)), how=how)


def find_layout(outputs: Sequence[OutputInfo], postprocess_outputs: Optional[Sequence[int]] = None,
                signature: Sequence[tuple[str, int]] = (), name: str = "model") -> SsdLayout:
    """Recognise which output is boxes, classes, scores and count (see the module doc).

    `postprocess_outputs` are the tensor indices the post-process op writes, `signature` the
    (name, tensor index) pairs of the model's signature outputs. Raises InvalidModel when the
    outputs are not a detection model's.
    """
    shapes = ", ".join(str(list(o.shape)) for o in outputs)
    if len(outputs) != 4:
        vector = len(outputs) == 1 and _is_vector(outputs[0].shape)  # one score vector
        hint = " (it looks like a classifier: use `edgeapp classify`)" if vector else ""
        raise InvalidModel(f"{name} has {len(outputs)} outputs ({shapes}); a detection model ending "
                           f"in the post-process op has four: boxes, classes, scores, count{hint}")
    where = {o.index: i for i, o in enumerate(outputs)}

    if postprocess_outputs is not None and len(postprocess_outputs) == 4 and \
            all(t in where for t in postprocess_outputs):
        return _layout(ROLES, [where[t] for t in postprocess_outputs], f"{POSTPROCESS_OP} op")

    named = {n: t for n, t in signature}
    sig_names = [f"output_{i}" for i in range(4)]
    if all(n in named and named[n] in where for n in sig_names):
        pos = [where[named[n]] for n in sig_names]
        s = [outputs[p].shape for p in pos]
        if _is_boxes(s[0]) and _is_count(s[3]) and _is_vector(s[1]) and _is_vector(s[2]):
            return _layout(("boxes", "classes", "scores", "count"), pos, "signature output_0..3")
        if _is_count(s[0]) and _is_boxes(s[3]) and _is_vector(s[1]) and _is_vector(s[2]):
            return _layout(("count", "scores", "classes", "boxes"), pos, "signature output_0..3")

    s = [o.shape for o in outputs]
    if _is_boxes(s[0]) and _is_vector(s[1]) and _is_vector(s[2]) and _is_count(s[3]):
        return _layout(("boxes", "classes", "scores", "count"), range(4), "TF1 output order")
    if _is_vector(s[0]) and _is_boxes(s[1]) and _is_count(s[2]) and _is_vector(s[3]):
        return _layout(("scores", "boxes", "count", "classes"), range(4), "TF2 output order")
    raise InvalidModel(f"{name}: cannot tell its detection outputs apart ({shapes}); expected the "
                       f"{POSTPROCESS_OP} outputs boxes [1,N,4], classes [1,N], scores [1,N], "
                       "count [1]")


def engine_layout(engine) -> SsdLayout:
    """The layout of an opened `runtime.Engine` (its outputs, op and signature)."""
    model = engine.model
    infos = [OutputInfo(int(o["index"]), str(o.get("name", "")), tuple(int(d) for d in o["shape"]))
             for o in engine.outputs]
    post = next((op.outputs for op in model.operators if op.op == POSTPROCESS_OP), None)
    return find_layout(infos, post, model.signature_outputs, engine.model_path)


def get_objects(outputs: Sequence[np.ndarray], layout: SsdLayout, fit: Fit,
                quantization: Optional[Sequence[tuple[float, int]]] = None,
                threshold: float = 0.0, top_k: Optional[int] = None) -> list[Object]:
    """Objects scoring ≥ threshold, best first (at most top_k), boxes in original pixels."""
    q = list(quantization) if quantization else [(0.0, 0)] * len(outputs)

    def real(role: str) -> np.ndarray:
        i = getattr(layout, role)
        scale, zero = q[i]
        return dequantize(np.asarray(outputs[i]), float(scale), int(zero))

    raw_boxes = real("boxes")
    if raw_boxes.size % 4:  # the runtime gave what the model's declared shapes did not say
        raise InvalidModel(f"the model's boxes output has {raw_boxes.size} values when run, not 4 per "
                           "box: the file is damaged; re-download or re-convert it")
    boxes = raw_boxes.reshape(-1, 4)
    classes = real("classes").reshape(-1)
    scores = real("scores").reshape(-1)
    n = min(len(boxes), len(classes), len(scores))
    count_values = real("count").reshape(-1)
    count = n if count_values.size == 0 or not np.isfinite(count_values[0]) else \
        int(np.clip(np.rint(count_values[0]), 0, n))
    idx = [i for i in range(count) if np.isfinite(scores[i]) and scores[i] >= threshold
           and np.isfinite(classes[i]) and np.isfinite(boxes[i]).all()]  # NaN: a damaged model
    idx.sort(key=lambda i: (-float(scores[i]), i))
    if top_k is not None:
        idx = idx[:max(0, top_k)]
    return [Object(int(np.rint(classes[i])), float(scores[i]),
                   to_original(BBox.from_yxyx(*boxes[i].tolist()), fit)) for i in idx]


def object_fields(objects: Sequence[Object], labels: Optional[dict[int, str]]) -> List[ObjectItem]:
    """The JSON form of objects: id, label, score, bbox [xmin, ymin, xmax, ymax] in pixels."""
    return [{"id": o.id, "label": labels.get(o.id) if labels else None, "score": round(o.score, 6),
             "bbox": o.bbox.rounded()} for o in objects]
