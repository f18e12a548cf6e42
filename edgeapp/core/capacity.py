"""How many cameras one machine and its Edge TPUs can take: the arithmetic of a plan.

A plan is streams at a resolution and frame rate (`4x1080p@10,1x720p@15`). A camera run reads
each stream in its own capture thread (read and decode), and runs every frame in the device's
one thread (fit it into the input, invoke, read the outputs, write the record). What a frame
costs is measured on this machine (flows/bench/plan.py), in CPU time for the CPU's parts; and
how much CPU this process gets (`CpuShare`): on a machine other programs load, a busy thread
gets only part of a core. So three things can bound a plan:
- decode: a stream's capture thread, which decodes its frames at the share of a core it gets;
- device: one device's thread, which prepares, invokes and interprets every frame (the
  inference is the Edge TPU's time, USB transfer and the worker's round trip included, or the
  CPU's);
- cpu: all the CPU work (decodes, host parts, and inferences when they run on the CPU) over
  the CPU this process's threads get together: on the CPU, decodes and inferences share cores.
The busiest one sets the plan's load; under 1 the plan fits with the rest as headroom, over 1
the streams share, round-robin, what the bounding part can do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from typing_extensions import TypedDict

NAMED = {"480p": (640, 480), "540p": (960, 540), "720p": (1280, 720), "1080p": (1920, 1080),
         "1440p": (2560, 1440), "4k": (3840, 2160), "2160p": (3840, 2160)}
_SIZE = re.compile(r"^(\d+)[xX](\d+)$")


@dataclass(frozen=True)
class StreamGroup:
    """`count` streams of width x height at `fps` frames per second."""

    count: int
    width: int
    height: int
    fps: float

    @property
    def size(self) -> Tuple[int, int]:
        return (self.width, self.height)

    def text(self) -> str:
        return f"{self.count}x{self.width}x{self.height}@{self.fps:g}"


def parse_plan(text: str) -> List[StreamGroup]:
    """`COUNTxRES@FPS[,...]`, RES a name (480p, 720p, 1080p, 1440p, 4k) or WIDTHxHEIGHT written
    WxH after the count (`2x1280x720@15`); ValueError says what to write."""
    groups = []
    for part in str(text).split(","):
        part = part.strip()
        m = re.match(r"^\s*(\d+)\s*[xX*]\s*(\d+[xX]\d+|\w+)\s*@\s*([0-9.]+)\s*$", part)
        size = None
        if m:
            res = m.group(2).lower()
            size = NAMED.get(res)
            if size is None and _SIZE.match(res):
                w, h = _SIZE.match(res).groups()
                size = (int(w), int(h))
        if not m or size is None:
            raise ValueError(f"--plan {text!r}: write COUNTxRESOLUTION@FPS, e.g. 4x1080p@10 or "
                             f"2x1280x720@15,1x4k@5 (resolutions: {', '.join(NAMED)} or WxH)")
        count, fps = int(m.group(1)), float(m.group(3))
        if not 1 <= count <= 64 or not 0 < fps <= 240 or not (16 <= size[0] <= 8192 and 16 <= size[1] <= 8192):
            raise ValueError(f"--plan {part!r}: 1 to 64 streams, a frame rate above 0 up to 240, "
                             "sides from 16 to 8192 pixels")
        groups.append(StreamGroup(count, size[0], size[1], fps))
    return groups


@dataclass(frozen=True)
class FrameCosts:
    """What one frame of a resolution costs here, in milliseconds.

    The CPU parts are CPU time, not wall time: on a machine other programs load, a thread waits
    its turn for a core, and `CpuShare` says how much of a core it gets."""

    decode_ms: float  # CPU time of its stream's capture thread: read and decode one frame
    host_ms: float  # CPU time in the device's thread besides the inference: fit the input, read
    # the outputs, write the record
    infer_ms: float  # the inference as the device's thread waits for it (wall time): the Edge
    # TPU's time (USB and the worker's round trip included) or the CPU's
    infer_cpu_ms: Optional[float] = None  # the CPU time the inference costs this machine (every
    # interpreter thread); None: infer_ms on the CPU, nothing on an Edge TPU
    loop_ms: float = 0.0  # CPU time the camera loop adds to these parts (frames handed between
    # threads, Python, the GIL), counted in the device's thread

    def inference_cpu(self, on_cpu: bool) -> float:
        if self.infer_cpu_ms is not None:
            return self.infer_cpu_ms
        return self.infer_ms if on_cpu else 0.0

    def cpu_ms(self, on_cpu: bool) -> float:
        """All the CPU time one frame costs, decode to record."""
        return self.decode_ms + self.host_ms + self.loop_ms + self.inference_cpu(on_cpu)


@dataclass(frozen=True)
class CpuShare:
    """How much CPU this process gets: `cores` it may run on, the fraction of a core `thread`
    one busy thread gets, and the CPU-seconds per second `total` that `cores` busy threads get
    together (both measured: other programs' load takes the rest). Idle: 1.0 and `cores`."""

    cores: int
    thread: float = 1.0
    total: Optional[float] = None

    def capacity(self, threads: int) -> float:
        """CPU-seconds per second that `threads` busy threads of this process get together."""
        total = self.total if self.total is not None else self.cores * self.thread
        return max(1e-9, min(total, max(1, threads) * self.thread, float(max(1, self.cores))))


class PartLoads(TypedDict):
    """Each part's busy fraction (1.0 = all of it): the busiest stream's capture thread
    (decoding), the device's thread(s), and all CPU work over the CPU this process gets."""

    decode: float
    device: float
    cpu: float


class PredictionJson(TypedDict):
    """A Prediction in bench --plan's JSON document (rounded)."""

    loads: PartLoads
    bound: str
    load: float
    fits: bool
    headroom: float
    fps: List[float]


@dataclass(frozen=True)
class Prediction:
    """What a plan asks of each part (1.0 = all of it), which part bounds it, and the frame
    rate each group of streams gets."""

    loads: PartLoads
    bound: str
    load: float
    fits: bool
    headroom: float  # the bounding part's share left (negative: over)
    fps: Tuple[float, ...]  # per group, each stream's

    def to_json(self) -> PredictionJson:
        return {"loads": {k: round(v, 4) for k, v in self.loads.items()}, "bound": self.bound,
                "load": round(self.load, 4), "fits": self.fits, "headroom": round(self.headroom, 4),
                "fps": [round(f, 2) for f in self.fps]}


def _device_ms(c: FrameCosts, cpu: CpuShare, on_cpu: bool) -> float:
    """The device's thread's time for one frame: its CPU work at the share of a core it gets,
    and the inference (on the CPU, CPU work too: wall time, or CPU time when waiting for a
    core inflated the wall time measured)."""
    infer = min(c.infer_ms, c.inference_cpu(True)) / cpu.thread if on_cpu else c.infer_ms
    return (c.host_ms + c.loop_ms) / cpu.thread + infer


def _cpu_ms(c: FrameCosts, on_cpu: bool) -> float:
    return c.cpu_ms(on_cpu)


def _helpers(c: FrameCosts, on_cpu: bool) -> int:
    """The interpreter's threads besides the device's own (its CPU time over its wall time)."""
    if not on_cpu or c.infer_ms <= 0:
        return 0
    return max(0, int(round(c.inference_cpu(True) / c.infer_ms)) - 1)


def _loads(groups: Sequence[StreamGroup], costs: Dict[Tuple[int, int], FrameCosts], fps: Sequence[float],
           cpu: CpuShare, devices: int, on_cpu: bool) -> PartLoads:
    """Each part's busy fraction when each stream of group i runs at fps[i]."""
    decode = max((f * costs[g.size].decode_ms / 1000.0 / cpu.thread for g, f in zip(groups, fps)), default=0.0)
    device = sum(g.count * f * _device_ms(costs[g.size], cpu, on_cpu) for g, f in zip(groups, fps))
    work = sum(g.count * f * _cpu_ms(costs[g.size], on_cpu) for g, f in zip(groups, fps))
    threads = sum(g.count for g in groups) + max(1, devices) * (  # a capture thread each, a device's each
        1 + max((_helpers(costs[g.size], on_cpu) for g in groups), default=0))
    return {"decode": decode, "device": device / 1000.0 / max(1, devices),
            "cpu": work / 1000.0 / cpu.capacity(threads)}


def predict_plan(groups: Sequence[StreamGroup], costs: Dict[Tuple[int, int], FrameCosts], cpu: CpuShare,
                 devices: int = 1, on_cpu: bool = False) -> Prediction:
    """The plan's load on this machine: `costs` per resolution, the `cpu` this process gets,
    `devices` Edge TPUs (each with its own thread) or the CPU (`on_cpu`: inferences are CPU
    work too).

    Over 1, the streams share what there is as a camera run serves them: round-robin, one frame
    of each source in turn, so each gets the same frame rate unless it asked for less (a
    stream's own capture thread may cap it lower)."""
    asked = [g.fps for g in groups]
    loads = _loads(groups, costs, asked, cpu, devices, on_cpu)
    bound = max(loads, key=lambda k: loads[k])
    load = loads[bound]
    if load <= 1.0:
        return Prediction(loads, bound, load, True, 1.0 - load, tuple(asked))
    return Prediction(loads, bound, load, False, 1.0 - load,
                      tuple(_overloaded(groups, costs, cpu, max(1, devices), on_cpu)))


def _fair(wants: Sequence[float], total: float) -> List[float]:
    """Max-min fair shares of `total` (the scheduler's way between busy threads): each gets
    what it wants if it can, and the rest is split equally between those wanting more."""
    alloc = [0.0] * len(wants)
    active = [i for i, w in enumerate(wants) if w > 0]
    left = total
    while active and left > 1e-12:
        each = left / len(active)
        done = [i for i in active if wants[i] - alloc[i] <= each]
        if not done:
            for i in active:
                alloc[i] += each
            break
        for i in done:
            left -= wants[i] - alloc[i]
            alloc[i] = wants[i]
        active = [i for i in active if i not in done]
    return alloc


def _round_robin(caps: Sequence[float], counts: Sequence[int], per_frame: Sequence[float], budget: float) -> float:
    """The equal frame rate x each stream gets, capped by its own cap, that spends at most
    `budget` (sum of count * min(cap, x) * per_frame)."""
    def spent(x: float) -> float:
        return sum(n * min(c, x) * w for c, n, w in zip(caps, counts, per_frame))

    hi = max(caps, default=0.0)
    if spent(hi) <= budget:
        return hi
    lo = 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if spent(mid) <= budget else (lo, mid)
    return lo


def _overloaded(groups: Sequence[StreamGroup], costs: Dict[Tuple[int, int], FrameCosts], cpu: CpuShare,
                devices: int, on_cpu: bool) -> List[float]:
    """Each stream's processed frame rate when the plan does not fit.

    A camera's capture thread decodes every frame the camera sends, the ones dropped as stale
    too, so decodes compete with the device's threads for the CPU; the scheduler shares it
    fairly between busy threads (each at most the share of a core one thread gets). The
    device's threads serve the streams round-robin. Found as a fixed point: what the capture
    threads decode sets what the device's threads are asked, which sets the CPU left."""
    c = [costs[g.size] for g in groups]
    counts = [g.count for g in groups]
    helpers = max((_helpers(x, on_cpu) for x in c), default=0)
    dev_cpu = [x.host_ms + x.loop_ms + x.inference_cpu(on_cpu) for x in c]  # CPU ms a frame in a device's thread
    dev_ms = [_device_ms(x, cpu, on_cpu) for x in c]  # its wall ms
    threads = sum(counts) + devices * (1 + helpers)
    total = cpu.capacity(threads)
    captured = [g.fps for g in groups]
    got = list(captured)
    for _ in range(80):
        want_dev = sum(n * r * w for n, r, w in zip(counts, captured, dev_cpu)) / 1000.0 / devices
        wants = [min(cpu.thread, g.fps * x.decode_ms / 1000.0) for g, x in zip(groups, c) for _ in range(g.count)]
        wants += [min(cpu.thread * (1 + helpers), want_dev)] * devices
        alloc = _fair(wants, total)
        decoded, i = [], 0
        for g, x in zip(groups, c):
            decoded.append(min(g.fps, alloc[i] * 1000.0 / x.decode_ms) if x.decode_ms > 0 else g.fps)
            i += g.count
        cpu_budget = sum(alloc[i:]) * 1000.0
        x_cpu = _round_robin(decoded, counts, dev_cpu, cpu_budget) if any(dev_cpu) else max(decoded)
        x_dev = _round_robin(decoded, counts, dev_ms, 1000.0 * devices)
        got = [min(r, x_cpu, x_dev) for r in decoded]
        captured = [(a + b) / 2 for a, b in zip(captured, decoded)]
    return got


def max_fps(costs: FrameCosts, cpu: CpuShare, on_cpu: bool = False) -> float:
    """The frame rate one stream reaches at most when nothing else of this process runs (a
    file read as fast as it goes): its frames pipelined through the capture thread and the
    device's thread, both sharing the CPU this process gets."""
    per_frame = max(costs.decode_ms / cpu.thread, _device_ms(costs, cpu, on_cpu),
                    _cpu_ms(costs, on_cpu) / cpu.capacity(2 + _helpers(costs, on_cpu)))
    return 1000.0 / per_frame if per_frame > 0 else float("inf")


def resolutions(groups: Sequence[StreamGroup]) -> List[Tuple[int, int]]:
    """The distinct frame sizes of a plan, in the order given."""
    return list(dict.fromkeys(g.size for g in groups))
