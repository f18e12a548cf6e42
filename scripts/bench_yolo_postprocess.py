#!/usr/bin/env python3
"""Host cost of YOLO post-processing per frame: edgeapp's core/vision/yolo.py against Ultralytics' own
postprocess (dequantize, non_max_suppression, scale_boxes) on the same int8 outputs, in one run.

Runs where both are importable (the fixture venv of scripts/build_yolo_fixtures.py):

    PYTHONPATH=. /work/yolo-venv/bin/python scripts/bench_yolo_postprocess.py

The outputs are synthetic but shaped like a real YOLOv8 export's (1, 84, N) int8 tensor (80
classes, N = 2,100 at 320x320 and 8,400 at 640x640): background scores near zero, and for each
of `--objects` objects a cluster of neighbouring anchors above the threshold with overlapping
boxes, so NMS has real work (int8, scale 1/250, zero -128). A third row times the real 3-class
fixture export (N = 1,344) on a held-out image.
Goal (YOLO post-processing speed): <= 1 ms at 320 and <= 3 ms at 640 on the 2-core machine, faster than Ultralytics.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from edgeapp.core.vision import yolo
from edgeapp.core.vision.boxes import letterbox_fit

os.environ.setdefault("YOLO_CONFIG_DIR", tempfile.mkdtemp())  # Ultralytics writes settings there
os.environ.setdefault("YOLO_OFFLINE", "1")
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "yolo"
SCALE, ZERO = 1 / 250.0, -128  # 0..1.02 over the int8 range, as an output of boxes and scores


def synthetic_output(size: int, nc: int, objects: int, seed: int = 0) -> np.ndarray:
    """(1, 4 + nc, N) int8: quantized cx, cy, w, h (normalized) and class scores."""
    rng = np.random.default_rng(seed)
    n = yolo.anchor_count(size, size)
    points, strides = yolo.make_anchors(size, size)
    real = np.zeros((4 + nc, n), np.float32)
    real[0] = points[:, 0] * strides / size
    real[1] = points[:, 1] * strides / size
    real[2:4] = (strides * rng.uniform(1, 4, size=(2, n))) / size
    real[4:] = rng.beta(0.5, 40, size=(nc, n))  # mostly ~0, a few up to ~0.1
    for _ in range(objects):
        cx, cy = rng.uniform(0.1, 0.9, size=2)
        w, h = rng.uniform(0.05, 0.4, size=2)
        near = np.flatnonzero((np.abs(real[0] - cx) < w / 2) & (np.abs(real[1] - cy) < h / 2))
        near = rng.choice(near, size=min(len(near), int(rng.integers(10, 60))), replace=False)
        cls = int(rng.integers(0, nc))
        real[0, near] = cx + rng.normal(0, 0.01, size=len(near))
        real[1, near] = cy + rng.normal(0, 0.01, size=len(near))
        real[2, near] = w * rng.uniform(0.85, 1.15, size=len(near))
        real[3, near] = h * rng.uniform(0.85, 1.15, size=len(near))
        real[4 + cls, near] = rng.uniform(0.2, 0.95, size=len(near))
    q = np.clip(np.rint(real / SCALE + ZERO), -128, 127).astype(np.int8)
    return q[None]


def fixture_output(name: str = "yolov8_256_full_integer_quant.tflite",
                   image: str = "c_200x300.png"):
    """A real export's raw output on a held-out image: (raw, (scale, zero), image (h, w))."""
    from ai_edge_litert.interpreter import Interpreter
    from PIL import Image

    it = Interpreter(model_path=str(FIXTURES / name))
    it.allocate_tensors()
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    pixels = np.asarray(Image.open(FIXTURES / "images" / image).convert("RGB"))
    boxed, _ = yolo.letterbox(pixels, tuple(int(d) for d in inp["shape"][2:0:-1]))
    it.set_tensor(inp["index"], (boxed ^ np.uint8(0x80)).view(np.int8)[None])
    it.invoke()
    return it.get_tensor(out["index"]).copy(), tuple(out["quantization"]), pixels.shape[:2]


def ours(raw, layout, fit, quant=(SCALE, ZERO)):
    return yolo.get_yolo_objects([raw], [quant], layout, fit)


def theirs(raw, size, orig_hw, quant=(SCALE, ZERO)):
    import torch
    from ultralytics.utils import nms, ops

    x = (raw.astype(np.float32) - quant[1]) * quant[0]  # Ultralytics' TFLite backends dequantize all
    x[:, [0, 2]] *= size
    x[:, [1, 3]] *= size
    det = nms.non_max_suppression(torch.from_numpy(x), 0.25, 0.7, max_det=300)[0]
    det[:, :4] = ops.scale_boxes((size, size), det[:, :4], orig_hw)
    return det


def timings(fn, runs: int, warmup: int) -> np.ndarray:
    for _ in range(warmup):
        fn()
    out = np.empty(runs)
    for i in range(runs):
        t = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - t
    return out * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--objects", type=int, default=10)
    ap.add_argument("--classes", type=int, default=80)
    args = ap.parse_args()
    import torch
    import torchvision  # noqa: F401 - Ultralytics' NMS uses torchvision's when it is imported

    torch.set_num_threads(1)  # a camera loop's post-processing runs beside the inference
    print(f"{'input':>8} {'N':>6} {'cand.':>6} {'dets':>5}  {'who':<11} {'p50 ms':>7} {'p90 ms':>7} "
          f"{'p99 ms':>7}")
    cases = [(size, synthetic_output(size, args.classes, args.objects), (SCALE, ZERO),
              (int(size * 0.75), size)) for size in (320, 640)]  # 4:3 frames, letterboxed
    raw, quant, orig = fixture_output()
    cases.append((256, raw, quant, orig))  # the real 3-class fixture export
    for size, raw, quant, orig in cases:
        layout = yolo.find_yolo_layout([raw.shape], (size, size))
        fit = letterbox_fit((orig[1], orig[0]), (size, size))
        cand = len(yolo.decode([raw], [quant], layout, (size, size)).scores)
        a, b = ours(raw, layout, fit, quant), theirs(raw, size, orig, quant)
        same = len(a) == len(b) and all(o.id == int(r[5]) for o, r in zip(a, b))
        for who, fn in (("edgeapp", lambda: ours(raw, layout, fit, quant)),
                        ("ultralytics", lambda: theirs(raw, size, orig, quant))):
            t = timings(fn, args.runs, args.warmup)
            print(f"{size:>5}px {raw.shape[2]:>6} {cand:>6} {len(a):>5}  {who:<11} "
                  f"{np.percentile(t, 50):7.3f} {np.percentile(t, 90):7.3f} "
                  f"{np.percentile(t, 99):7.3f}")
        print(f"{'':>8} same detections: {same}")


if __name__ == "__main__":
    main()
