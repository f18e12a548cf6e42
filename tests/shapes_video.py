"""Rendered videos of drawn shapes moving on known paths, with their ground truth: what the
tracking tests and scripts/bench_tracking.py run the shapes YOLO detector
(tests/fixtures/yolo/) on. Shapes as that detector was trained on them (circle, square,
triangle on a smooth background), moving in straight lines; an occluder (a bar of background
colour drawn over them) hides them for some frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

NAMES = ("circle", "square", "triangle")


@dataclass
class Mover:
    """One shape: class, side in px, BGR colour, centre at frame 0 and velocity (px/frame),
    the frames it is on screen [start, end), and frames it is hidden (behind an occluder)."""

    cls: int
    size: int
    colour: Tuple[int, int, int]
    start_xy: Tuple[float, float]
    velocity: Tuple[float, float]
    frames: Tuple[int, int]
    hidden: Sequence[int] = ()

    def centre(self, f: int) -> Tuple[float, float]:
        return (self.start_xy[0] + self.velocity[0] * (f - self.frames[0]),
                self.start_xy[1] + self.velocity[1] * (f - self.frames[0]))

    def box(self, f: int) -> Tuple[float, float, float, float]:
        cx, cy = self.centre(f)
        h = self.size / 2
        return (cx - h, cy - h, cx + h, cy + h)

    def on_screen(self, f: int, width: int, height: int) -> bool:
        if not (self.frames[0] <= f < self.frames[1]) or f in self.hidden:
            return False
        x0, y0, x1, y1 = self.box(f)
        return x0 >= 0 and y0 >= 0 and x1 <= width and y1 <= height


@dataclass
class Scene:
    width: int
    height: int
    frames: int
    movers: List[Mover] = field(default_factory=list)
    background: Tuple[int, int, int] = (70, 90, 160)  # BGR

    def render(self, f: int) -> np.ndarray:
        """Frame `f` (BGR uint8)."""
        import cv2

        h, w = self.height, self.width
        gx = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
        gy = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
        img = np.array(self.background, np.float32) + gx * 30 + gy * np.array([10, -20, 15], np.float32)
        img = np.clip(img, 0, 255).astype(np.uint8)
        for m in self.movers:
            if not (m.frames[0] <= f < m.frames[1]) or f in m.hidden:
                continue
            cx, cy = (int(round(v)) for v in m.centre(f))
            s = m.size // 2
            if m.cls == 0:
                cv2.circle(img, (cx, cy), s, m.colour, -1, cv2.LINE_AA)
            elif m.cls == 1:
                cv2.rectangle(img, (cx - s, cy - s), (cx + s - 1, cy + s - 1), m.colour, -1)
            else:
                pts = np.array([[cx, cy - s], [cx - s, cy + s - 1], [cx + s - 1, cy + s - 1]], np.int32)
                cv2.fillPoly(img, [pts], m.colour, cv2.LINE_AA)
        return img

    def truth(self, f: int) -> List[Tuple[int, Tuple[float, float, float, float]]]:
        """(object id, box) of every shape fully on screen and visible in frame `f`."""
        return [(i, m.box(f)) for i, m in enumerate(self.movers)
                if m.on_screen(f, self.width, self.height)]

    def write(self, path: Path, fps: float = 30.0) -> Path:
        """The scene as an MJPG .avi (frames as JPEG, as a camera would give them)."""
        from media import make_video

        return make_video(path, (self.render(f) for f in range(self.frames)), fps=fps)


def crossing_scene(frames: int = 90, occlude: Optional[range] = range(20, 25)) -> Scene:
    """Two shapes passing each other and a vertical line at x = 160 in opposite directions
    (a circle left to right along y = 80, a square right to left along y = 150, side by side at
    frame 43), the circle hidden for the frames of `occlude` (5 by default) before that, and a
    triangle standing still in a corner."""
    scene = Scene(320, 240, frames)
    scene.movers = [
        Mover(0, 44, (40, 220, 240), (30.0, 80.0), (3.0, 0.0), (0, frames),
              hidden=tuple(occlude or ())),
        Mover(1, 44, (230, 80, 40), (290.0, 150.0), (-3.0, 0.0), (0, frames)),
        Mover(2, 48, (60, 200, 60), (270.0, 40.0), (0.0, 0.0), (0, frames)),
    ]
    return scene


def random_scene(seed: int, frames: int = 150, objects: int = 8, width: int = 480,
                 height: int = 360) -> Scene:
    """Shapes entering at random times from the left or right edge, crossing the frame (and
    each other) on straight, slightly slanted paths, some hidden for a few frames, leaving at
    the far side (for the benchmark)."""
    rng = np.random.default_rng(seed)
    scene = Scene(width, height, frames)
    for _ in range(objects):
        size = int(rng.integers(36, 60))
        start = int(rng.integers(0, frames // 2))
        speed = float(rng.uniform(2.0, 4.5))
        leftwards = bool(rng.random() < 0.5)
        x = width + size / 2 if leftwards else -size / 2
        y = float(rng.uniform(size, height - size))
        v = (-speed if leftwards else speed, float(rng.uniform(-0.8, 0.8)))
        end = min(frames, start + int((width + size) / speed) + 1)
        hidden: tuple = ()
        if rng.random() < 0.5 and end - start > 30:
            h0 = int(rng.integers(start + 10, end - 15))
            hidden = tuple(range(h0, h0 + int(rng.integers(2, 7))))
        colour = tuple(int(c) for c in rng.integers(30, 256, 3))
        scene.movers.append(Mover(int(rng.integers(0, 3)), size, colour, (x, y), v,
                                  (start, end), hidden))
    return scene


def small_movers(seed: int, frames: int, objects: int, width: int = 1280, height: int = 720) -> Scene:
    """Small shapes (40-56 px on a 1280x720 frame: a fifth of that to a 256-pixel detector
    seeing the whole frame) on straight paths, all on screen for the whole video, on a still
    background (camera --motion's measure, scripts/bench_motion.py)."""
    rng = np.random.default_rng(seed)
    scene = Scene(width, height, frames)
    for _ in range(objects):
        size = int(rng.integers(40, 57))
        v = (float(rng.uniform(-5, 5)), float(rng.uniform(-3, 3)))
        margin = size + 8
        x = float(rng.uniform(margin + max(0, -v[0] * frames), width - margin - max(0, v[0] * frames)))
        y = float(rng.uniform(margin + max(0, -v[1] * frames), height - margin - max(0, v[1] * frames)))
        colour = tuple(int(c) for c in rng.integers(30, 256, 3))
        scene.movers.append(Mover(int(rng.integers(0, 3)), size, colour, (x, y), v, (0, frames)))
    return scene
