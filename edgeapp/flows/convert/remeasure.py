"""Re-measured ranges as a default step of a YOLO export's conversion (flows/convert/tune.
Tuning.remeasure): the trial, what the report records of it, and the line `convert` says.

The calibrator records a tensor an in-place ADD overwrites at the ADD's range; re-measured, each
tensor's range is the one its values take on the calibration images (flows/convert/requantize.py).
On the YOLO fixtures neither wins on every calibration sample (scripts/bench_yolo_calibration.py),
so a conversion measures both and writes the better.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Dict, Optional

import numpy as np
from typing_extensions import Protocol, TypedDict

from edgeapp.flows.convert import requantize as rq

if TYPE_CHECKING:
    from edgeapp.core.quant.tune import TrialRow

RANGES = "ranges re-measured"


class Trials(Protocol):
    """flows/convert/tune._Trials as this step uses it."""

    def measure(self, name: str, flatbuffer: bytes, started: float, settings: dict,
                allow_float: bool = False) -> TrialRow: ...


class RangesReport(TypedDict, total=False):
    """The report's `ranges` (a YOLO export): re-measured ranges kept or not, measured against
    the model written before (`against`: plain), both figures, how much the ranges changed."""
    kept: bool
    why: str
    error: Optional[str]
    seconds: float
    metric: Optional[str]
    measured_on: Optional[str]
    samples: Optional[int]
    against: str
    before: Dict[str, Optional[float]]  # float, int8, drop, macs_tpu_share
    remeasured: Dict[str, Optional[float]]
    calibration_samples: Optional[int]  # the images the ranges were measured on
    tensors: Optional[int]
    narrowed: Optional[int]
    narrowed_most: Optional[float]


def remeasured(trials: Trials, calibrated: rq.Calibrated, images: np.ndarray, io: str,
               started: Optional[float] = None) -> bytes:
    """The `ranges re-measured` trial: ranges measured on `images`, floored as `quantize` floors
    a branch silent on every image, quantized and measured; returns the calibrated bytes."""
    started = time.monotonic() if started is None else started
    rq.measure_ranges(calibrated, images)
    ranged, _ = rq.with_ranges(calibrated)
    ranged, _ = rq.floor_ranges(ranged)
    trials.measure(RANGES, rq.requantize(ranged, io), started,
                   {"calibration_samples": int(len(images)), **rq.narrowed(calibrated)})
    return ranged


def ranges_line(done: RangesReport) -> str:
    """Ranges re-measured by default, as `convert` says it."""
    if done.get("why") or done.get("error"):
        return f"ranges re-measured: not applied ({done.get('why') or done.get('error')})"
    before, after = done["before"], done["remeasured"]
    verdict = "kept" if done["kept"] else f"not kept (no better than {done['against']})"
    return (f"ranges re-measured on {done['calibration_samples']} calibration image(s) ({done['narrowed']} of "
            f"{done['tensors']} tensor ranges narrowed, up to {done['narrowed_most']:g}x): {done['metric']} float "
            f"{before['float']:.4f}, int8 {before['int8']:.4f} {done['against']} -> {after['int8']:.4f} re-measured "
            f"on {done['measured_on']}: {verdict}")
