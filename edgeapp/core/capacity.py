"""How many cameras one machine and its Edge TPUs can take: the arithmetic of a plan.

A plan is streams at a resolution and frame rate (`4x1080p@10,1x720p@15`). Each frame costs,
measured on this machine (flows/bench/plan.py): its decode (in its source's capture thread,
one per stream, so decodes of several streams run on several cores), then in the device's one
thread the host's part (fitting the frame into the input, reading the outputs) and the
inference. So three things can bound a plan:
- decode: the decodes of all streams over the CPU cores;
- device: one device's thread, which prepares, invokes and interprets every frame it gets (the
  inference is the Edge TPU's time, USB transfer included, or the CPU's);
- cpu: all the CPU work (decodes, host parts, and inferences when they run on the CPU) over
  the cores.
The busiest one sets the plan's load; under 1 the plan fits with the rest as headroom, over 1
each stream gets its fair share: its frame rate divided by the load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

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
    """What one frame of a resolution costs here, in milliseconds."""

    decode_ms: float  # in its stream's capture thread
    host_ms: float  # in the device's thread, besides the inference: fit the input, read outputs
    infer_ms: float  # the inference: the Edge TPU's time (USB included) or the CPU's


@dataclass(frozen=True)
class Prediction:
    """What a plan asks of each part (1.0 = all of it), which part bounds it, and the frame
    rate each group of streams gets."""

    loads: Dict[str, float]  # decode, device, cpu
    bound: str
    load: float
    fits: bool
    headroom: float  # the bounding part's share left (negative: over)
    fps: Tuple[float, ...]  # per group, each stream's

    def to_json(self) -> dict:
        return {"loads": {k: round(v, 4) for k, v in self.loads.items()}, "bound": self.bound,
                "load": round(self.load, 4), "fits": self.fits, "headroom": round(self.headroom, 4),
                "fps": [round(f, 2) for f in self.fps]}


def predict_plan(groups: Sequence[StreamGroup], costs: Dict[Tuple[int, int], FrameCosts], cores: int,
            devices: int = 1, on_cpu: bool = False) -> Prediction:
    """The plan's load on this machine: `costs` per resolution, `cores` CPU cores, `devices`
    Edge TPUs (each with its own thread) or the CPU (`on_cpu`: inferences are CPU work too)."""
    decode = host = infer = 0.0  # core-seconds (or device-seconds) per second
    for g in groups:
        c = costs[g.size]
        rate = g.count * g.fps / 1000.0
        decode += rate * c.decode_ms
        host += rate * c.host_ms
        infer += rate * c.infer_ms
    cores = max(1, cores)
    loads = {"decode": decode / cores,
             "device": (host + infer) / max(1, devices),
             "cpu": (decode + host + (infer if on_cpu else 0.0)) / cores}
    bound = max(loads, key=lambda k: loads[k])
    load = loads[bound]
    share = 1.0 if load <= 1.0 else 1.0 / load
    return Prediction(loads, bound, load, load <= 1.0, 1.0 - load, tuple(g.fps * share for g in groups))


def max_fps(costs: FrameCosts, cores: int, on_cpu: bool = False) -> float:
    """The frame rate one stream reaches at most when nothing else runs (a file read as fast as
    it goes): its frames pipelined through the capture thread and the device's thread."""
    per_frame = max(costs.decode_ms, costs.host_ms + costs.infer_ms,
                    (costs.decode_ms + costs.host_ms + (costs.infer_ms if on_cpu else 0.0)) / max(1, cores))
    return 1000.0 / per_frame if per_frame > 0 else float("inf")


def resolutions(groups: Sequence[StreamGroup]) -> List[Tuple[int, int]]:
    """The distinct frame sizes of a plan, in the order given."""
    return list(dict.fromkeys(g.size for g in groups))
