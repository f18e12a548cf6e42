"""Latency statistics: pure functions over arrays of per-inference times in milliseconds."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import numpy as np
from typing_extensions import TypedDict

PERCENTILES = (50, 90, 99)


class LatencyJson(TypedDict):
    """LatencyStats in a JSON document (ms, rounded; the count is the document's `runs`)."""
    mean: float
    std: float
    min: float
    p50: float
    p90: float
    p99: float
    max: float


class P50P99(TypedDict):
    p50: Optional[float]
    p99: Optional[float]


class EnergyFigures(TypedDict):
    tops_per_watt: Optional[float]
    inferences_per_joule: Optional[float]
    mj_per_inference: Optional[float]


@dataclass(frozen=True)
class LatencyStats:
    """Summary of warm latencies. std is the population std (ddof=0): the runs are all we have."""

    count: int
    mean: float
    std: float
    min: float
    p50: float
    p90: float
    p99: float
    max: float

    def to_dict(self, digits: int = 4) -> LatencyJson:
        return {k: (round(v, digits) if isinstance(v, float) else v) for k, v in asdict(self).items()
                if k != "count"}  # type: ignore[return-value]


def percentile(samples_ms: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-th percentile with linear interpolation between closest ranks (numpy's default)."""
    a = np.asarray(samples_ms, dtype=np.float64)
    if a.size == 0:
        raise ValueError("no samples")
    return float(np.percentile(a, q))


def median(samples: Sequence[float]) -> float:
    return percentile(samples, 50)


def p50_p99(samples_ms: Sequence[float]) -> P50P99:
    """{"p50", "p99"} rounded to the microsecond, or None each with no samples (live summaries)."""
    if len(samples_ms) == 0:
        return {"p50": None, "p99": None}
    p50, p99 = np.percentile(np.asarray(samples_ms, dtype=np.float64), [50, 99])
    return {"p50": round(float(p50), 3), "p99": round(float(p99), 3)}


def latency_stats(samples_ms: Sequence[float] | np.ndarray) -> LatencyStats:
    """mean, std, min, p50, p90, p99 and max of `samples_ms` (at least one sample)."""
    a = np.asarray(samples_ms, dtype=np.float64)
    if a.size == 0:
        raise ValueError("no samples")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError("latencies must be finite and non-negative")
    p50, p90, p99 = (float(v) for v in np.percentile(a, PERCENTILES))
    return LatencyStats(count=int(a.size), mean=float(a.mean()), std=float(a.std()),
                        min=float(a.min()), p50=p50, p90=p90, p99=p99, max=float(a.max()))


def throughput(count: int, seconds: float) -> float:
    """Inferences per second over a wall-clock window (includes the loop's own overhead)."""
    if seconds <= 0:
        raise ValueError("the window must last more than 0 s")
    return count / seconds


def achieved_tops(ops_per_inference: Optional[int], inferences_per_s: float) -> Optional[float]:
    """Tera-operations per second actually achieved: ops × inferences/s ÷ 10¹²."""
    if not ops_per_inference:
        return None
    return ops_per_inference * inferences_per_s / 1e12


def energy_figures(tops: Optional[float], inferences_per_s: float,
                   watts: Optional[float]) -> EnergyFigures:
    """TOPS/W, inferences per joule and millijoules per inference at `watts` (None: unknown)."""
    if not watts or watts <= 0:
        return {"tops_per_watt": None, "inferences_per_joule": None, "mj_per_inference": None}
    return {"tops_per_watt": (tops / watts) if tops is not None else None,
            "inferences_per_joule": inferences_per_s / watts,
            "mj_per_inference": 1000.0 * watts / inferences_per_s if inferences_per_s > 0 else None}


def speedup(baseline_ms: Optional[float], other_ms: Optional[float]) -> Optional[float]:
    """How many times faster `other` is than `baseline` (None when either is missing)."""
    if not baseline_ms or not other_ms:
        return None
    return baseline_ms / other_ms


def scaling_efficiency(aggregate_ips: float, devices: int, one_device_ips: float) -> Optional[float]:
    """Throughput with N devices ÷ (N × one device's): 1.0 is perfect linear scaling."""
    if devices < 1 or one_device_ips <= 0:
        return None
    return aggregate_ips / (devices * one_device_ips)


def bottleneck(stage_ms: Sequence[Optional[float]]) -> Optional[int]:
    """The pipeline stage that bounds throughput: the slowest one (the first of equals)."""
    known = [(ms, i) for i, ms in enumerate(stage_ms) if ms is not None]
    if not known:
        return None
    return max(known, key=lambda t: (t[0], -t[1]))[1]


# A thread sweep's verdict: a difference counts when the runner-up's median is at least this
# much slower and the best was faster in at least this share of the paired rounds.
NOISE_GAP = 0.03
NOISE_WINS = 0.8


@dataclass(frozen=True)
class Fastest:
    """Which configuration is fastest, by the median of its per-round medians, and whether the
    runner-up is really slower or within the noise of the rounds."""

    best: int
    runner_up: Optional[int]
    medians: tuple  # per configuration: the median of its round medians (ms)
    rounds: int  # paired rounds compared (the fewest any configuration has)
    wins: int  # rounds in which the best was faster than the runner-up
    gap: Optional[float]  # the runner-up's median over the best's, minus 1
    within_noise: bool


def fastest(round_medians: Sequence[Sequence[float]]) -> Fastest:
    """The configuration with the lowest median of its round medians (rounds run interleaved,
    so round i of each was measured under the same load). Robust: one stall of 100 ms in a
    round of 0.4 ms inferences moves a mean by far more than the difference being measured,
    but neither that round's median nor the median over rounds."""
    if not round_medians or not all(len(r) for r in round_medians):
        raise ValueError("every configuration needs at least one round")
    medians = tuple(float(np.median(r)) for r in round_medians)
    order = sorted(range(len(medians)), key=lambda i: (medians[i], i))
    best = order[0]
    if len(order) == 1:
        return Fastest(best, None, medians, len(round_medians[0]), 0, None, False)
    other = order[1]
    n = min(len(round_medians[best]), len(round_medians[other]))
    wins = sum(1 for a, b in zip(round_medians[best][:n], round_medians[other][:n]) if a < b)
    gap = medians[other] / medians[best] - 1.0 if medians[best] > 0 else None
    noise = gap is None or gap < NOISE_GAP or wins < NOISE_WINS * n
    return Fastest(best, other, medians, n, wins, gap, noise)
