"""The maths of `convert --max-drop`: pure numpy.

What a conversion loses, in the task metric's points: with labelled data (`--eval DATA`) the
task's own metric as `eval` computes it (top-1, mAP50-95, mIoU, OKS AP); without, a detector's
box agreement (mAP against the float model's boxes), else top-1 accuracy when the held-out
images have classes, else top-1 agreement with the float model, else the outputs' cosine. A
tensor's real range and where a percentile clips it; which trial to keep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np
from typing_extensions import TypedDict


class TrialRow(TypedDict, total=False):
    """One trial of convert's tuning (flows/convert/tune.py): what it measured, what the Edge TPU
    would run of it, or why it was skipped or failed; with the settings of its fix."""
    trial: str  # plain, per-channel weights, more calibration, ..., float tail from op N
    order: int
    skipped: str
    error: str
    metric: str
    float: float
    int8: float
    drop: Optional[float]
    detail: dict  # the measurement behind it (flows/convert/measures.Measured.detail)
    ops_tpu: int
    ops_total: int
    macs_tpu: int
    macs_total: int
    macs_tpu_share: Optional[float]
    size_bytes: int
    seconds: float
    calibration_samples: int  # more calibration; ranges re-measured: the images measured on
    tensors: int  # ranges re-measured: the tensors ranged, how many it narrowed, the most (x)
    narrowed: int
    narrowed_most: float
    clip_percentile: float  # ranges clipped
    clipped: List[str]  # the tensors whose range was cut
    pairs: List[str]  # equalization
    alpha: float
    max_scale: float
    output_sqnr_db: float
    on: str  # bias correction: the trial it corrected
    layers_corrected: int
    float_from_op: int  # float tail
    float_ops: int


BINS = 4096


@dataclass
class RangeStats:
    """A tensor's values over many samples: min, max, and a histogram of |x| over the
    calibrated extent (bounded memory whatever the sample count)."""

    cal_min: float
    cal_max: float
    low: float = math.inf
    high: float = -math.inf
    count: int = 0
    hist: np.ndarray = field(default_factory=lambda: np.zeros(BINS, np.int64))

    @property
    def extent(self) -> float:
        return max(abs(self.cal_min), abs(self.cal_max)) or 1.0

    def add(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float64).ravel()
        if not x.size:
            return
        self.low, self.high = min(self.low, float(x.min())), max(self.high, float(x.max()))
        self.count += x.size
        idx = np.minimum((np.abs(x) / self.extent * BINS).astype(np.int64), BINS - 1)
        self.hist += np.bincount(idx, minlength=BINS)

    def percentile(self, q: float) -> float:
        """The q-th percentile (0..100) of |x|, to a bin's top."""
        if not self.count:
            return self.extent
        i = int(np.searchsorted(np.cumsum(self.hist), math.ceil(self.count * q / 100.0)))
        return min(i + 1, BINS) * self.extent / BINS

    def measured(self) -> tuple:
        """The range the values really took (within the calibrated one; 0 always inside)."""
        if not self.count:
            return self.cal_min, self.cal_max
        low = max(self.cal_min, min(self.low, 0.0))
        high = min(self.cal_max, max(self.high, 0.0))
        if high - low <= 0:
            return self.cal_min, self.cal_max
        return low, high

    def clipped(self, q: float, ratio: float, low: float, high: float) -> tuple:
        """(low, high, clipped?): [low, high] cut to ±(q-th percentile of |x|) when the range is
        more than `ratio` times that percentile (a few values set the int8 step)."""
        p = self.percentile(q)
        span = max(abs(low), abs(high))
        if p <= 0 or span <= ratio * p:
            return low, high, False
        return max(low, -p), min(high, p), True


def metric_of(detail: dict) -> tuple:
    """(metric name, float value, int8 value) from an agreement report: top-1 accuracy with
    labels, else top-1 agreement (float 1.0), else the first output's cosine (float 1.0)."""
    if detail.get("float_accuracy") is not None and detail.get("int8_accuracy") is not None:
        return "top-1 accuracy", float(detail["float_accuracy"]), float(detail["int8_accuracy"])
    if detail.get("agreement") is not None:
        return "top-1 agreement", 1.0, float(detail["agreement"])
    outputs = detail.get("outputs") or []
    cos = min((o["cosine"] for o in outputs if o.get("cosine") is not None), default=None)
    return "output cosine", 1.0, (1.0 if cos is None else float(cos))


# eval's metric --max-drop bounds, per kind of labelled data (flows/eval_data.EvalData.kind):
# the metric's key in eval's results and its name
TASK_METRICS = {"classification": ("top1", "top-1 accuracy"), "detection": ("map", "mAP50-95"),
                "segmentation": ("miou", "mIoU"), "keypoints": ("oks_ap", "OKS AP")}
BOX_AGREEMENT = "box agreement mAP50-95"


def task_metric_of(kind: str, float_metrics: dict, int8_metrics: dict) -> tuple:
    """(metric name, float value, int8 value) of eval's results on `kind` data: its main
    metric (TASK_METRICS)."""
    key, name = TASK_METRICS[kind]
    return name, float(float_metrics[key]), float(int8_metrics[key])


def box_metric_of(detection: dict) -> tuple:
    """(metric name, 1.0, int8 value) of a detection agreement report: the int8 model's
    mAP50-95 with the float model's own boxes as the truth (the float model scores 1.0)."""
    return BOX_AGREEMENT, 1.0, float(detection["map50_95"])


def drop_of(ref: float, got: float) -> float:
    """Points lost (a fraction: 0.01 is one point); negative when int8 scores higher."""
    return round(float(ref) - float(got), 6)


def meets(drop: float, budget: float) -> bool:
    return drop <= budget + 1e-9


def mapped(trial: dict, floor: float) -> bool:
    """The trial leaves at least `floor` of the MACs on the Edge TPU (`--min-tpu`)."""
    return floor <= 0 or (trial.get("macs_tpu_share") or 0.0) >= floor - 1e-9


def tpu_floor(min_tpu: float, plain: dict) -> float:
    """The share of MACs a trial must leave on the Edge TPU: `--min-tpu`, or what the plain
    conversion maps when that is less (a model the Edge TPU cannot run whole is not a trade)."""
    return min(float(min_tpu), float(plain.get("macs_tpu_share") or 0.0))


def best_of(trials: List[TrialRow], floor: float = 0.0) -> Optional[TrialRow]:
    """The trial losing least among those leaving at least `floor` of the MACs on the Edge TPU;
    ties go to the most MACs on the Edge TPU, then the earliest."""
    done = [t for t in trials if t.get("drop") is not None and mapped(t, floor)]
    if not done:
        return None
    return min(done, key=lambda t: (t["drop"], -(t.get("macs_tpu_share") or 0.0), t["order"]))


def improves(trial: dict, than: dict) -> bool:
    """`trial` is better than `than`: it loses less of the metric, or as much with a higher
    output SQNR against the float model (a held-out set too small to move top-1 still shows
    the gain in the outputs)."""
    if trial.get("drop") is None or than.get("drop") is None:
        return False
    if trial["drop"] != than["drop"]:
        return trial["drop"] < than["drop"]
    mine, theirs = output_sqnr(trial), output_sqnr(than)
    return mine is not None and theirs is not None and mine > theirs + 0.1


def output_sqnr(trial: dict) -> Optional[float]:
    """The worst output's SQNR (dB) float vs int8 of a trial measured by agreement, else None."""
    outputs = (trial.get("detail") or {}).get("outputs") or []
    values = [o["sqnr_db"] for o in outputs if o.get("sqnr_db") is not None]
    return min(values) if values else None


def tail_cuts(weighted: list, count: int, limit: int, outliers: Sequence[int] = ()) -> list:
    """Where a float tail may start (op positions), latest first: before each weighted op from
    the last one back (at most `limit`), at every op whose range an outlier sets (the tail then
    takes the outlier off the int8 grid), and after the first op."""
    cuts = sorted({i for i in weighted if 0 < i < count}, reverse=True)[:limit]
    cuts += [i for i in outliers if 0 < i < count] + ([1] if count > 1 else [])
    return sorted(set(cuts), reverse=True)


def bias_shift(float_out: np.ndarray, int8_out: np.ndarray, bias_scales: np.ndarray) -> np.ndarray:
    """Bias correction: the int8 layer's mean error per output channel (the last axis; over
    samples and positions), in the int32 bias's units, to subtract from the bias."""
    err = (np.asarray(int8_out, np.float64) - np.asarray(float_out, np.float64))
    mean = err.reshape(-1, err.shape[-1]).mean(axis=0)
    return np.rint(mean / np.asarray(bias_scales, np.float64)).astype(np.int64)
