"""`convert` step by step: checks that need no TensorFlow first (exit 2/4/6/7 in a second), then
the float model, quantization, agreement on held-out images, the per-layer report, the sidecar.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from edgeapp.core.naming import convert_log_path, report_path, report_plot_path
from edgeapp.errors import MissingDependency, UsageError
from edgeapp.flows.convert import source_format
from edgeapp.flows.convert.base import FloatModel, Progress, no_progress
from edgeapp.flows.convert.data import (
    Sources,
    check_output,
    find_sources,
    load_dataset,
    make_output_folder,
    normalize,
    split_held_out,
)

Say = Callable[[str], None]


@dataclass
class ConvertJob:
    """What the user asked for, as `convert`'s options say it."""

    model: Path
    output: Path
    calibration: Path
    calibration_size: int = 300
    val: int = 50  # held-out calibration images for measuring agreement (0: none held out)
    eval_dir: Optional[Path] = None  # a separate folder instead of the held-out images
    io: str = "uint8"
    mean: float = 0.0
    std: float = 255.0
    labels: Optional[dict] = None  # --labels, stored with the model
    val_labels: Optional[dict] = None  # --val-labels: the model's classes, to name folders' indices
    input_size: Optional[tuple] = None  # --input-size H, W for symbolic ONNX dims
    report: bool = False


@dataclass
class Prepared:
    """Everything checked before TensorFlow loads."""

    job: ConvertJob
    format: str  # "keras" or "onnx"
    calibration: Sources
    held_out: Optional[Sources]
    onnx: object = None  # the parsed ModelProto
    onnx_input: object = None  # onnx_graph.OnnxInput
    notes: list = field(default_factory=list)


def prepare(job: ConvertJob) -> Prepared:
    """Paths, the model's format, and for ONNX the whole graph check: all before TensorFlow."""
    if job.output.suffix.lower() != ".tflite":
        raise UsageError(f"--output {job.output}: use a .tflite file name")
    check_output(job.output)
    fmt = source_format(job.model)
    found = find_sources(job.calibration, "--calibration")
    held = find_sources(job.eval_dir, "--eval") if job.eval_dir is not None else None
    notes = []
    if held is None:
        total = len(found.paths)
        found, held = split_held_out(found, job.calibration_size, job.val)
        kept = len(held.paths) if held is not None else 0
        if kept < job.val:
            notes.append(f"--val {job.val}: {kept} of the {total} image(s) held out to measure "
                         "agreement (at most a fifth, so that calibration keeps most); --eval DIR "
                         "measures on a folder of its own")
    prepared = Prepared(job, fmt, found, held, notes=notes)
    if fmt == "onnx":
        from edgeapp.flows.convert import onnx_graph

        onnx_graph.onnx2tf_ops_folder()  # the extra is installed (exit 7 otherwise)
        model = onnx_graph.read_onnx(job.model)
        prepared.onnx_input = onnx_graph.image_input(model, job.input_size, job.model)
        onnx_graph.refuse_unmappable(model, job.model)
        prepared.onnx = model
    elif job.input_size is not None:
        raise UsageError("--input-size is for ONNX models with symbolic height/width")
    return prepared


def run(p: Prepared, say: Say, progress: Progress = no_progress) -> dict:
    """Convert, write, measure; returns the report (`convert --format json` prints it)."""
    from edgeapp.flows.convert.quantize import exported, quantize

    job = p.job
    for note in p.notes:
        say(note)
    model, cal = _float_model_and_calibration(p, say, progress)
    try:
        calibration = normalize(cal, job.mean, job.std)
        say(f"calibrating on {len(cal.x)} image(s), input {'x'.join(map(str, model.input_shape))}")
        with exported(model) as saved:
            with progress(len(calibration), "calibrating") as advance:
                q = quantize(saved, calibration, job.output, job.io, progress=advance)
            report = _report_base(p, model, q, len(cal.x))
            embedding = _embedding_depth(p, q.model, cal)
            if embedding is not None:
                report["embedding_depth"] = embedding
            report["agreement_detail"] = _agreement(p, model, cal, say, class_scores=embedding is None)
            report.update({k: report["agreement_detail"][k] for k in (
                "agreement", "samples", "float_accuracy", "int8_accuracy", "float_top5", "int8_top5")})
            if job.report:
                report["report"] = _layer_report(p, model, saved, calibration, q, say)
    finally:
        model.close()
    report["task"], report["sidecar"] = _sidecar(p, q.model, cal, report, say)
    return report


def _float_model_and_calibration(p: Prepared, say: Say, progress: Progress) -> tuple:
    job = p.job
    if p.format == "keras":
        from edgeapp.flows.convert.keras import load_keras

        say(f"loading {job.model} (TensorFlow)")
        model = load_keras(job.model)
        h, w, c = model.input_shape
        return model, load_dataset(p.calibration, (w, h), c, job.calibration_size, say=say)
    from edgeapp.flows.convert.onnx import load_onnx

    inp = p.onnx_input
    cal = load_dataset(p.calibration, (inp.width, inp.height), inp.channels, job.calibration_size, say=say)
    make_output_folder(job.output)  # for the log
    log = convert_log_path(job.output)
    say(f"converting {job.model} with onnx2tf (log: {log})")
    model = load_onnx(p.onnx, inp, normalize(cal, job.mean, job.std), log, progress)
    return model, cal


def _report_base(p: Prepared, model: FloatModel, q, samples: int) -> dict:
    job, tflite = p.job, q.model
    return {"model": str(job.output), "source": str(job.model), "source_format": p.format,
            "io": job.io, "size_bytes": tflite.size, "input_shape": list(tflite.input_tensors[0].shape),
            "calibration_samples": samples,
            "notes": list(model.notes) + [f"{n} (same int8 result; compiler 16 knows it)" for n in q.swapped],
            "ops": dict(Counter(op.op for op in tflite.operators).most_common()),
            "op_versions": {op.op: op.version for op in tflite.operators}}


def _embedding_depth(p: Prepared, tflite, cal) -> Optional[int]:
    """D when the written model is an embedding extractor (core/embedding.py), whose outputs are
    features, not class scores: no top-1 against the class folders, no labels for them."""
    from edgeapp.core.embedding import embedding_output

    names = p.job.labels or p.job.val_labels
    count = len(names) if names else (len(cal.class_names) if cal.class_names else None)
    return embedding_output(tflite, count)


def _agreement(p: Prepared, model: FloatModel, cal, say: Say, class_scores: bool = True) -> dict:
    from edgeapp.flows.convert.agreement import measure, truth_labels

    job = p.job
    h, w, c = model.input_shape
    if p.held_out is not None:
        data = load_dataset(p.held_out, (w, h), c, None, seed=1, say=say)
        source = f"--eval {job.eval_dir}" if job.eval_dir is not None else "held-out calibration images"
    else:
        data, source = cal, "the calibration images (none held out)"
    labels = truth_labels(data, job.val_labels or job.labels)
    return measure(job.output, model, data, job.mean, job.std, source, labels, class_scores)


def _layer_report(p: Prepared, model: FloatModel, saved: str, calibration, q, say: Say) -> dict:
    from edgeapp.flows.convert.report import layer_report

    say(f"measuring each layer's quantization error on {min(len(calibration), 32)} image(s)")
    layers = layer_report(saved, calibration, q.model, q.flatbuffer, model.layer_names)
    out = report_path(p.job.output)
    doc = {"model": str(p.job.output), "source": str(p.job.model), "samples": min(len(calibration), 32),
           "layers": layers}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    result = {"json": str(out), "plot": None, "layers": layers}
    try:
        from edgeapp.sinks.quant_plot import plot_layers

        result["plot"] = str(plot_layers(layers, report_plot_path(p.job.output),
                                         f"{p.job.model.name}: SQNR float vs int8 per layer"))
    except MissingDependency as e:
        say(f"report plot skipped: {e}")
        result["plot_skipped"] = str(e)
    return result


def _sidecar(p: Prepared, tflite, cal, report: dict, say: Say) -> tuple:
    """The task by the outputs, and the sidecar X.json: labels, preprocessing, agreement."""
    from edgeapp.core.embedding import EMBED_TASK
    from edgeapp.core.meta import ModelMeta, write_sidecar
    from edgeapp.tasks import guess_from, kind

    job = p.job
    names = cal.class_names
    shapes = [t.shape for t in tflite.output_tensors]
    if report.get("embedding_depth") is not None:  # features: the folders name no outputs
        task, label_map = EMBED_TASK, job.labels
    else:
        task = guess_from(shapes, [op.op for op in tflite.operators])  # what it is for, when known
        label_map = job.labels or ({i: n for i, n in enumerate(names)} if names else None)
    if task is not None and task != EMBED_TASK:
        warning = kind(task).labels_warning(label_map, shapes,
                                            "--labels" if job.labels else "the class folders")
        if warning:
            say(f"warning: {warning}")
    agreement = {k: v for k, v in report["agreement_detail"].items()}
    sidecar = write_sidecar(job.output, ModelMeta(labels=label_map, mean=job.mean, std=job.std, task=task,
                                                  extra={"source": str(job.model), "agreement": agreement}))
    return task, str(sidecar)
