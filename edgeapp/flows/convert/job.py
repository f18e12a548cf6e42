"""`convert` step by step: checks that need no TensorFlow first (exit 2/4/6/7 in a second), then
the float model, quantization, agreement on held-out images, the per-layer report, the sidecar.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Union

from typing_extensions import TypedDict

from edgeapp.core.eval.data import EvalData
from edgeapp.core.learn.embedding import embedding_output
from edgeapp.core.meta import ModelMeta, write_sidecar
from edgeapp.core.naming import report_path, report_plot_path
from edgeapp.core.tflite.model import load_model
from edgeapp.errors import MissingDependency, UsageError
from edgeapp.flows.convert import measures
from edgeapp.flows.convert.agreement import AgreementReport, measure, truth_labels
from edgeapp.flows.convert.data import (
    Sources,
    check_model_output,
    find_sources,
    load_dataset,
    normalize,
    source_entry,
    split_held_out,
)
from edgeapp.flows.convert.measures import TaskMetric
from edgeapp.flows.convert.quantize import exported, quantize
from edgeapp.flows.convert.remeasure import RangesReport, ranges_line
from edgeapp.flows.convert.report import SilentLayer, layer_report, mark_silent, silent_layers, silent_line
from edgeapp.flows.convert.source import open_source
from edgeapp.flows.convert.tune import EqualizationReport, MaxDropReport, Tuning, equalization_line
from edgeapp.flows.evaluate import FloatVsInt8, bind_float, is_labelled_data, read_data
from edgeapp.flows.sources import source_format
from edgeapp.flows.sources.base import FloatModel, Progress, no_progress
from edgeapp.flows.sources.float_engine import engine_for
from edgeapp.flows.sources.source import ModelSource
from edgeapp.tasks import guess_from, kind
from edgeapp.tasks.internal.embed import EMBED_TASK

if TYPE_CHECKING:
    from edgeapp.core.edgetpu.check_report import CheckSummary
    from edgeapp.hw.compiler import CompileReportJson

Say = Callable[[str], None]
VAL_DEFAULT = 50  # calibration images held out for agreement when --val is not given


class LayerReport(TypedDict, total=False):
    """--report: where the per-layer JSON and its plot went (or why the plot was skipped)."""
    json: str
    plot: Optional[str]
    plot_skipped: str
    layers: List[dict]  # flows/convert/report.layer_report's rows, worst first


class CompileSkipped(TypedDict):
    skipped: str  # why --compile did not run


class ConvertReport(TypedDict, total=False):
    """`convert --format json` (docs/convert.md): the model written, its ops, the agreement with
    its float source (its headline figures copied to the top), what tuning did, the sidecar;
    the CLI adds the Edge TPU check and the --compile result."""
    model: str
    source: str
    source_format: str
    io: str
    size_bytes: int
    input_shape: List[int]
    calibration_samples: int
    notes: List[str]
    ops: Dict[str, int]  # op name -> count, most used first
    op_versions: Dict[str, int]
    silent_layers: List[SilentLayer]
    equalization: EqualizationReport
    ranges: RangesReport
    embedding_depth: int
    agreement_detail: AgreementReport
    agreement: Optional[float]
    samples: int
    float_accuracy: Optional[float]
    int8_accuracy: Optional[float]
    float_top5: Optional[float]
    int8_top5: Optional[float]
    report: LayerReport
    max_drop: MaxDropReport
    eval: FloatVsInt8
    task: Optional[str]
    sidecar: str
    times_s: Dict[str, float]  # seconds per step
    edgetpu_check: CheckSummary
    edgetpu_verdict: str
    compile: Union[CompileReportJson, CompileSkipped]


@dataclass
class ConvertJob:
    """What the user asked for, as `convert`'s options say it."""

    model: Path
    output: Path
    calibration: Path
    calibration_size: int = 300
    val: Optional[int] = None  # --val: held-out calibration images for agreement (0: none; None: VAL_DEFAULT)
    eval_dir: Optional[Path] = None  # held-out images, or labelled data (flows/eval_data.py)
    io: str = "uint8"
    mean: float = 0.0
    std: float = 255.0
    labels: Optional[dict] = None  # --labels, stored with the model
    val_labels: Optional[dict] = None  # --val-labels: the model's classes, to name folders' indices
    input_size: Optional[tuple] = None  # --input-size H, W for symbolic ONNX dims
    report: bool = False
    max_drop: Optional[float] = None  # --max-drop: the task metric's points int8 may lose (0.01 = 1)
    decode: str = "full"  # JPEGs decoded as --decode does at inference; the sidecar records it
    min_tpu: float = 0.9  # --min-tpu: the share of MACs a --max-drop trial must leave on the Edge TPU


@dataclass
class Prepared:
    """Everything checked before TensorFlow loads."""

    job: ConvertJob
    source: ModelSource  # the model file as its format reads it (flows/sources/source.py)
    calibration: Sources
    held_out: Optional[Sources]
    notes: list = field(default_factory=list)
    times: dict = field(default_factory=dict)  # seconds per step, for the report
    eval_data: Optional[EvalData] = None  # --eval's labelled data, if it is some


def prepare(job: ConvertJob) -> Prepared:
    """Paths, the model's format, and for ONNX the whole graph check: all before TensorFlow."""
    if job.output.suffix.lower() != ".tflite":
        raise UsageError(f"--output {job.output}: use a .tflite file name")
    check_model_output(job.output)
    fmt = source_format(job.model)
    found = find_sources(job.calibration, "--calibration")
    held, labelled = _eval_sources(job.eval_dir)
    notes = []
    if held is None:
        total = len(found.paths)
        found, held = split_held_out(found, job.calibration_size, VAL_DEFAULT if job.val is None else job.val)
        kept = len(held.paths) if held is not None else 0
        if job.val is not None and kept < job.val:  # the default is capped silently: the report says how many
            notes.append(f"--val {job.val}: {kept} of the {total} image(s) held out to measure "
                         "agreement (at most a fifth, so that calibration keeps most); --eval DIR "
                         "measures on a folder of its own")
    times: dict = {}
    source = open_source(job.model, fmt, job.input_size, times)
    return Prepared(job, source, found, held, notes=notes, times=times, eval_data=labelled)


def _eval_sources(eval_dir: Optional[Path]) -> tuple:
    """(held-out images for agreement, labelled data for the task's metric) of --eval: class
    folders are both; a COCO JSON, a YOLO dataset, a CSV or images and masks the metric's
    only (agreement then uses held-out calibration images); loose images agreement's only."""
    if eval_dir is None:
        return None, None
    if is_labelled_data(eval_dir):
        return None, read_data(eval_dir)
    held = find_sources(eval_dir, "--eval")
    return held, (read_data(eval_dir) if held.classes else None)


def run(p: Prepared, say: Say, progress: Progress = no_progress) -> ConvertReport:
    """Convert, write, measure; returns the report (`convert --format json` prints it)."""
    job, times = p.job, p.times
    for note in p.notes:
        say(note)
    model, cal = _float_model_and_calibration(p, say, progress)
    try:
        calibration = normalize(cal, job.mean, job.std)
        say(f"calibrating on {len(cal.x)} image(s), input {'x'.join(map(str, model.input_shape))}")
        with contextlib.ExitStack() as stack:
            with _timed(times, "export the float SavedModel"):
                saved = stack.enter_context(exported(model))
            with _timed(times, "calibrate and quantize"), progress(len(calibration), "calibrating") as advance:
                q = quantize(saved, calibration, job.output, job.io, progress=advance)
            silent = silent_layers(q.floored, model.layer_names)
            for row in silent:
                say(silent_line(row))
            embedding = None if p.source.task is not None else _embedding_depth(p, q.model, cal)
            task = _task_metric(p, model, cal, embedding, say)
            if task is not None:
                stack.callback(task.close)
            tuning = Tuning(p, saved, cal, calibration, q, lambda: _trial_measure(
                p, model, cal, task, embedding is None, say), say, fit=_fit(p))
            stack.callback(tuning.close)
            equalized = tuning.equalize()
            if equalized is not None:
                times["equalization"] = equalized["seconds"]
            ranges = tuning.remeasure()
            if ranges is not None:
                times["ranges re-measured"] = ranges["seconds"]
            if tuning.written != "plain":
                q = replace(q, model=load_model(job.output), flatbuffer=job.output.read_bytes())
            report = _report_base(p, model, q, len(cal.x))
            report["silent_layers"] = silent
            if equalized is not None:
                report["equalization"] = equalized
                if "plain" in equalized:  # measured (a model it cannot help is not talked about)
                    say(equalization_line(equalized))
            if ranges is not None:
                report["ranges"] = ranges
                say(ranges_line(ranges))
            if embedding is not None:
                report["embedding_depth"] = embedding
            with _timed(times, "agreement on held-out images"):
                _set_agreement(report, _agreement(p, model, cal, say, class_scores=embedding is None))
            if job.report:
                with _timed(times, "--report per layer"):
                    report["report"] = _layer_report(p, model, saved, calibration, q, say)
            if job.max_drop is not None:
                with _timed(times, "--max-drop trials"):
                    _max_drop(p, model, cal, report, tuning, embedding is None, say)
            if task is not None:
                with _timed(times, "--eval: the int8 model on labelled data"):
                    report["eval"] = task.report(job.output)
                for line in report["eval"]["left_out"]:
                    say(f"left out: {line}")
    finally:
        model.close()
    report["task"], report["sidecar"] = _sidecar(p, q.model, cal, report, say)
    report["times_s"] = dict(times)
    return report


def _set_agreement(report: ConvertReport, detail: AgreementReport) -> None:
    report["agreement_detail"] = detail
    report.update({k: detail[k] for k in (
        "agreement", "samples", "float_accuracy", "int8_accuracy", "float_top5", "int8_top5")})


@contextlib.contextmanager
def _timed(times: dict, step: str):
    """Seconds spent in the block, under `step`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        times[step] = round(time.perf_counter() - start, 2)


def _float_model_and_calibration(p: Prepared, say: Say, progress: Progress) -> tuple:
    """The float model and the calibration images, in the order the source needs them: a source
    whose input size is known before loading (ONNX) is converted with its calibration images."""
    job, source = p.job, p.source

    def load(calibration):
        return source.load(calibration, job.output, say, progress, lambda step: _timed(p.times, step))

    size = source.input_size()
    model = load(None) if size is None else None
    if model is not None:
        h, w, c = model.input_shape
        size = (w, h, c)
    with _timed(p.times, "load the calibration images"):
        cal = load_dataset(p.calibration, size[:2], size[2], job.calibration_size, say=say,
                           decode=job.decode, fit=_fit(p))
    if model is None:
        model = load(normalize(cal, job.mean, job.std))
    return model, cal


def _fit(p: Prepared):
    """How images become inputs besides classify's resize (a YOLO export's letterbox), or None."""
    return p.source.fit()


def _report_base(p: Prepared, model: FloatModel, q, samples: int) -> ConvertReport:
    job, tflite = p.job, q.model
    return {"model": str(job.output), "source": str(job.model), "source_format": p.source.format,
            "io": job.io, "size_bytes": tflite.size, "input_shape": list(tflite.input_tensors[0].shape),
            "calibration_samples": samples,
            "notes": list(model.notes) + [f"{n} (same int8 result; compiler 16 knows it)" for n in q.swapped],
            "ops": dict(Counter(op.op for op in tflite.operators).most_common()),
            "op_versions": {op.op: op.version for op in tflite.operators}}


def _embedding_depth(p: Prepared, tflite, cal) -> Optional[int]:
    """D when the written model is an embedding extractor (core/learn/embedding.py), whose outputs are
    features, not class scores: no top-1 against the class folders, no labels for them."""
    names = p.job.labels or p.job.val_labels
    count = len(names) if names else (len(cal.class_names) if cal.class_names else None)
    return embedding_output(tflite, count)


def _held_out(p: Prepared, model: FloatModel, cal, say: Say) -> tuple:
    """(images, where they come from, their class indices or None) for measuring int8."""
    job = p.job
    h, w, c = model.input_shape
    if p.held_out is not None:
        data = load_dataset(p.held_out, (w, h), c, None, seed=1, say=say, decode=job.decode, fit=_fit(p))
        from_eval = job.eval_dir is not None and p.held_out.source == job.eval_dir
        source = f"--eval {job.eval_dir}" if from_eval else "held-out calibration images"
    else:
        data, source = cal, "the calibration images (none held out)"
    return data, source, truth_labels(data, job.val_labels or job.labels)


def _agreement(p: Prepared, model: FloatModel, cal, say: Say, class_scores: bool = True) -> AgreementReport:
    data, source, labels = _held_out(p, model, cal, say)
    found = measure(p.job.output, model, data, p.job.mean, p.job.std, source, labels, class_scores)
    boxes = _box_agreement(p, data, source, say)
    if boxes is not None:
        found["detection"] = boxes(p.job.output)
    return found


def _box_agreement(p: Prepared, data, source: str, say: Say):
    """The source's box agreement on `data` (a detector's: the float export's boxes found once),
    or None for a model without boxes."""
    return p.source.boxes(data, p.job.mean, p.job.std, source, say)


def _trial_measure(p: Prepared, model: FloatModel, cal, task, class_scores: bool, say: Say):
    """What the trials (equalization and a YOLO export's re-measured ranges by default,
    --max-drop's) are measured by: the task's metric on labelled data (`task`), else box
    agreement (a YOLO export), else top-1 or cosine agreement on the held-out images."""
    if task is not None:
        return task
    data, source, labels = _held_out(p, model, cal, say)
    boxes = _box_agreement(p, data, source, say)
    measure = measures.boxes(boxes, say) if boxes is not None else None
    return measure or measures.Agreement(model, data, p.job.mean, p.job.std, source, labels, class_scores)


def _max_drop(p: Prepared, model: FloatModel, cal, report: ConvertReport, tuning: Tuning, class_scores: bool,
              say: Say) -> None:
    """--max-drop's trials (flows/convert/tune.py); when another model than the one written is
    kept, the report describes the kept one."""
    written = tuning.written
    report["max_drop"] = tuned = tuning.tune()
    if tuned["chosen"] not in (None, written):
        kept = load_model(p.job.output)
        report.update(size_bytes=kept.size, ops=dict(Counter(op.op for op in kept.operators).most_common()),
                      op_versions={op.op: op.version for op in kept.operators})
        _set_agreement(report, _agreement(p, model, cal, say, class_scores))


def _task_metric(p: Prepared, model: FloatModel, cal, embedding: Optional[int], say: Say):
    """flows/convert/measures.TaskMetric on --eval's labelled data (the task's own metric, top-1,
    mAP, mIoU or OKS AP, as `eval` computes it), the float original measured once; None without
    labelled data or for an embedding extractor (no task metric)."""
    if p.eval_data is None:
        return None
    if embedding is not None:
        say("an embedding extractor has no task metric: --eval measures agreement only")
        return None
    job = p.job
    own = p.source.metadata()
    written = _labels(p, cal)  # the sidecar's: `eval` reads them for the int8 model and its source
    labels = written or own.labels  # without them, `eval` runs the float source with its own
    meta = ModelMeta(labels=labels, mean=job.mean, std=job.std, ultralytics_task=own.ultralytics_task,
                     decode=job.decode)  # one decode for both, the one the sidecar records
    say(f"measuring float and int8 on {p.eval_data.describe()}")
    engine = engine_for(job.model, model, meta)
    engine.close = lambda: None  # the float model is closed once, by `run`
    with _timed(p.times, "--eval: the float model on labelled data"):
        return TaskMetric(bind_float(engine, meta, labels, job.mean, job.std), p.eval_data,
                          _int8_meta(p, written))


def _int8_meta(p: Prepared, labels: Optional[dict]):
    """What the written model's sidecar will say about opening it (labels, preprocessing, the
    JPEG decode, a YOLO export's layout): each int8 file `eval`'s flow measures opens with it."""
    job = p.job
    return ModelMeta(labels=labels, mean=job.mean, std=job.std, task=p.source.task,
                     decode=job.decode, extra=p.source.sidecar_layout())


def _labels(p: Prepared, cal) -> Optional[dict]:
    """The written model's labels (its sidecar's): --labels, else the names the model carries
    (a YOLO export's), else the class folders' names."""
    if p.job.labels:
        return p.job.labels
    own = p.source.labels()
    if own is not None:
        return own
    return {i: n for i, n in enumerate(cal.class_names)} if cal.class_names else None


def _layer_report(p: Prepared, model: FloatModel, saved: str, calibration, q, say: Say) -> LayerReport:
    say(f"measuring each layer's quantization error on {min(len(calibration), 32)} image(s)")
    layers = layer_report(saved, calibration, q.model, q.flatbuffer, model.layer_names)
    mark_silent(layers, silent_layers(q.floored, model.layer_names))
    out = report_path(p.job.output)
    doc = {"model": str(p.job.output), "source": str(p.job.model), "samples": min(len(calibration), 32),
           "layers": layers}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    result: LayerReport = {"json": str(out), "plot": None, "layers": layers}
    try:
        from edgeapp.sinks.quant_plot import plot_layers

        result["plot"] = str(plot_layers(layers, report_plot_path(p.job.output),
                                         f"{p.job.model.name}: SQNR float vs int8 per layer"))
    except MissingDependency as e:
        say(f"report plot skipped: {e}")
        result["plot_skipped"] = str(e)
    return result


def _sidecar(p: Prepared, tflite, cal, report: ConvertReport, say: Say) -> tuple:
    """The task by the outputs, and the sidecar X.json: labels, preprocessing, agreement."""
    job = p.job
    shapes = [t.shape for t in tflite.output_tensors]
    if p.source.task is not None:  # the format fixes its task (a YOLO export), and names its classes
        task, label_map = p.source.task, _labels(p, cal)
    elif report.get("embedding_depth") is not None:  # features: the folders name no outputs
        task, label_map = EMBED_TASK, job.labels
    else:
        task = guess_from(shapes, [op.op for op in tflite.operators])  # what it is for, when known
        label_map = _labels(p, cal)
    if task is not None and task != EMBED_TASK:
        warning = kind(task).labels_warning(label_map, shapes,
                                            "--labels" if job.labels else "the class folders")
        if warning:
            say(f"warning: {warning}")
    agreement = {k: v for k, v in report["agreement_detail"].items()}
    extra = {"source": source_entry(job.model, job.output), "agreement": agreement}
    extra.update(p.source.sidecar_layout())
    if report.get("eval"):
        ev = report["eval"]
        extra["eval"] = {"data": ev["data"], "float": ev["float"]["metrics"],
                         "int8": ev["int8"]["metrics"], "drop": ev["drop"]}
    if report.get("equalization"):
        extra["equalization"] = report["equalization"]
    if report.get("ranges"):
        extra["ranges"] = report["ranges"]
    if report.get("max_drop"):
        extra["max_drop"] = report["max_drop"]
    sidecar = write_sidecar(job.output, ModelMeta(labels=label_map, mean=job.mean, std=job.std, task=task,
                                                  decode=job.decode, extra=extra))
    return task, str(sidecar)
