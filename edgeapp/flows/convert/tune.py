"""Equalization as part of every conversion, and `convert --max-drop X`: when the written int8
model loses more than X points of the task metric on held-out images, try the fixes cheapest
first and keep the first that meets the budget with at least `--min-tpu` of the MACs on the
Edge TPU (a float tail under that floor is listed as a trade, not kept: exit 14).

Equalization runs by default (`Tuning.equalize`) when the plain model has two linear layers it
may rescale across: measured like every trial, written when it measures better than plain.
Ranges re-measured runs by default (`Tuning.remeasure`) for a source that asks for it (a YOLO
export): measured like every trial, written when it measures better than the written model.

The trials, each on top of the best one so far (a fix that does not help is not kept):
  per-channel weights   dense layers' weights per channel, when they were per tensor;
  more calibration      up to 4x the images (all the --calibration folder has), recalibrated;
  ranges re-measured    each tensor's recorded range replaced by the one its values really take
                        (the calibrator records a tensor an ADD overwrites in place at the ADD's range);
  ranges clipped        ranges 4x wider than the 99.99th percentile of |x| cut to it (outliers);
  equalization          a range one channel sets shrunk by rescaling that channel between two
                        linear layers, the float function unchanged (flows/convert/equalize.py);
  bias correction       each output channel's mean int8 error taken off its bias (flows/convert/bias.py);
  float tail            the last layers kept in float on the CPU (the Edge TPU runs up to the
                        first float op), latest cut first: before each weighted layer and at
                        each op whose range an outlier sets.
Every trial is measured by the `measure` job.py picks (flows/convert/measures.py: the task's
own metric on `--eval` labelled data, else a detector's box agreement, else top-1 or cosine
agreement on held-out images; the float side computed once), with `check`'s prediction of the
ops and MACs the Edge TPU runs. A trial that cannot apply to the model is skipped, with why.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core.edgetpu.check_report import check_model
from edgeapp.core.quant.tune import (
    TrialRow,
    best_of,
    drop_of,
    improves,
    mapped,
    meets,
    output_sqnr,
    tail_cuts,
    tpu_floor,
)
from edgeapp.core.tflite.model import parse_model
from edgeapp.core.tflite.patch import older_equivalents
from edgeapp.errors import ConvertError, EdgeappError
from edgeapp.flows.convert import requantize as rq
from edgeapp.flows.convert.bias import correct_biases
from edgeapp.flows.convert.data import Dataset, load_dataset, normalize, write_atomic
from edgeapp.flows.convert.equalize import equalize, find_pairs, worth_trying
from edgeapp.flows.convert.quantize import non_integer_ops
from edgeapp.flows.convert.remeasure import RANGES, RangesReport, remeasured

Say = Callable[[str], None]
Measure = Callable[[Path], tuple]  # an int8 file -> flows/convert/measures.Measured
MORE_CALIBRATION = 4  # "more calibration images": up to this many times as many
CLIP_PERCENTILE = 99.99
RANGE_SAMPLES = 100  # calibration images the real ranges are measured on (every tensor kept: memory, time)
TAIL_TRIALS = 8  # float-tail cut points tried, latest first


class TrialFigures(TypedDict):
    """A trial's figures in the equalization report."""
    float: Optional[float]
    int8: Optional[float]
    drop: Optional[float]
    macs_tpu_share: Optional[float]
    output_sqnr_db: Optional[float]


class EqualizationReport(TypedDict, total=False):
    """The report's `equalization`: kept or not (and why not), plain vs equalized when measured."""
    kept: bool
    why: str
    seconds: float
    metric: Optional[str]
    measured_on: Optional[str]
    samples: Optional[int]
    plain: TrialFigures
    equalized: TrialFigures
    pairs: Optional[List[str]]
    alpha: Optional[float]
    max_scale: Optional[float]


class Traded(TypedDict):
    """A trial within the budget that leaves less than --min-tpu on the Edge TPU."""
    trial: Optional[str]
    drop: Optional[float]
    macs_tpu_share: Optional[float]


class MaxDropReport(TypedDict):
    """The report's (and the sidecar's) `max_drop`: the budget, every trial, the choice."""
    budget: float
    min_tpu: float
    metric: Optional[str]
    measured_on: Optional[str]
    samples: Optional[int]
    trials: List[TrialRow]
    chosen: Optional[str]
    met: bool
    traded: List[Traded]


class FixBase(TypedDict):
    """What the fixes start from: the calibrated model (and its re-measured ranges once a trial
    kept them), the calibration images, the SavedModel, the source's fit of pixels."""
    ranges: Optional[bytes]
    calibrated: rq.Calibrated
    calibration: np.ndarray
    saved: str
    fit: Optional[Callable]
WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV")


class _Trials:
    """Runs and records the trials, each measured by `measure` (its float side computed once).
    `budget` None: equalization by default, before any --max-drop (no verdict, lines kept
    until --max-drop prints them)."""

    def __init__(self, measure: Measure, io: str, budget: Optional[float], say: Say) -> None:
        self.measure_file, self.io, self.budget, self.say = measure, io, budget, say
        self.rows: List[TrialRow] = []
        self.files: dict = {}  # trial name -> flatbuffer
        self.floor = 0.0  # the share of MACs a trial must leave on the Edge TPU (--min-tpu)
        self.written = "plain"  # the trial whose file --output holds
        self.tmp = tempfile.TemporaryDirectory(prefix="edgeapp-trials-")

    def measure(self, name: str, flatbuffer: bytes, started: float, settings: dict,
                allow_float: bool = False) -> TrialRow:
        flatbuffer, _ = older_equivalents(flatbuffer)
        tflite = parse_model(flatbuffer, name)
        row: TrialRow = {"trial": name, "order": len(self.rows), **settings}  # type: ignore[misc]
        bad = [] if allow_float else non_integer_ops(tflite, self.io)
        if bad:
            row.update(drop=None, error=f"float ops: {', '.join(bad)}")
        else:
            path = Path(self.tmp.name) / f"trial{len(self.rows)}.tflite"
            path.write_bytes(flatbuffer)
            try:
                metric, ref, got, detail = self.measure_file(path)
            except EdgeappError as e:  # a trial the runtime refuses to run is a failed trial
                row.update(drop=None, error=str(e).replace(str(path), "the trial's model"))
            else:
                summary = check_model(tflite, flatbuffer).summary
                row.update(metric=metric, float=ref, int8=got, drop=drop_of(ref, got), detail=detail,
                           ops_tpu=summary["ops_tpu"], ops_total=summary["ops_total"],
                           macs_tpu=summary["macs_tpu"], macs_total=summary["macs_total"],
                           macs_tpu_share=summary["macs_tpu_share"], size_bytes=len(flatbuffer))
                self.files[name] = flatbuffer
        row["seconds"] = round(time.monotonic() - started, 2)
        self.rows.append(row)
        if self.budget is not None:
            self.say(line(row, self.budget, self.floor))
        return row

    def skip(self, name: str, why: str) -> None:
        row: TrialRow = {"trial": name, "order": len(self.rows), "drop": None, "skipped": why, "seconds": 0.0}
        self.rows.append(row)
        if self.budget is not None:
            self.say(f"trial {name}: skipped ({why})")

    def row(self, name: str) -> Optional[TrialRow]:
        return next((r for r in self.rows if r["trial"] == name), None)

    def best(self) -> Optional[TrialRow]:
        return best_of(self.rows, self.floor)

    def ok(self, row: TrialRow) -> bool:
        """Within the budget with at least the floor's share of MACs on the Edge TPU."""
        return (row.get("drop") is not None and self.budget is not None and meets(row["drop"], self.budget)
                and mapped(row, self.floor))

    def met(self) -> Optional[TrialRow]:
        """The first trial within the budget and the floor: the written one when it is."""
        written = self.row(self.written)
        return next((r for r in [written, *self.rows] if r is not None and self.ok(r)), None)

    def traded(self) -> List[TrialRow]:
        """Trials within the budget that leave less than the floor's share on the Edge TPU."""
        return [r for r in self.rows if r.get("drop") is not None and self.budget is not None
                and meets(r["drop"], self.budget) and not mapped(r, self.floor)]


def line(row: TrialRow, budget: Optional[float], floor: float = 0.0) -> str:
    """One trial as `convert` prints it."""
    if row.get("drop") is None:
        return f"trial {row['trial']}: failed ({row.get('error') or row.get('skipped')})"
    verdict = "" if budget is None else (", meets" if meets(row["drop"], budget) else ", over") + \
        f" the budget {budget * 100:.2f}"
    share = row.get("macs_tpu_share")
    macs = f"{share:.1%} of MACs" if share is not None else "no MACs"
    under = "" if mapped(row, floor) else f" (under --min-tpu {floor:g})"
    return (f"trial {row['trial']}: {row['metric']} float {row['float']:.4f}, int8 {row['int8']:.4f} "
            f"(drop {row['drop'] * 100:+.2f} points{verdict}); Edge TPU: "
            f"{row['ops_tpu']}/{row['ops_total']} ops, {macs}{under}; {row['seconds']:.1f} s")


class Tuning:
    """One conversion's trials: equalization by default, then --max-drop's fixes. They share one
    measure (built when first needed: its float side computed once), one calibrated model and
    the plain conversion's row."""

    def __init__(self, p, saved: str, cal: Dataset, calibration: np.ndarray, plain, measure: Callable[[], Measure],
                 say: Say, fit: Optional[Callable] = None) -> None:
        self.p, self.saved, self.cal, self.calibration, self.plain = p, saved, cal, calibration, plain
        self._measure, self.say, self.fit = measure, say, fit
        self.trials: Optional[_Trials] = None
        self.base: Optional[FixBase] = None
        self.measured_by = None

    def _started(self) -> _Trials:
        if self.trials is None:
            self.measured_by = self._measure()
            self.trials = _Trials(self.measured_by, self.p.job.io, None, self.say)
            self.trials.measure("plain", self.plain.flatbuffer, time.monotonic(), {})
        return self.trials

    def _calibrated(self) -> FixBase:
        if self.base is None:
            job = self.p.job
            self.base = {"ranges": None, "calibrated": rq.calibrate(self.saved, self.calibration, job.io),
                         "calibration": self.calibration, "saved": self.saved, "fit": self.fit}
        return self.base

    def equalize(self) -> Optional[EqualizationReport]:
        """Equalization as part of every conversion: tried when two linear layers of the plain
        model are joined only by ops it may rescale across, kept (written over --output) when it
        measures better than plain. None when the model has no such pair (nothing was run)."""
        if not find_pairs(self.plain.model, structural=True):
            return None
        started = time.monotonic()
        why = worth_trying(self.saved, self.calibration, self.p.job.io)
        if why is not None:
            return {"kept": False, "why": why, "seconds": round(time.monotonic() - started, 2)}
        trials = self._started()
        try:
            _equalization(trials, self._calibrated(), self.p, self.cal, self.plain, self.say)
        except ConvertError as e:
            trials.skip("equalization", str(e))
            return {"kept": False, "why": str(e), "seconds": round(time.monotonic() - started, 2)}
        plain, eq = trials.row("plain"), trials.row("equalization")
        kept = improves(eq, plain)
        if kept:
            write_atomic(self.p.job.output, trials.files["equalization"])
            trials.written = "equalization"
        keys = ("float", "int8", "drop", "macs_tpu_share")
        return {"kept": kept, "metric": plain.get("metric"), "measured_on": getattr(self.measured_by, "source", None),
                "samples": getattr(self.measured_by, "samples", None),
                "plain": {**{k: plain.get(k) for k in keys}, "output_sqnr_db": output_sqnr(plain)},
                "equalized": {**{k: eq.get(k) for k in keys}, "output_sqnr_db": output_sqnr(eq)},
                **{k: eq.get(k) for k in ("pairs", "alpha", "max_scale")},
                "seconds": round(time.monotonic() - started, 2)}

    def remeasure(self) -> Optional[RangesReport]:
        """Ranges re-measured as part of the conversion when the source asks for it (a YOLO
        export): every tensor's range the one its values take on the calibration images (the
        calibrator records a tensor an in-place ADD overwrites at the ADD's range), floored as
        `quantize` floors. Written over --output when it measures better than the written model
        with as much of the MACs on the Edge TPU: on the fixtures neither ranges wins on every
        calibration sample (scripts/bench_yolo_calibration.py), so the user's data decides. None
        when the source does not ask."""
        if not self.p.source.remeasures_ranges:
            return None
        started = time.monotonic()
        trials = self._started()
        before = trials.row(trials.written)
        try:
            base = self._calibrated()
            ranged = remeasured(trials, base["calibrated"], base["calibration"][:RANGE_SAMPLES],
                                self.p.job.io, started)
        except ConvertError as e:
            trials.skip(RANGES, str(e))
            return {"kept": False, "why": str(e), "seconds": round(time.monotonic() - started, 2)}
        row = trials.row(RANGES)
        kept = improves(row, before) and mapped(row, before.get("macs_tpu_share") or 0.0)
        if kept:
            write_atomic(self.p.job.output, trials.files[RANGES])
            trials.written = RANGES
            base["ranges"] = ranged
        keys = ("float", "int8", "drop", "macs_tpu_share")
        return {"kept": kept, "metric": before.get("metric"), "measured_on": getattr(self.measured_by, "source", None),
                "samples": getattr(self.measured_by, "samples", None), "against": before["trial"],
                "before": {k: before.get(k) for k in keys}, "remeasured": {k: row.get(k) for k in keys},
                **{k: row.get(k) for k in ("calibration_samples", "tensors", "narrowed", "narrowed_most")},
                "error": row.get("error"), "seconds": round(time.monotonic() - started, 2)}

    @property
    def written(self) -> str:
        return self.trials.written if self.trials is not None else "plain"

    def tune(self) -> MaxDropReport:
        """--max-drop's trials after what ran by default; writes the kept model over --output
        when it is not the one written. Returns what the sidecar records: budget, metric, the
        Edge TPU floor, every trial, the choice, whether it met, and the trials the floor refused."""
        job = self.p.job
        trials = self._started()
        trials.budget = job.max_drop
        trials.floor = tpu_floor(job.min_tpu, trials.row("plain"))
        say = self.say
        say(f"--max-drop {job.max_drop:g}: each trial measured in {self.measured_by.what} on "
            f"{self.measured_by.source}; a trial must leave {trials.floor:.0%} of the MACs on the Edge TPU "
            "(--min-tpu)")
        for row in trials.rows:  # measured by default, before the budget was known
            self.say(line(row, trials.budget, trials.floor) if not row.get("skipped")
                     else f"trial {row['trial']}: skipped ({row['skipped']})")
        try:
            if not trials.met():
                say(f"--max-drop {job.max_drop:g}: the {trials.written} model loses more; trying the fixes")
                _fixes(trials, self._calibrated(), self.p, self.cal, self.plain, self.say)
            chosen = trials.met() or trials.best()
            if chosen is not None and chosen["trial"] != trials.written:
                write_atomic(job.output, trials.files[chosen["trial"]])
        finally:
            trials.tmp.cleanup()
        rows = [{k: v for k, v in r.items() if k not in ("detail", "order")} for r in trials.rows]
        return {"budget": job.max_drop, "min_tpu": trials.floor,
                "metric": next((r["metric"] for r in rows if r.get("metric")), None),
                "measured_on": getattr(self.measured_by, "source", None),
                "samples": getattr(self.measured_by, "samples", None),
                "trials": rows, "chosen": chosen["trial"] if chosen else None,
                "met": bool(chosen and trials.ok(chosen)),
                "traded": [{k: r.get(k) for k in ("trial", "drop", "macs_tpu_share")} for r in trials.traded()]}

    def close(self) -> None:
        if self.trials is not None:
            self.trials.tmp.cleanup()


def _fixes(trials: _Trials, base: FixBase, p, cal: Dataset, plain, say: Say) -> None:
    """The trials after plain (and equalization, when it ran by default), cheapest first,
    stopping at the first that meets the budget."""
    for step in (_per_channel, _more_calibration, _ranges, _equalization, _bias_correction, _float_tail):
        try:
            step(trials, base, p, cal, plain, say)
        except ConvertError as e:  # one fix the converter cannot make: the others may still help
            trials.skip(step.__name__.strip("_").replace("_", " "), str(e))
        if trials.met():
            return


def _per_channel(trials: _Trials, base: FixBase, p, cal: Dataset, plain, say: Say) -> None:
    if not _per_tensor_weights(plain.model):
        trials.skip("per-channel weights", "the weights are per channel already")
        return
    started = time.monotonic()
    trials.measure("per-channel weights", rq.requantize(base["calibrated"].data, p.job.io), started, {})


def _more_calibration(trials: _Trials, base: FixBase, p, cal: Dataset, plain, say: Say) -> None:
    have, used = len(p.calibration.paths), len(cal.x)
    want = min(have, MORE_CALIBRATION * used)
    if want <= used:
        trials.skip("more calibration", f"all {used} calibration images are used already")
        return
    started = time.monotonic()
    h, w, c = cal.x.shape[1:4]
    bigger = normalize(load_dataset(p.calibration, (w, h), c, want, seed=2, say=say,
                                    decode=p.job.decode, fit=base["fit"]), p.job.mean, p.job.std)
    more = rq.calibrate(base["saved"], bigger, p.job.io)
    row = trials.measure("more calibration", rq.requantize(more.data, p.job.io), started,
                         {"calibration_samples": int(len(bigger))})
    if _better(row, trials):
        base["calibrated"], base["calibration"] = more, bigger


def _ranges(trials: _Trials, base: FixBase, p, cal: Dataset, plain, say: Say) -> None:
    started = time.monotonic()
    steps = [(RANGES, None), ("ranges clipped", CLIP_PERCENTILE)]
    if trials.row(RANGES) is not None:  # re-measured by default (a YOLO export)
        if base["calibrated"].stats:  # on the calibration still kept: only clipping is new
            steps = steps[1:]
        else:  # more calibration was kept since
            steps[0] = ("ranges re-measured on more calibration", None)
    if not base["calibrated"].stats:
        rq.measure_ranges(base["calibrated"], base["calibration"][:RANGE_SAMPLES])
    for name, percentile in steps:
        ranged, clipped = rq.with_ranges(base["calibrated"], percentile)
        if percentile and not clipped:
            trials.skip(name, f"no range is 4x its {percentile}th percentile")
            continue
        settings = {"clip_percentile": percentile, "clipped": clipped} if percentile else {}
        row = trials.measure(name, rq.requantize(ranged, p.job.io), started, settings)
        started = time.monotonic()
        if _better(row, trials):
            base["ranges"] = ranged
        if trials.met():
            return


def _equalization(trials: _Trials, base: FixBase, p, cal: Dataset, plain, say: Say) -> None:
    name = "equalization"
    if trials.row(name) is not None:  # ran by default on the calibrated ranges
        if base["ranges"] is None:
            return
        name = "equalization on the best ranges"
    started = time.monotonic()
    source = base["ranges"] or base["calibrated"].data  # the other tensors keep the best ranges so far
    done = equalize(source, base["calibration"], p.job.io, RANGE_SAMPLES)
    trials.measure(name, done.int8, started, done.settings)
    base.setdefault("float_of", {})[name] = done.float_model


def _bias_correction(trials: _Trials, base: FixBase, p, cal: Dataset, plain, say: Say) -> None:
    best = trials.best()
    if best is None or best["trial"] not in trials.files:
        return
    started = time.monotonic()
    reference = base.get("float_of", {}).get(best["trial"], base["calibrated"].data)  # what it was quantized from
    fixed, count = correct_biases(trials.files[best["trial"]], reference, base["calibration"])
    if not count:
        trials.skip("bias correction", "no bias to correct")
        return
    trials.measure("bias correction", fixed, started, {"on": best["trial"], "layers_corrected": count})


def _better(row: TrialRow, trials: _Trials) -> bool:
    best = trials.best()
    return row.get("drop") is not None and best is not None and best is row


def _float_tail(trials: _Trials, base: FixBase, p, cal: Dataset, plain, say: Say) -> None:
    job = p.job
    calibrated = base["calibrated"]
    source = base["ranges"] or rq.with_ranges(calibrated)[0]  # a float tail needs the real ranges at its cut
    names = calibrated.op_outputs
    weighted = _weighted_positions(calibrated.data)
    outliers = [names.index(n) for n in rq.with_ranges(calibrated, CLIP_PERCENTILE)[1] if n in names]
    for cut in tail_cuts(weighted, len(names), TAIL_TRIALS, outliers):
        started = time.monotonic()
        data = rq.requantize(source, job.io, denylisted=names[cut:])
        row = trials.measure(f"float tail from op {cut}", data, started,
                             {"float_from_op": cut, "float_ops": len(names) - cut}, allow_float=True)
        if trials.met() or row in trials.traded():  # earlier cuts leave the Edge TPU less still
            return


def _weighted_positions(calibrated: bytes) -> list:
    m = parse_model(calibrated, "calibrated")
    return [op.index for op in m.operators if op.op in WEIGHTED]


def _per_tensor_weights(tflite) -> bool:
    """A weighted op whose weights have one scale for several output channels."""
    for op in tflite.operators:
        if op.op in WEIGHTED and len(op.inputs) > 1 and op.inputs[1] >= 0:
            w = tflite.tensors[op.inputs[1]]
            if w.quantization and len(w.quantization.scale) == 1 and w.shape and w.shape[0] > 1:
                return True
    return False


def equalization_line(done: EqualizationReport) -> str:
    """Equalization by default, as `convert` says it."""
    if done.get("why"):
        return f"equalization: not applied ({done['why']})"
    plain, eq = done["plain"], done["equalized"]
    verdict = "kept" if done["kept"] else "not kept (no better than plain)"
    sqnr = ""
    if plain.get("output_sqnr_db") is not None and eq.get("output_sqnr_db") is not None:
        sqnr = f", output SQNR {plain['output_sqnr_db']:.1f} -> {eq['output_sqnr_db']:.1f} dB"
    return (f"equalization: {done['metric']} float {plain['float']:.4f}, int8 {plain['int8']:.4f} plain -> "
            f"{eq['int8']:.4f} equalized{sqnr} on {done['measured_on']} ({', '.join(done['pairs'] or [])}, "
            f"channels rescaled up to {done['max_scale']:g}x): {verdict}")
