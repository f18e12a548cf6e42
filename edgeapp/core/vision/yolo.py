"""YOLO post-processing on the host, as Ultralytics does it: pure functions over numpy arrays.

Three output layouts, told apart by their shapes and the input size (N = the anchors of the
strides 8, 16, 32: 1,344 at 256x256, 2,100 at 320, 8,400 at 640):

* ``yolov8`` — Ultralytics' YOLOv8/YOLO11/YOLOv5u export: one output ``(1, 4 + nc, N)``: rows
  0-3 ``cx, cy, w, h`` normalized to the (letterboxed) input, then per-class scores already
  through a sigmoid, no objectness. ``(1, N, 4 + nc)`` is read too (forced only: see below).
* ``yolov5`` — the classic YOLOv5 export: ``(1, 3N, 5 + nc)`` (three anchors per cell): normalized
  ``cx, cy, w, h``, objectness, per-class scores; a box scores objectness x class score.
* ``dfl`` — the split layout Frigate's ``yolo-generic`` Edge TPU detector reads: raw DFL box
  logits ``(1, N, 64)`` (4 sides ltrb x 16 bins) and class logits ``(1, N, nc)``, decoded here
  (softmax over the bins, anchors and strides from the input size, sigmoid of the logits).

The score threshold is applied in the quantized domain before anything is dequantized (Frigate's
trick): `raw_floor` finds the smallest raw value whose score is above it, exactly. NMS is
class-aware and greedy like torchvision's (stable score order, IoU strictly above the limit
suppresses), with Ultralytics' defaults: conf 0.25 (strictly greater), IoU 0.7, 300 boxes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from edgeapp.core.vision.boxes import BBox, Fit, letterbox_fit, to_original_array
from edgeapp.core.vision.classify import dequantize
from edgeapp.core.vision.detect import Object
from edgeapp.core.vision.preprocess import quantize_input
from edgeapp.errors import InvalidModel, UsageError

if TYPE_CHECKING:
    from edgeapp.core.meta import YoloSidecar

LAYOUTS = ("yolov8", "yolov5", "dfl")
STRIDE_SETS = ((8, 16, 32), (8, 16, 32, 64))  # P3-P5 heads, and the P6 models
REG_MAX = 16  # DFL bins per box side
PAD_VALUE = 114  # Ultralytics' letterbox grey
YOLO_MEAN, YOLO_STD = 0.0, 255.0  # the model takes pixel / 255
CONF, IOU, MAX_DET, MAX_NMS = 0.25, 0.7, 300, 30000  # Ultralytics' predictor defaults


@dataclass(frozen=True)
class YoloLayout:
    """Where a YOLO model's boxes and scores are, and how to read them."""

    kind: str  # one of LAYOUTS
    classes: int
    anchors: int  # N: rows of boxes the model scores
    boxes: int  # position of the box tensor in the model's output list
    scores: int  # position of the score tensor (the same tensor but for "dfl")
    transposed: bool = False  # "yolov8" given as (1, N, 4 + nc)
    strides: tuple[int, ...] = (8, 16, 32)
    how: str = ""  # how it was recognised, for messages and tests


# ----------------------------------------------------------------------------- geometry


def anchor_count(width: int, height: int, strides: Sequence[int] = (8, 16, 32)) -> int:
    """Grid cells of all heads, as Ultralytics counts them (floor of size / stride)."""
    return sum((height // s) * (width // s) for s in strides)


def make_anchors(width: int, height: int, strides: Sequence[int] = (8, 16, 32)
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Cell centres (N, 2) in grid units (x + 0.5, y + 0.5, rows first) and their strides (N,)."""
    points, steps = [], []
    for s in strides:
        h, w = height // s, width // s
        ys, xs = np.meshgrid(np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32),
                             indexing="ij")
        points.append(np.stack((xs.ravel(), ys.ravel()), axis=1) + np.float32(0.5))
        steps.append(np.full(h * w, s, dtype=np.float32))
    return np.concatenate(points), np.concatenate(steps)


def letterbox(pixels: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, Fit]:
    """Fit uint8 HxWxC pixels into (width, height) as Ultralytics' LetterBox(auto=False) does:
    one scale, linear resize, centred, grey 114 padding split round(d/2 - 0.1)/round(d/2 + 0.1).

    `boxes.letterbox_fit` computes the same content size and offsets. With OpenCV (a dependency
    but where apt provides it) the resize is its INTER_LINEAR, bit-exact with Ultralytics; without
    it a float bilinear with half-pixel centres, which may differ by one grey level.
    """
    src_h, src_w = pixels.shape[:2]
    fit = letterbox_fit((src_w, src_h), size)
    content = resize_linear(pixels, (fit.content_w, fit.content_h))
    if content.ndim == 2:
        content = content[:, :, None]
    out = np.full((fit.dst_h, fit.dst_w, content.shape[2]), PAD_VALUE, dtype=np.uint8)
    out[fit.pad_y:fit.pad_y + fit.content_h, fit.pad_x:fit.pad_x + fit.content_w] = content
    return out, fit


def resize_linear(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 pixels resized to (width, height): OpenCV INTER_LINEAR, else `bilinear`."""
    if pixels.shape[1] == size[0] and pixels.shape[0] == size[1]:
        return pixels
    try:
        import cv2
    except ImportError:
        return bilinear(pixels, size)
    out = cv2.resize(np.ascontiguousarray(pixels), size, interpolation=cv2.INTER_LINEAR)
    return out.reshape(out.shape[:2] + pixels.shape[2:])


def bilinear(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Half-pixel-centre bilinear resize in float, rounded: OpenCV's rule without its fixed point."""
    w, h = size
    src_h, src_w = pixels.shape[:2]

    def taps(n_out: int, n_in: int):
        pos = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0, n_in - 1)
        lo = np.floor(pos).astype(np.intp)
        return lo, np.minimum(lo + 1, n_in - 1), (pos - lo)

    y0, y1, fy = taps(h, src_h)
    x0, x1, fx = taps(w, src_w)
    a = pixels.reshape(src_h, src_w, -1).astype(np.float64)
    fx = fx[None, :, None]
    top = a[y0][:, x0] * (1 - fx) + a[y0][:, x1] * fx
    bottom = a[y1][:, x0] * (1 - fx) + a[y1][:, x1] * fx
    out = top * (1 - fy[:, None, None]) + bottom * fy[:, None, None]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8).reshape((h, w) + pixels.shape[2:])


# ----------------------------------------------------------------------------- layouts


def _strides_for(n: int, width: int, height: int) -> Optional[tuple[int, ...]]:
    return next((s for s in STRIDE_SETS if anchor_count(width, height, s) == n), None)


def find_yolo_layout(shapes: Sequence[Sequence[int]], input_size: tuple[int, int],
                     force: Optional[str] = None, name: str = "model") -> YoloLayout:
    """Recognise a YOLO output layout from the output shapes and the input (width, height).

    `force` ("yolov8", "yolov5" or "dfl") skips the guess for layouts shapes cannot tell apart
    (a transposed v8 output); the shapes must still fit it. Raises InvalidModel otherwise.
    """
    if force is not None and force not in LAYOUTS:
        raise UsageError(f"unknown YOLO decoder {force!r}: use one of {', '.join(LAYOUTS)}")
    w, h = int(input_size[0]), int(input_size[1])
    dims = [tuple(int(d) for d in s) for s in shapes]
    text = ", ".join(str(list(d)) for d in dims)
    found = None
    if force in (None, "dfl"):
        found = _dfl_layout(dims, w, h, name)
    if found is None and len(dims) == 1 and len(dims[0]) == 3 and dims[0][0] == 1:
        a, b = dims[0][1], dims[0][2]
        if force in (None, "yolov8"):
            found = _v8_layout(a, b, w, h, transposed_ok=force == "yolov8")
        if found is None and force in (None, "yolov5"):
            s = _strides_for(a // 3, w, h) if a % 3 == 0 else None
            if b >= 6 and s is not None:
                found = YoloLayout("yolov5", b - 5, a, 0, 0, strides=s, how="(1, 3N, 5 + nc)")
    if found is None:
        what = f"a {force} layout" if force else "a YOLO layout"
        raise InvalidModel(
            f"{name}: outputs {text} are not {what} for a {w}x{h} input; expected (1, 4 + nc, N) "
            f"(YOLOv8/11/v5u), (1, 3N, 5 + nc) (YOLOv5) or (1, N, 64) + (1, N, nc) (DFL), N = "
            f"{anchor_count(w, h)} anchors")
    return found


def _v8_layout(a: int, b: int, w: int, h: int, transposed_ok: bool) -> Optional[YoloLayout]:
    s = _strides_for(b, w, h)
    if a >= 5 and s is not None:
        return YoloLayout("yolov8", a - 4, b, 0, 0, strides=s, how="(1, 4 + nc, N)")
    s = _strides_for(a, w, h)
    if transposed_ok and b >= 5 and s is not None:
        return YoloLayout("yolov8", b - 4, a, 0, 0, transposed=True, strides=s,
                          how="(1, N, 4 + nc)")
    return None


def _dfl_layout(dims: list, w: int, h: int, name: str) -> Optional[YoloLayout]:
    """Two (Frigate: or three, the third a (1, N, 1) best score it ignores) (1, N, C) outputs."""
    if len(dims) not in (2, 3) or any(len(d) != 3 or d[0] != 1 for d in dims):
        return None
    n = dims[0][1]
    s = _strides_for(n, w, h)
    if s is None or any(d[1] != n for d in dims):
        return None
    wide = [i for i, d in enumerate(dims) if d[2] > 1]
    if len(dims) == 2 and len(wide) == 1 and dims[wide[0]][2] == 4 * REG_MAX:
        wide = [0, 1]  # one class: its scores are (1, N, 1)
    if len(wide) != 2 or len(dims) - len(wide) > 1:
        return None
    boxes = [i for i in wide if dims[i][2] == 4 * REG_MAX]
    if len(boxes) == 2:
        raise InvalidModel(f"{name}: both DFL outputs are 64 wide: cannot tell the box logits "
                           "from 64 class scores")
    if len(boxes) != 1:
        return None
    scores = wide[1] if boxes[0] == wide[0] else wide[0]
    return YoloLayout("dfl", dims[scores][2], n, boxes[0], scores, strides=s,
                      how="(1, N, 64) + (1, N, nc)")


def sidecar_layout(info: YoloSidecar, shapes: Sequence[Sequence[int]], input_size: tuple[int, int],
                   name: str = "model") -> YoloLayout:
    """The layout `convert` wrote in the sidecar ({"layout": "dfl", "boxes": i, "scores": j}),
    checked against the model's outputs: it tells box logits from 64 class scores. A model
    with other outputs sharing the sidecar (the float export `eval` runs beside its int8) is
    read by its shapes."""
    if info.get("layout") != "dfl" or len(shapes) != 2:
        return find_yolo_layout(shapes, input_size, None, name)
    dims = [tuple(int(d) for d in s) for s in shapes]
    b, c = int(info.get("boxes", 0)), int(info.get("scores", 1))
    n = dims[0][1] if len(dims[0]) == 3 else -1
    s = _strides_for(n, int(input_size[0]), int(input_size[1]))
    if {b, c} != {0, 1} or s is None or dims[b] != (1, n, 4 * REG_MAX) or dims[c][:2] != (1, n):
        raise InvalidModel(f"{name}: outputs {[list(d) for d in dims]} are not the dfl layout its "
                           f"sidecar names (box logits at output {b}, class logits at {c})")
    return YoloLayout("dfl", dims[c][2], n, b, c, strides=s, how="sidecar")


def engine_yolo_layout(engine, force: Optional[str] = None, sidecar: Optional[dict] = None
                       ) -> YoloLayout:
    """The YOLO layout of an opened `runtime.Engine` (its output shapes and input size; the
    sidecar's `yolo` entry when `convert` wrote one and nothing is forced)."""
    shapes = [tuple(int(d) for d in o["shape"]) for o in engine.outputs]
    _, height, width = engine.input_shape[:3]
    if sidecar and force is None:
        return sidecar_layout(sidecar, shapes, (width, height), engine.model_path)
    return find_yolo_layout(shapes, (width, height), force, engine.model_path)


def output_quantizations(engine) -> list[tuple[float, int]]:
    """(scale, zero point) of each output of an opened Engine, for `get_yolo_objects`."""
    return [(float(o["quantization"][0]), int(o["quantization"][1])) for o in engine.outputs]


def is_yolo_output(shapes: Sequence[Sequence[int]], input_size: tuple[int, int]) -> bool:
    """Whether the outputs read as one of the YOLO layouts (the detect task claims them)."""
    try:
        find_yolo_layout(shapes, input_size)
    except InvalidModel:
        return False
    return True


# ----------------------------------------------------------------------------- scores


def sigmoid(x: np.ndarray) -> np.ndarray:
    return np.float32(1) / (np.float32(1) + np.exp(-x.astype(np.float32)))


@lru_cache(maxsize=64)
def raw_floor(threshold: float, scale: float, zero_point: int, dtype: str,
              logits: bool = False) -> Optional[int]:
    """The smallest raw value q of an integer tensor whose score (dequantized in float32 as
    `classify.dequantize` does; through a sigmoid when `logits`) is strictly above threshold.

    Comparing raw values with it keeps exactly the entries float filtering would keep (scale
    > 0, so scores grow with q). None: no value passes.
    """
    info = np.iinfo(np.dtype(dtype))
    lo, hi = int(info.min), int(info.max)

    def passes(q: int) -> bool:
        real = dequantize(np.array([q], dtype=dtype), scale, zero_point)
        return bool((sigmoid(real) if logits else real)[0] > np.float32(threshold))

    if not passes(hi):
        return None
    while lo < hi:  # binary search: passes() is monotonic in q
        mid = (lo + hi) // 2
        if passes(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _mask_above(raw: np.ndarray, threshold: float, quant: tuple[float, int],
                logits: bool = False) -> np.ndarray:
    """Which entries score strictly above threshold, decided on the raw values when quantized."""
    scale, zero = float(quant[0]), int(quant[1])
    if raw.dtype.kind in "iu" and scale > 0:
        q = raw_floor(float(threshold), scale, zero, raw.dtype.str, logits)
        return np.zeros(raw.shape, dtype=bool) if q is None else raw >= raw.dtype.type(q)
    real = dequantize(raw, scale, zero)
    return (sigmoid(real) if logits else real) > np.float32(threshold)


# ----------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class Candidates:
    """Boxes above the score threshold, before NMS: xyxy in input pixels, best class and score."""

    boxes: np.ndarray  # (M, 4) float32
    scores: np.ndarray  # (M,) float32
    classes: np.ndarray  # (M,) int


def _xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    half = xywh[:, 2:4] / np.float32(2)
    return np.concatenate((xywh[:, :2] - half, xywh[:, :2] + half), axis=1)


def _empty() -> Candidates:
    return Candidates(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.intp))


def decode_v8(output: np.ndarray, quant: tuple[float, int], layout: YoloLayout,
              input_size: tuple[int, int], conf: float = CONF) -> Candidates:
    """(1, 4 + nc, N): best class per anchor, kept when its score > conf; boxes to pixels."""
    rows = output.reshape(output.shape[-2:])
    if layout.transposed:
        rows = rows.T
    best = rows[4:].max(axis=0)
    keep = np.flatnonzero(_mask_above(best, conf, quant))
    if keep.size == 0:
        return _empty()
    picked = rows[:, keep]
    classes = picked[4:].argmax(axis=0)
    scores = dequantize(best[keep], float(quant[0]), int(quant[1]))
    xywh = dequantize(np.ascontiguousarray(picked[:4].T), float(quant[0]), int(quant[1]))
    xywh = xywh * np.array(input_size * 2, dtype=np.float32)  # (w, h, w, h)
    return Candidates(_xywh_to_xyxy(xywh), scores, classes)


def decode_v5(output: np.ndarray, quant: tuple[float, int], layout: YoloLayout,
              input_size: tuple[int, int], conf: float = CONF) -> Candidates:
    """(1, 3N, 5 + nc): objectness > conf first, then objectness x best class score > conf."""
    rows = output.reshape(output.shape[-2:])
    keep = np.flatnonzero(_mask_above(rows[:, 4], conf, quant))
    if keep.size == 0:
        return _empty()
    real = dequantize(rows[keep], float(quant[0]), int(quant[1]))
    products = real[:, 5:] * real[:, 4:5]
    classes = products.argmax(axis=1)
    scores = products[np.arange(len(keep)), classes]
    ok = scores > np.float32(conf)
    xywh = real[ok, :4] * np.array(input_size * 2, dtype=np.float32)
    return Candidates(_xywh_to_xyxy(xywh), scores[ok], classes[ok])


def decode_dfl(boxes: np.ndarray, box_quant: tuple[float, int], scores: np.ndarray,
               score_quant: tuple[float, int], layout: YoloLayout, input_size: tuple[int, int],
               conf: float = CONF) -> Candidates:
    """(1, N, 64) DFL logits + (1, N, nc) class logits: sigmoid scores, expected bin distances."""
    logits = scores.reshape(-1, layout.classes)
    best = logits.max(axis=1)
    keep = np.flatnonzero(_mask_above(best, conf, score_quant, logits=True))
    if keep.size == 0:
        return _empty()
    classes = logits[keep].argmax(axis=1)
    real_scores = sigmoid(dequantize(best[keep], float(score_quant[0]), int(score_quant[1])))
    bins = dequantize(boxes.reshape(-1, 4, REG_MAX)[keep], float(box_quant[0]), int(box_quant[1]))
    bins = np.exp(bins - bins.max(axis=2, keepdims=True))
    dist = (bins @ np.arange(REG_MAX, dtype=np.float32)) / bins.sum(axis=2)  # (M, 4) ltrb
    points, steps = _anchors(input_size, layout.strides)
    p, s = points[keep], steps[keep, None]
    xyxy = np.concatenate((p - dist[:, :2], p + dist[:, 2:]), axis=1) * s
    return Candidates(xyxy.astype(np.float32), real_scores, classes)


@lru_cache(maxsize=8)
def _anchors(input_size: tuple[int, int], strides: tuple[int, ...]):
    return make_anchors(input_size[0], input_size[1], strides)


def decode(outputs: Sequence[np.ndarray], quantization: Sequence[tuple[float, int]],
           layout: YoloLayout, input_size: tuple[int, int], conf: float = CONF) -> Candidates:
    """The candidates of one frame's raw outputs (quantization per output: (scale, zero point))."""
    size = (int(input_size[0]), int(input_size[1]))
    if layout.kind == "dfl":
        return decode_dfl(np.asarray(outputs[layout.boxes]), quantization[layout.boxes],
                          np.asarray(outputs[layout.scores]), quantization[layout.scores],
                          layout, size, conf)
    fn = decode_v8 if layout.kind == "yolov8" else decode_v5
    return fn(np.asarray(outputs[layout.boxes]), quantization[layout.boxes], layout, size, conf)


# ----------------------------------------------------------------------------- NMS


MAX_WH = 7680  # Ultralytics' class offset: boxes of class c are shifted by c x 7680 pixels
BLOCK_LIMIT = 1 << 22  # IoUs computed at once (per-class blocks); beyond, one row per kept box


def pairwise_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of xyxy boxes a (..., M, 4) with b (..., K, 4) -> (..., M, K), in float32 and in
    torchvision's operation order (no +1 on widths)."""
    ax1, ay1, ax2, ay2 = (np.ascontiguousarray(a[..., i])[..., :, None] for i in range(4))
    bx1, by1, bx2, by2 = (np.ascontiguousarray(b[..., i])[..., None, :] for i in range(4))
    zero = np.float32(0)
    w = np.minimum(ax2, bx2)
    w -= np.maximum(ax1, bx1)
    np.maximum(w, zero, out=w)
    h = np.minimum(ay2, by2)
    h -= np.maximum(ay1, by1)
    np.maximum(h, zero, out=h)
    w *= h  # the intersections
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1)
    union -= w
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(w, union, out=w)


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float = IOU,
        max_det: int = MAX_DET, max_nms: int = MAX_NMS) -> np.ndarray:
    """Indices kept by class-aware greedy NMS, best score first (ties: lower index first).

    A box suppresses the later boxes of its class that overlap it with IoU > iou. The IoU is
    computed as Ultralytics does: on boxes shifted by class x 7680 in float32 (that shift costs
    precision: a box of class 40 is at ~3e5 px, where float32 steps are 1/32 px), so results
    are the same as theirs even for overlaps at the limit. Classes never interact, so each
    class is one block of IoUs, all blocks computed in one go.
    """
    order = np.argsort(-np.asarray(scores, dtype=np.float32), kind="stable")[:max_nms]
    if order.size == 0 or max_det <= 0:
        return order[:0]
    c = np.asarray(classes)[order]
    b = np.asarray(boxes, dtype=np.float32)[order]
    b = b + (c.astype(np.float32) * np.float32(MAX_WH))[:, None]
    limit = np.float64(iou)  # torchvision compares the float IoU with a double
    by_class = np.argsort(c, kind="stable")  # score order within each class
    cs = c[by_class]
    starts = np.flatnonzero(np.concatenate(([True], cs[1:] != cs[:-1])))
    sizes = np.diff(np.append(starts, len(cs)))
    k = int(sizes.max())
    if len(starts) * k * k > BLOCK_LIMIT:
        return order[_nms_rows(b, c, limit)][:max_det]
    members = by_class[np.minimum(starts[:, None] + np.arange(k), len(cs) - 1)]  # (G, K)
    over = pairwise_iou(b[members], b[members]) > limit  # (G, K, K); padding never visited
    kept = []
    for g, size in enumerate(sizes.tolist()):
        rows, ids = over[g], members[g].tolist()
        alive = [True] * size
        for j in range(size):
            if alive[j]:
                kept.append(ids[j])
                for t in np.flatnonzero(rows[j, j + 1:size]).tolist():
                    alive[j + 1 + t] = False
    return order[np.sort(np.array(kept, dtype=np.intp))[:max_det]]


def _nms_rows(b: np.ndarray, c: np.ndarray, limit: np.float64) -> np.ndarray:
    """Greedy NMS in score order computing one row of IoUs per kept box (little memory)."""
    suppressed = np.zeros(len(b), dtype=bool)
    kept = []
    for i in range(len(b)):
        if suppressed[i]:
            continue
        kept.append(i)
        rest = np.flatnonzero(~suppressed[i + 1:] & (c[i + 1:] == c[i])) + i + 1
        if rest.size:
            suppressed[rest[pairwise_iou(b[i:i + 1], b[rest])[0] > limit]] = True
    return np.array(kept, dtype=np.intp)


# ----------------------------------------------------------------------------- objects


def get_yolo_objects(outputs: Sequence[np.ndarray], quantization: Sequence[tuple[float, int]],
                     layout: YoloLayout, fit: Fit, conf: float = CONF, iou: float = IOU,
                     max_det: int = MAX_DET) -> list[Object]:
    """Detections of one frame, best first: decode, NMS in input pixels, then the boxes mapped
    back through the letterbox `fit` to the original image's pixels and clipped to it."""
    found = decode(outputs, quantization, layout, (fit.dst_w, fit.dst_h), conf)
    finite = np.isfinite(found.boxes).all(axis=1) & np.isfinite(found.scores)
    if not finite.all():  # a damaged float model: NaN never becomes a box
        found = Candidates(found.boxes[finite], found.scores[finite], found.classes[finite])
    keep = nms(found.boxes, found.scores, found.classes, iou, max_det)
    if keep.size == 0:
        return []
    boxes = to_original_array(found.boxes[keep], fit).tolist()
    return [Object(c, s, BBox(*b)) for c, s, b in
            zip(found.classes[keep].tolist(), found.scores[keep].tolist(), boxes)]


def letterbox_tensor(pixels: np.ndarray, size: tuple[int, int], dtype, scale: float,
                     zero_point: int, mean: float = YOLO_MEAN, std: float = YOLO_STD):
    """uint8 HxWxC pixels letterboxed as Ultralytics does, then quantized by round to nearest
    (Ultralytics' predictor truncates, so its scores can differ from these by a step or more):
    ((1, H, W, C) tensor, Fit)."""
    boxed, fit = letterbox(pixels if pixels.ndim == 3 else pixels[:, :, None], size)
    return quantize_input(boxed, dtype, scale, zero_point, mean, std)[None], fit
