"""Box maths and the geometry of fitting an image into a model input: pure functions.

Detection models report boxes normalized to their input tensor as [ymin, xmin, ymax, xmax]. The
image got into that tensor either stretched (each axis scaled on its own) or letterboxed (one
scale for both axes, the rest padded). `Fit` records which, and `to_original` maps a normalized
box back to the original image's pixels, clipped to the image.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class BBox:
    """An axis-aligned box [xmin, ymin, xmax, ymax]; immutable, every operation returns a new one."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float

    @classmethod
    def from_yxyx(cls, ymin: float, xmin: float, ymax: float, xmax: float) -> "BBox":
        """From the [ymin, xmin, ymax, xmax] order detection models use."""
        return cls(float(xmin), float(ymin), float(xmax), float(ymax))

    @property
    def width(self) -> float:
        return self.xmax - self.xmin

    @property
    def height(self) -> float:
        return self.ymax - self.ymin

    @property
    def valid(self) -> bool:
        return self.width >= 0 and self.height >= 0

    def as_list(self) -> list[float]:
        return [self.xmin, self.ymin, self.xmax, self.ymax]

    def rounded(self) -> list[int]:
        """Whole pixel coordinates [xmin, ymin, xmax, ymax] (round half to even)."""
        return [int(round(v)) for v in self.as_list()]


def scale(b: BBox, sx: float, sy: float) -> BBox:
    return BBox(b.xmin * sx, b.ymin * sy, b.xmax * sx, b.ymax * sy)


def translate(b: BBox, dx: float, dy: float) -> BBox:
    return BBox(b.xmin + dx, b.ymin + dy, b.xmax + dx, b.ymax + dy)


def clip(b: BBox, width: float, height: float) -> BBox:
    """Clip to the image [0, width] × [0, height] (box edges, so a full-image box is [0, 0, w, h])."""

    def c(v: float, hi: float) -> float:
        return min(max(v, 0.0), hi)

    return BBox(c(b.xmin, width), c(b.ymin, height), c(b.xmax, width), c(b.ymax, height))


class ResizeMode(str, Enum):
    stretch = "stretch"  # each axis scaled to the input size: what SSD models are trained with
    letterbox = "letterbox"  # keep the aspect ratio, pad the rest (centred)


@dataclass(frozen=True)
class Fit:
    """How an image of src size was placed into a model input of dst size.

    The image, resized to (content_w, content_h), sits at (pad_x, pad_y) in the input; the rest
    of the input is padding. Stretch is the case content = dst, pad = 0.
    """

    src_w: int
    src_h: int
    dst_w: int
    dst_h: int
    content_w: int
    content_h: int
    pad_x: int
    pad_y: int


def stretch_fit(src: tuple[int, int], dst: tuple[int, int]) -> Fit:
    """Fill the whole (width, height) input, each axis scaled on its own."""
    (sw, sh), (dw, dh) = src, dst
    return Fit(sw, sh, dw, dh, dw, dh, 0, 0)


def letterbox_fit(src: tuple[int, int], dst: tuple[int, int]) -> Fit:
    """Scale by one factor so the image fits the input, centred, the rest padded."""
    (sw, sh), (dw, dh) = src, dst
    if sw <= 0 or sh <= 0:
        raise ValueError(f"empty image size {src}")
    s = min(dw / sw, dh / sh)
    cw = min(dw, max(1, int(round(sw * s))))
    ch = min(dh, max(1, int(round(sh * s))))
    return Fit(sw, sh, dw, dh, cw, ch, (dw - cw) // 2, (dh - ch) // 2)


def make_fit(mode: ResizeMode | str, src: tuple[int, int], dst: tuple[int, int]) -> Fit:
    return letterbox_fit(src, dst) if ResizeMode(mode) == ResizeMode.letterbox else stretch_fit(src, dst)


def to_original(normalized: BBox, fit: Fit) -> BBox:
    """A box normalized to the model input (0..1) in the original image's pixels, clipped to it.

    Input pixels = normalized × input size; minus the padding; divided by the content's scale
    (the scale actually used after rounding the content size, per axis).
    """
    in_px = scale(normalized, fit.dst_w, fit.dst_h)
    content = translate(in_px, -fit.pad_x, -fit.pad_y)
    orig = scale(content, fit.src_w / fit.content_w, fit.src_h / fit.content_h)
    return clip(orig, fit.src_w, fit.src_h)


def to_original_array(boxes, fit: Fit):
    """`to_original` for many boxes at once: (M, 4) xyxy in model-input pixels -> (M, 4) in the
    original image's pixels, clipped to it (float32; the division by the per-axis gain as
    Ultralytics' scale_boxes does it, so YOLO boxes match theirs to the last bits)."""
    import numpy as np

    b = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    pad = np.array([fit.pad_x, fit.pad_y] * 2, dtype=np.float32)
    gain = np.array([fit.content_w / fit.src_w, fit.content_h / fit.src_h] * 2, dtype=np.float32)
    out = (b - pad) / gain
    return np.clip(out, 0, np.array([fit.src_w, fit.src_h] * 2, dtype=np.float32))
