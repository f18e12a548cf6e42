"""Drawing results on BGR frames with OpenCV: boxes with labels, the top class, skeletons,
class maps, a status line. Which of them a task draws is the task's (tasks/, `TaskKind.draw`).

Everything draws in place on a uint8 (H, W, 3) BGR array and returns it. OpenCV is imported
inside the functions, so importing this module costs nothing.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from edgeapp.core.vision.pose import skeleton_lines
from edgeapp.core.vision.segmentation import colorize

# Labels are drawn at a size proportional to the image: text about 2.5% of its shorter side
# high (OpenCV's Hershey font is 22 px high at scale 1), never below a legible 0.4. A fixed
# scale of 0.5 was right for 300-480 px frames and tiny on a 1280x720 one.
_TEXT_SHARE = 0.025 / 22
_MIN_SCALE = 0.4


def text_scale(shape: Sequence[int]) -> float:
    """OpenCV font scale for an image of `shape` (H, W[, C])."""
    return max(_MIN_SCALE, min(shape[0], shape[1]) * _TEXT_SHARE)


def _style(img: np.ndarray) -> tuple[float, int]:
    """(font scale, stroke thickness) for text on `img`."""
    scale = text_scale(img.shape)
    return scale, max(1, int(round(scale * 1.5)))


def line_height(img: np.ndarray) -> int:
    """Pixels from one text line to the next on `img`."""
    return int(round(36 * text_scale(img.shape)))


def _stroke(img: np.ndarray, base: int = 2) -> int:
    """Box and limb thickness: `base` px up to 720 px, thicker on larger images."""
    return max(base, int(round(base * min(img.shape[:2]) / 720)))


def color_for(class_id: int) -> tuple[int, int, int]:
    """A stable, saturated BGR colour per class id."""
    import colorsys

    h = (class_id * 0.618033988749895) % 1.0
    r, g, b = colorsys.hsv_to_rgb(h, 0.85, 1.0)
    return int(b * 255), int(g * 255), int(r * 255)


def _text(img: np.ndarray, text: str, org: tuple[int, int], color, bg=(0, 0, 0)) -> None:
    """Text with a filled background box, kept inside the image."""
    import cv2

    font = cv2.FONT_HERSHEY_SIMPLEX
    scale, thick = _style(img)
    (tw, th), base = cv2.getTextSize(text, font, scale, thick)
    pad = max(1, thick)
    h, w = img.shape[:2]
    x = min(max(0, org[0]), max(0, w - tw - 2 * pad))
    y = min(max(th + 2 * pad, org[1]), h - base)
    cv2.rectangle(img, (x, y - th - 2 * pad), (x + tw + 2 * pad, y + base), bg, cv2.FILLED)
    cv2.putText(img, text, (x + pad, y - pad), font, scale, color, thick, cv2.LINE_AA)


def _name(item: dict) -> str:
    label = item.get("label")
    return str(label) if label is not None else str(item.get("id"))


def draw_objects(img: np.ndarray, objects: Sequence[dict]) -> np.ndarray:
    """Boxes with `label score` for object records ({"id", "label", "score", "bbox"}), and the
    top class a cascade's classifier gave the box's crop (`classes`)."""
    import cv2

    for o in objects:
        x0, y0, x1, y1 = (int(round(v)) for v in o["bbox"])
        color = color_for(int(o["id"]))
        cv2.rectangle(img, (x0, y0), (x1, y1), color, _stroke(img))
        tid = o.get("track_id")
        tag = f"#{tid} " if tid is not None else ""
        then = (o.get("classes") or [None])[0]  # a cascade's classifier named the crop
        more = f": {_name(then)}" if then else ""
        _text(img, f"{tag}{_name(o)} {o['score']:.2f}{more}", (x0, y0 - 2), (0, 0, 0), bg=color)
    return img


def draw_counting(img: np.ndarray, lines: Sequence, zones: Sequence, counts: dict,
                  trails: dict) -> np.ndarray:
    """camera --track: each track's recent path, the counting lines with their in/out counts,
    the zones with how many objects are in each now (core/track/zones.py Line, Zone in pixels)."""
    import cv2

    thin = _stroke(img, 1)
    for tid, points in trails.items():
        if len(points) > 1:
            cv2.polylines(img, [np.array(points, np.int32)], False, color_for(int(tid) + 7), thin,
                          cv2.LINE_AA)
    for zone in zones:
        pts = np.array([[int(round(x)), int(round(y))] for x, y in zone.points], np.int32)
        cv2.polylines(img, [pts], True, (255, 200, 0), _stroke(img), cv2.LINE_AA)
        c = counts["zones"].get(zone.name, {})
        _text(img, f"{zone.name}: {c.get('now', 0)} in", (int(pts[:, 0].min()), int(pts[:, 1].min()) + 14),
              (0, 0, 0), bg=(255, 200, 0))
    for line in lines:
        (x0, y0), (x1, y1) = ((int(round(x)), int(round(y))) for x, y in line.points)
        cv2.line(img, (x0, y0), (x1, y1), (0, 220, 255), _stroke(img), cv2.LINE_AA)
        c = counts["lines"].get(line.name, {})
        _text(img, f"{line.name}: in {c.get('in', 0)} out {c.get('out', 0)}",
              ((x0 + x1) // 2, (y0 + y1) // 2), (0, 0, 0), bg=(0, 220, 255))
    return img


def draw_classes(img: np.ndarray, classes: Sequence[dict]) -> np.ndarray:
    """The top class (with its score) at the top left, for classifier records."""
    text = f"{_name(classes[0])} {classes[0]['score']:.2f}" if classes else "(no class)"
    _text(img, text, (4, line_height(img) // 2 + 4), (255, 255, 255))
    return img


def draw_poses(img: np.ndarray, poses: Sequence[dict], color=(0, 255, 255)) -> np.ndarray:
    """Skeletons for pose records ({"score", "keypoints": [{"name", "x", "y", "score"}]}):
    limbs between the keypoints present, a dot on each keypoint."""
    import cv2

    limb, dot = _stroke(img), _stroke(img, 3)
    for p in poses:
        for (x0, y0), (x1, y1) in skeleton_lines(p["keypoints"]):
            cv2.line(img, (int(round(x0)), int(round(y0))), (int(round(x1)), int(round(y1))),
                     color, limb, cv2.LINE_AA)
        for k in p["keypoints"]:
            cv2.circle(img, (int(round(k["x"])), int(round(k["y"]))), dot, (0, 0, 255), cv2.FILLED,
                       cv2.LINE_AA)
    return img


def draw_mask(img: np.ndarray, mask: np.ndarray, classes: Sequence[dict] = (),
              alpha: float = 0.5, legend: int = 5) -> np.ndarray:
    """The class map (same size as `img`) blended over it in the PASCAL VOC palette, and a
    legend of the `legend` largest classes ({"id", "label", "share"}) at the top left."""
    import cv2

    colors = cv2.cvtColor(colorize(mask), cv2.COLOR_RGB2BGR)
    cv2.addWeighted(img, 1 - alpha, colors, alpha, 0.0, dst=img)
    palette = colorize(np.array([c["id"] for c in classes[:legend]], dtype=np.int64))
    for i, (c, rgb) in enumerate(zip(classes[:legend], palette)):
        bg = tuple(int(v) for v in rgb[::-1])
        fg = (0, 0, 0) if sum(bg) > 3 * 110 else (255, 255, 255)
        step = line_height(img)
        _text(img, f"{_name(c)} {c['share'] * 100:.1f}%", (4, step // 2 + 4 + step * i), fg, bg=bg)
    return img


def draw_status(img: np.ndarray, latency_ms: Optional[float], fps: Optional[float],
                device: str) -> np.ndarray:
    """`inference 3.1 ms | 29.8 FPS | cpu` at the bottom left."""
    parts = []
    if latency_ms is not None:
        parts.append(f"inference {latency_ms:.1f} ms")
    if fps:
        parts.append(f"{fps:.1f} FPS")
    parts.append(device)
    _text(img, " | ".join(parts), (4, img.shape[0] - 6), (255, 255, 255))
    return img
