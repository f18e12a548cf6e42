"""Semantic segmentation post-processing: pure functions over output arrays.

DeepLab-style models give either class scores [1, H, W, C] (Coral's compiled models leave the
argmax to the CPU: it is taken here) or a class map [1, H, W] (the model ends in ARG_MAX). The
map covers the model input, into which the image was fitted by a `boxes.Fit`; `to_original`
brings it back to the original image's size with nearest-neighbour sampling, so each original
pixel gets the class of the model pixel it fell on.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core.vision.boxes import Fit
from edgeapp.core.vision.classify import dequantize


class ClassShare(TypedDict):
    """A class present in a segmentation: its id, label (None without labels), share of pixels."""
    id: int
    label: Optional[str]
    share: float


def is_segmentation_output(shape: Sequence[int], input_size: Optional[Sequence[int]] = None) -> bool:
    """[1, H, W, C] class scores or a [1, H, W] class map, with H and W larger than 1 and, when
    the input's (width, height) is known, the input's aspect ratio (a map is the image, scaled):
    a YOLO head's [1, 84, 8400] is no map."""
    s = tuple(shape)
    if not (len(s) in (3, 4) and s[0] == 1 and s[1] > 1 and s[2] > 1):
        return False
    if input_size is None:
        return True
    width, height = input_size
    return abs(s[1] / s[2] - height / width) <= 0.1 * (height / width)


def class_map(output: np.ndarray, scale: float = 0.0, zero_point: int = 0) -> np.ndarray:
    """The (H, W) class ids of one output: the argmax of class scores (first class on a tie),
    the map itself, or, for a single score channel, class 1 where its score is at least 0.5."""
    a = np.asarray(output)
    if a.ndim == 4:
        a = a[0]
        if a.shape[-1] == 1:
            return (dequantize(a[..., 0], scale, zero_point) >= 0.5).astype(np.int32)
        return np.argmax(a, axis=-1).astype(np.int32)  # a monotonic dequantization keeps it
    return a.reshape(a.shape[-2:]).astype(np.int32)


def mask_to_original(mask: np.ndarray, fit: Fit) -> np.ndarray:
    """The class map resampled (nearest) to the original image: (src_h, src_w).

    An original pixel's centre goes to the model input (scaled into the content, shifted by the
    padding), then to the map, whose size may differ from the input's (e.g. output stride 2).
    """
    mh, mw = mask.shape

    def index(n_src: int, content: int, pad: int, dst: int, n_map: int) -> np.ndarray:
        pos = ((np.arange(n_src) + 0.5) * (content / n_src) + pad) * (n_map / dst)
        return np.clip(np.floor(pos).astype(np.intp), 0, n_map - 1)

    rows = index(fit.src_h, fit.content_h, fit.pad_y, fit.dst_h, mh)
    cols = index(fit.src_w, fit.content_w, fit.pad_x, fit.dst_w, mw)
    return mask[rows[:, None], cols[None, :]]


def class_shares(mask: np.ndarray, labels: Optional[dict[int, str]] = None) -> List[ClassShare]:
    """The classes present, largest first: {"id", "label", "share"} (share of the pixels)."""
    flat = mask.reshape(-1)
    if flat.size == 0:
        return []
    if flat.min() >= 0:
        counts = np.bincount(flat)
        ids = np.nonzero(counts)[0]
        counts = counts[ids]
    else:
        ids, counts = np.unique(flat, return_counts=True)
    order = np.lexsort((ids, -counts))  # share desc, then id asc
    return [{"id": int(ids[i]), "label": labels.get(int(ids[i])) if labels else None,
             "share": round(float(counts[i]) / flat.size, 6)} for i in order]


def pascal_palette(n: int = 256) -> np.ndarray:
    """The PASCAL VOC colour map, (n, 3) RGB uint8: class id bits spread over the three
    channels, most significant first, as the VOC development kit colours its ground truth."""
    ids = np.arange(n)
    rgb = np.zeros((n, 3), dtype=np.int64)
    for bit in range(8):
        for ch in range(3):
            rgb[:, ch] |= ((ids >> (3 * bit + ch)) & 1) << (7 - bit)
    return rgb.astype(np.uint8)


_PALETTE = pascal_palette()


def colorize(mask: np.ndarray) -> np.ndarray:
    """An (H, W, 3) RGB image of the class map in the PASCAL palette (ids wrap at 256)."""
    return np.take(_PALETTE, np.bitwise_and(mask, 255), axis=0)  # 4x faster than _PALETTE[...]


def mask_image_array(mask: np.ndarray) -> np.ndarray:
    """The class map as the array a PNG stores: uint8 when the ids fit, else uint16."""
    if mask.size and (mask.min() < 0 or mask.max() > 65535):
        raise ValueError("class ids outside 0..65535 cannot be stored as a PNG")
    return mask.astype(np.uint8 if not mask.size or mask.max() < 256 else np.uint16)
