"""`bench MODEL --plan 4x1080p@10`: does a camera plan fit this machine and its Edge TPU?

Measures, here, what one frame of each resolution of the plan costs: its decode (a JPEG frame,
as USB cameras send 720p and 1080p), the host's part of the task (fitting it into the input,
reading the outputs) and the inference, each over warmed-up repeats; then core/capacity.py
says which part bounds the plan, its load and the frame rate each stream gets.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from edgeapp.core.capacity import FrameCosts, StreamGroup, max_fps, predict_plan, resolutions
from edgeapp.flows.open_task import Placement, open_task
from edgeapp.hw.hostinfo import usable_cores

WARMUP = 3
NOTE = ("decode measured on JPEG frames (what USB cameras send at 720p and 1080p); an H.264 "
        "stream's decode costs another amount, and a camera's own capture is not counted")


def synthetic_frame(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A BGR frame with a camera's texture (gradients, noise, blocks), so its JPEG is as large
    as a real one of that size and decodes as slowly."""
    rng = np.random.RandomState(seed)
    gx = np.linspace(0, 1, width, dtype=np.float32)[None, :, None]
    gy = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    img = 60 + gx * np.float32(120) + gy * np.array([40, -30, 20], np.float32)
    img = img + rng.normal(0, 12, size=(height, width, 3)).astype(np.float32)
    for _ in range(12):
        x, y = rng.randint(0, width), rng.randint(0, height)
        img[y:y + height // 8, x:x + width // 8] = rng.randint(0, 256, size=3)
    return np.clip(img, 0, 255).astype(np.uint8)


def measure_costs(task, size: Tuple[int, int], frames: int) -> Tuple[FrameCosts, Dict[str, float]]:
    """FrameCosts of one frame size (medians of `frames` warmed-up repeats), and their p90s."""
    import cv2

    ok, jpeg = cv2.imencode(".jpg", synthetic_frame(*size), [cv2.IMWRITE_JPEG_QUALITY, 85])
    if not ok:
        raise RuntimeError("OpenCV could not encode a JPEG frame")
    decode, host, infer = [], [], []
    for i in range(WARMUP + frames):
        t0 = time.perf_counter()
        frame = cv2.imdecode(jpeg, cv2.IMREAD_COLOR)
        t1 = time.perf_counter()
        _result, infer_ms = task.run_frame(frame)
        t2 = time.perf_counter()
        if i >= WARMUP:
            decode.append((t1 - t0) * 1000.0)
            infer.append(infer_ms)
            host.append(max(0.0, (t2 - t1) * 1000.0 - infer_ms))
    costs = FrameCosts(statistics.median(decode), statistics.median(host), statistics.median(infer))
    p90 = {k: float(np.percentile(v, 90)) for k, v in (("decode_ms", decode), ("host_ms", host),
                                                        ("infer_ms", infer))}
    return costs, p90


def run_plan(model: str, groups: List[StreamGroup], place: Placement = Placement(), frames: int = 30,
             cores: Optional[int] = None, progress: Optional[Callable[[str], None]] = None) -> dict:
    """Measure the plan's frame costs with `model` where `place` says, and predict it."""
    cores = cores or usable_cores()
    with open_task(model, None, place) as opened:
        task = opened.task.on(opened.engine)
        where = opened.where
        on_cpu = where.startswith("cpu")
        costs, p90s = {}, {}
        for size in resolutions(groups):
            if progress:
                progress(f"measuring {size[0]}x{size[1]} frames")
            costs[size], p90s[size] = measure_costs(task, size, frames)
        notes = list(opened.notices)
    prediction = predict_plan(groups, costs, cores, devices=1, on_cpu=on_cpu)
    return {"model": str(model), "device": where, "task": task.name, "cores": cores,
            "plan": [{"streams": g.count, "width": g.width, "height": g.height, "fps": g.fps,
                      "predicted_fps": round(f, 2)} for g, f in zip(groups, prediction.fps)],
            "costs": {f"{w}x{h}": {"decode_ms": round(c.decode_ms, 3), "host_ms": round(c.host_ms, 3),
                                   "infer_ms": round(c.infer_ms, 3),
                                   "p90": {k: round(v, 3) for k, v in p90s[(w, h)].items()},
                                   "one_stream_max_fps": round(max_fps(c, cores, on_cpu), 2)}
                      for (w, h), c in costs.items()},
            "prediction": prediction.to_json(), "notes": notes + [NOTE]}
