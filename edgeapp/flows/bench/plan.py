"""`bench MODEL --plan 4x1080p@10`: does a camera plan fit this machine and its Edge TPU?

Measures, here, what one frame of each resolution of the plan costs, as a camera run spends it:
reading and decoding it from a video (an MJPG one, what USB cameras send at 720p and 1080p,
read by OpenCV as the capture thread reads a source), the host's part of the task (fitting it
into the input, reading the outputs, writing its record) and the inference, each over warmed-up
repeats, the CPU's parts in CPU time; then how much of the CPU this process gets now (other
programs' load takes the rest); then core/capacity.py says which part bounds the plan, its load
and the frame rate each stream gets.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from dataclasses import replace
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core.capacity import CpuShare, FrameCosts, PredictionJson, StreamGroup, max_fps, predict_plan, resolutions
from edgeapp.flows.open_task import Placement, open_task
from edgeapp.hw.hostinfo import usable_cores
from edgeapp.hw.runtime import run_payload

WARMUP = 3
CLIP_FRAMES = 8  # distinct frames in the measuring video, read over and over
SHARE_SECONDS = 0.75  # how long busy threads run to see how much CPU this process gets
NOTE = ("decode measured on an MJPG video read by OpenCV (what USB cameras send at 720p and "
        "1080p); an H.264 stream's decode costs another amount. Assumed: a headless run writing "
        "records (no window, recording or live view, whose overlay and encoding cost more), "
        "newest-frame policy, and the machine's load as it was while measuring")


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


def _clip(folder: str, size: Tuple[int, int]) -> str:
    """A short MJPG video of camera-like frames of `size`, as a camera or a file sends them."""
    import cv2

    path = os.path.join(folder, f"plan_{size[0]}x{size[1]}.avi")
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 30.0, size)
    if not writer.isOpened():
        raise RuntimeError("OpenCV could not write an MJPG video")
    base = synthetic_frame(*size)
    for i in range(CLIP_FRAMES):
        writer.write(np.roll(base, i * 7, axis=1))
    writer.release()
    return path


def _clip_path(folder: str, size: Tuple[int, int]) -> str:
    path = os.path.join(folder, f"plan_{size[0]}x{size[1]}.avi")
    return path if os.path.exists(path) else _clip(folder, size)


class _Reader:
    """The clip's frames, read by cv2.VideoCapture over and over (reopened at its end)."""

    def __init__(self, path: str) -> None:
        self.path, self.cap = path, None

    def read(self) -> np.ndarray:
        import cv2

        for _ in range(2):
            if self.cap is None:
                self.cap = cv2.VideoCapture(self.path)
            ok, frame = self.cap.read()
            if ok and frame is not None:
                return frame
            self.cap.release()
            self.cap = None
        raise RuntimeError(f"OpenCV could not read {self.path}")

    def close(self) -> None:
        if self.cap is not None:
            self.cap.release()


class _ClipSource:
    """The clip as a camera run's source (hw/capture.FrameSource): `frames` frames, then its end."""

    live = False
    fps = 0.0

    def __init__(self, path: str, frames: int) -> None:
        self.name, self.reader, self.left, self.is_open = path, _Reader(path), frames, False

    def open(self) -> None:
        self.is_open = True

    def read(self) -> Optional[np.ndarray]:
        if self.left <= 0:
            return None
        self.left -= 1
        return self.reader.read()

    def at_end(self) -> bool:
        return True

    def close(self) -> None:
        self.reader.close()


def measure_loop(runner, path: str, frames: int, folder: str) -> Tuple[float, float]:
    """A camera run's CPU time per frame (ms) on the clip, every frame processed (the file
    policy: as fast as it goes, nothing dropped), records written; and the cores' worth of
    CPU it got meanwhile."""
    from edgeapp.flows.camera.loop import run_camera

    with open(os.path.join(folder, "loop.jsonl"), "w") as out:
        def write(record: dict) -> None:
            out.write(json.dumps(record, default=str) + "\n")
            out.flush()

        run_camera(_ClipSource(path, WARMUP), runner, drop=False, on_record=write)  # warm-up
        c0, t0 = time.process_time(), time.perf_counter()
        stats = run_camera(_ClipSource(path, frames), runner, drop=False, on_record=write)
        spent, wall = time.process_time() - c0, time.perf_counter() - t0
    return spent * 1000.0 / max(1, stats.processed), spent / max(1e-6, wall)


def measure_costs(task, size: Tuple[int, int], frames: int, folder: str) -> Tuple[FrameCosts, Dict[str, float]]:
    """FrameCosts of one frame size (medians of `frames` warmed-up repeats), and their p90s.
    CPU parts in process CPU time: nothing else of this process runs meanwhile, and the time
    spent waiting for a core (other programs' load) is left out; CpuShare accounts for it."""
    reader = _Reader(_clip_path(folder, size))
    record_file = os.path.join(folder, "records.jsonl")
    rows: Dict[str, List[float]] = {"decode_ms": [], "host_ms": [], "infer_ms": [], "infer_cpu_ms": []}
    try:
        with open(record_file, "w") as out:
            for i in range(WARMUP + frames):
                c0 = time.process_time()
                frame = reader.read()
                c1 = time.process_time()
                tensor, prepared = task.prepare_frame(frame)
                c2, t2 = time.process_time(), time.perf_counter()
                outputs = run_payload(task.engine, tensor)
                c3, t3 = time.process_time(), time.perf_counter()
                result = task.interpret(outputs, prepared)
                out.write(json.dumps({"frame": i, "timestamp": round(time.time(), 3), "device": "plan",
                                      **result.fields, "latency_ms": round((t3 - t2) * 1000.0, 3)},
                                     default=str) + "\n")
                out.flush()
                c4 = time.process_time()
                if i >= WARMUP:
                    rows["decode_ms"].append((c1 - c0) * 1000.0)
                    rows["host_ms"].append(((c2 - c1) + (c4 - c3)) * 1000.0)
                    rows["infer_ms"].append((t3 - t2) * 1000.0)
                    rows["infer_cpu_ms"].append((c3 - c2) * 1000.0)
    finally:
        reader.close()
    med = {k: statistics.median(v) for k, v in rows.items()}
    costs = FrameCosts(med["decode_ms"], med["host_ms"], med["infer_ms"], med["infer_cpu_ms"])
    return costs, {k: float(np.percentile(v, 90)) for k, v in rows.items()}


def _busy(jpeg: np.ndarray, until: float, spent: List[float]) -> None:
    import cv2

    c0 = time.thread_time()
    while time.perf_counter() < until:
        cv2.imdecode(jpeg, cv2.IMREAD_COLOR)  # releases the GIL, as a capture thread's decode
    spent.append(time.thread_time() - c0)


def measure_cpu_share(cores: int, seconds: float = SHARE_SECONDS) -> CpuShare:
    """How much CPU this process gets now: one busy thread alone, then `cores` busy threads
    together, each decoding JPEGs for `seconds` (their CPU time over the wall time)."""
    import cv2

    ok, jpeg = cv2.imencode(".jpg", synthetic_frame(640, 480), [cv2.IMWRITE_JPEG_QUALITY, 85])
    if not ok:
        raise RuntimeError("OpenCV could not encode a JPEG frame")
    got = []
    for n in (1, max(1, cores)):
        spent: List[float] = []
        t0 = time.perf_counter()
        threads = [threading.Thread(target=_busy, args=(jpeg, t0 + seconds, spent), daemon=True)
                   for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got.append(sum(spent) / max(1e-6, time.perf_counter() - t0))
    thread = min(1.0, max(0.05, got[0]))
    return CpuShare(cores, thread, min(float(cores), max(thread, got[1])))


def with_camera_share(probe: CpuShare, camera: float) -> CpuShare:
    """The CPU share busy threads measured, or what the camera loop got running as fast as it
    could, if more: on a loaded machine, threads that wait for each other's frames are
    scheduled sooner than threads that never sleep, and get more of the CPU."""
    if camera <= probe.capacity(2):
        return probe
    return CpuShare(probe.cores, max(probe.thread, min(1.0, camera / 2)),
                    min(float(probe.cores), max(camera, probe.capacity(probe.cores))))


class CpuShareJson(TypedDict):
    """The CPU this process got: one busy thread's fraction of a core, and all its cores'."""

    thread: float
    total: float


class PlanGroup(TypedDict):
    """A group of streams as asked, and the frame rate each stream of it is predicted to get."""

    streams: int
    width: int
    height: int
    fps: float
    predicted_fps: float


class SizeCosts(TypedDict):
    """One frame size's measured costs (ms, medians; `p90`: their 90th percentiles)."""

    decode_ms: float
    host_ms: float
    infer_ms: float
    infer_cpu_ms: float
    loop_ms: float
    run_cpu_ms: float
    p90: Dict[str, float]
    one_stream_max_fps: float


class PlanReport(TypedDict):
    """bench --plan's JSON document."""

    model: str
    device: str
    task: str
    cores: int
    cpu_share: CpuShareJson
    plan: List[PlanGroup]
    costs: Dict[str, SizeCosts]  # "WIDTHxHEIGHT" -> its costs
    prediction: PredictionJson
    notes: List[str]


def run_plan(model: str, groups: List[StreamGroup], place: Placement = Placement(), frames: int = 30,
             cores: Optional[int] = None, progress: Optional[Callable[[str], None]] = None) -> PlanReport:
    """Measure the plan's frame costs with `model` where `place` says, and predict it."""
    cores = cores or usable_cores()
    with open_task(model, None, place, frames=True) as opened, \
            tempfile.TemporaryDirectory(prefix="edgeapp-plan-") as folder:
        task = opened.task.on(opened.engine)
        where = opened.where
        on_cpu = where.startswith("cpu")
        costs, p90s, loops, got = {}, {}, {}, 0.0
        for size in resolutions(groups):
            if progress:
                progress(f"measuring {size[0]}x{size[1]} frames")
            parts, p90s[size] = measure_costs(task, size, frames, folder)
            loop_cpu, loop_got = measure_loop(opened.runner, _clip_path(folder, size), frames, folder)
            got = max(got, loop_got)
            # what the loop adds to the parts: frames handed between threads, Python, the GIL
            loops[size] = loop_cpu
            costs[size] = replace(parts, loop_ms=max(0.0, loop_cpu - parts.cpu_ms(on_cpu)))
        notes = list(opened.notices)
    if progress:
        progress("measuring how much CPU this process gets")
    cpu = with_camera_share(measure_cpu_share(cores), got)
    prediction = predict_plan(groups, costs, cpu, devices=1, on_cpu=on_cpu)
    return {"model": str(model), "device": where, "task": task.name, "cores": cores,
            "cpu_share": {"thread": round(cpu.thread, 3), "total": round(cpu.capacity(cores), 3)},
            "plan": [{"streams": g.count, "width": g.width, "height": g.height, "fps": g.fps,
                      "predicted_fps": round(f, 2)} for g, f in zip(groups, prediction.fps)],
            "costs": {f"{w}x{h}": {"decode_ms": round(c.decode_ms, 3), "host_ms": round(c.host_ms, 3),
                                   "infer_ms": round(c.infer_ms, 3),
                                   "infer_cpu_ms": round(c.inference_cpu(on_cpu), 3),
                                   "loop_ms": round(c.loop_ms, 3), "run_cpu_ms": round(loops[(w, h)], 3),
                                   "p90": {k: round(v, 3) for k, v in p90s[(w, h)].items()},
                                   "one_stream_max_fps": round(max_fps(c, cpu, on_cpu), 2)}
                      for (w, h), c in costs.items()},
            "prediction": prediction.to_json(), "notes": notes + [NOTE]}
