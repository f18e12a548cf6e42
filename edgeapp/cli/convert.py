"""`edgeapp convert`: a Keras or ONNX model to a full-integer int8 TFLite model, with a report."""

import json
import math
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.check import verdict_line
from edgeapp.cli.compile import render_compile
from edgeapp.cli.options import (
    Decode,
    ReportFormat,
    ReportFormatOpt,
    finite,
    progress_bar,
    say,
)
from edgeapp.core.units import format_bytes
from edgeapp.errors import ExitCode, MissingDependency, UsageError

app = typer.Typer()


class IOType(str, Enum):
    uint8 = "uint8"
    int8 = "int8"
    float32 = "float32"


ModelArg = Annotated[Path, typer.Argument(
    help="Keras (.keras, .h5, SavedModel folder) or ONNX (.onnx) model.", metavar="MODEL", show_default=False)]
OutputOpt = Annotated[Path, typer.Option("--output", "-o", metavar="OUT.tflite", help="The .tflite file to write.",
                                         show_default=False)]
CalibrationOpt = Annotated[Path, typer.Option(
    "--calibration", "-c", show_default=False, help="Calibration images: a folder (sub-folders = classes), a "
    "quoted glob, or an .npy array (N,H,W,C) of uint8 pixels or of float model inputs.")]
SizeOpt = Annotated[int, typer.Option("--calibration-size", "--samples", "-n", min=1,
                                      help="Calibration images to use (a random subset).")]
ValOpt = Annotated[Optional[int], typer.Option(
    "--val", min=0, show_default=False, help="Calibration images held out (never calibrated on) to measure "
    "float vs int8 agreement; at most a fifth of them (default 50). 0: measure on the calibration images.")]
IOOpt = Annotated[IOType, typer.Option("--io", help="Input/output tensor type. uint8 is what Coral's models "
                                                    "and examples use.")]
MeanOpt = Annotated[float, typer.Option(
    "--mean", help="Your float model takes (pixel − mean)/std. Default: [0, 1] inputs.")]
StdOpt = Annotated[Optional[float], typer.Option(
    "--std", help="See --mean (127.5/127.5 for [-1, 1]). Default 255.", show_default=False)]
ScaleOpt = Annotated[Optional[str], typer.Option(
    "--scale", metavar="S", help="Instead of --std: the model takes (pixel − mean) × S, e.g. 1/255.",
    show_default=False)]
EvalOpt = Annotated[Optional[Path], typer.Option(
    "--eval", help="Labelled data to measure float vs int8 on, in the task's own metric (as `edgeapp "
    "eval` reads it: class folders or a path,label CSV, a COCO JSON or a YOLO dataset, images and "
    "masks, a COCO keypoints JSON); stored in the sidecar. Class folders or loose images also "
    "replace the held-out calibration images for agreement.", show_default=False)]
LabelsOpt = Annotated[Optional[Path], typer.Option(
    "--labels", "-l", help="Labels file to store with the model (default: class folder names).",
    show_default=False)]
ValLabelsOpt = Annotated[Optional[Path], typer.Option(
    "--val-labels", help="The model's classes in index order (a labels file): class folders are matched "
    "to it by name for top-1/top-5 accuracy (default: --labels, else the sorted folder order).",
    show_default=False)]
InputSizeOpt = Annotated[Optional[str], typer.Option(
    "--input-size", metavar="HxW", help="Height and width for an ONNX model whose input size is symbolic.",
    show_default=False)]
ConvertDecodeOpt = Annotated[Decode, typer.Option(
    "--decode", help="How calibration and agreement images (JPEGs) are decoded: full, or scaled "
                     "as the image commands' --decode scaled; recorded in OUT.json, and the image "
                     "commands then decode the model's inputs the same way.")]
ReportOpt = Annotated[bool, typer.Option(
    "--report", help="Per layer: float vs int8 SQNR on the calibration images, worst first, with the likely "
    "cause and fix; writes OUT.report.json and OUT.report.png.")]
MaxDropOpt = Annotated[Optional[float], typer.Option(
    "--max-drop", metavar="X", min=0.0, max=1.0, show_default=False,
    help="The most the int8 model may lose, as a fraction (0.005: half a point) of the task's metric as "
    "`edgeapp eval` computes it on --eval's labelled data (top-1, mAP50-95, mIoU, OKS AP); without labels, "
    "of box agreement (a YOLO export: mAP against the float model's boxes), else of top-1 accuracy (class "
    "folders), else of top-1 agreement with the float model, on the held-out images. When plain int8 loses "
    "more, fixes are tried cheapest first (per-channel weights, more calibration images, ranges re-measured "
    "and clipped, the last layers in float on the CPU) and the first within it is kept; exit 14 when none "
    "is (the best is written).")]
MinTpuOpt = Annotated[float, typer.Option(
    "--min-tpu", metavar="F", min=0.0, max=1.0,
    help="With --max-drop: the share of the model's MACs a trial must leave on the Edge TPU (0.9: 90%; "
    "at most what the plain conversion maps). A trial within the budget below it is not kept: exit 14 "
    "with the best trial above it written, and the trade said. 0: any share.")]
CompileOpt = Annotated[bool, typer.Option(
    "--compile", help="Then compile it for the Edge TPU with edgetpu_compiler, when installed (`edgeapp "
    "compiler install`; natively on x86-64 Linux, else under QEMU or Docker): writes OUT_edgetpu.tflite beside "
    "OUT.tflite.")]
CompilerOpt = Annotated[Optional[str], typer.Option(
    "--compiler", help="The edgetpu_compiler executable for --compile (default: $EDGETPU_COMPILER, else "
    "PATH, else the one `edgeapp compiler install` installed).",
    show_default=False)]


@app.command("convert")
def convert_command(model: ModelArg, output: OutputOpt, calibration: CalibrationOpt, samples: SizeOpt = 300,
                    val: ValOpt = None, io: IOOpt = IOType.uint8, mean: MeanOpt = 0.0, std: StdOpt = None,
                    scale: ScaleOpt = None, eval_dir: EvalOpt = None, labels: LabelsOpt = None,
                    val_labels: ValLabelsOpt = None, input_size: InputSizeOpt = None, report: ReportOpt = False,
                    max_drop: MaxDropOpt = None, fmt: ReportFormatOpt = ReportFormat.table,
                    compile_: CompileOpt = False, compiler: CompilerOpt = None,
                    decode: ConvertDecodeOpt = Decode.full, min_tpu: MinTpuOpt = 0.9) -> None:
    """Quantize a Keras or ONNX model to full-integer int8 TFLite, calibrated on your images.

    Writes OUT.tflite and OUT.json (labels, preprocessing and the measured agreement, read by
    classify), then reports float vs int8 agreement on held-out images, size, operators and the
    `edgeapp check` verdict (what will run on the Edge TPU). Needs TensorFlow: pip install
    'edgeapp[convert]'; ONNX models also the onnx extra: pip install 'edgeapp[convert,onnx]'.
    """
    from edgeapp.core.labels import read_labels
    from edgeapp.flows.convert import job as convert_job

    job = convert_job.ConvertJob(
        model=model, output=output, calibration=calibration, calibration_size=samples, val=val,
        eval_dir=eval_dir, io=io.value, mean=finite("--mean", mean), std=_std(std, scale),
        labels=read_labels(labels) if labels else None,
        val_labels=read_labels(val_labels) if val_labels else None,
        input_size=parse_input_size(input_size), report=report, decode=decode.value, max_drop=max_drop,
        min_tpu=min_tpu)
    prepared = convert_job.prepare(job)  # everything checkable before TensorFlow loads
    result = convert_job.run(prepared, say, progress_bar)
    agreement = result.get("agreement")
    if agreement is not None and agreement < 0.9:  # top-1 agreement: measured for classifiers
        say(f"warning: int8 agrees with float on only {agreement:.1%} of samples; "
            "calibrate with more representative images or check --mean/--std")
    code = finish_report(output, result, fmt.value, compile_, compiler) or over_budget(result)
    if code:
        raise typer.Exit(code)


def over_budget(result: dict) -> int:
    """Exit 14 when --max-drop was asked and no trial met it (the best model is written)."""
    tuned = result.get("max_drop")
    if not tuned or tuned["met"]:
        return 0
    for t in tuned.get("traded") or []:
        say(f"warning: trial {t['trial']!r} keeps the loss within --max-drop {tuned['budget']:g} (drop "
            f"{t['drop'] * 100:+.2f} points) but leaves {t['macs_tpu_share'] or 0:.1%} of the MACs on the Edge "
            f"TPU, under --min-tpu {tuned['min_tpu']:g}: not kept (--min-tpu "
            f"{math.floor((t['macs_tpu_share'] or 0) * 100) / 100:g} takes it, slower)")
    say(f"error: no trial kept the loss within --max-drop {tuned['budget']:g} with {tuned['min_tpu']:.0%} of "
        f"the MACs on the Edge TPU; kept the best, {tuned['chosen']!r} ({result['model']})")
    return int(ExitCode.OVER_BUDGET)


def _std(std: Optional[float], scale: Optional[str]) -> float:
    """--std, or 1/--scale (a number or a fraction such as 1/255); never both."""
    if scale is not None:
        if std is not None:
            raise UsageError("give --std or --scale, not both (--scale S is --std 1/S)")
        try:
            num, _, den = scale.partition("/")
            value = float(num) / float(den) if den else float(num)
        except (ValueError, ZeroDivisionError):
            raise UsageError(f"--scale {scale!r}: give a number or a fraction, e.g. 1/255") from None
        finite("--scale", value)
        if value <= 0:
            raise UsageError(f"--scale must be greater than 0, not {scale}")
        std = 1.0 / value
    std = 255.0 if std is None else std
    finite("--std", std)
    if std <= 0:
        raise UsageError(f"--std must be greater than 0, not {std:g} (the model takes (pixel - mean) / std)")
    return std


def parse_input_size(text: Optional[str]) -> Optional[tuple]:
    """`224x224` (or `224,224`, or one number for a square) -> (height, width)."""
    if text is None:
        return None
    parts = text.lower().replace(",", "x").split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) == 1:
        dims = dims * 2
    if len(dims) != 2 or min(dims) <= 0:
        raise UsageError(f"--input-size {text!r}: give HxW, e.g. 224x224")
    return dims


def finish_report(output: Path, report: dict, fmt: str, compile_: bool = False,
                  compiler: Optional[str] = None) -> int:
    """Add the `check` verdict (and the --compile result) to the report, print it, and return
    the exit code: 0, or the compile step's code when it ran and did not map everything, or 7
    when --compile was asked for and there is no compiler (the model was converted, but a
    script must not take it for compiled)."""
    from edgeapp.flows.check import check_file, predicted_compiler

    version, why = predicted_compiler()  # as `edgeapp check` predicts: the installed compiler's
    checked = check_file(output, version)
    checked.summary["compiler_version_why"] = why
    report["edgetpu_check"] = checked.summary
    report["edgetpu_verdict"] = verdict_line(checked)
    compiled = missing = None
    if compile_:
        from edgeapp.flows.compile import compile_file

        try:  # the same use case as `edgeapp compile`, with its checks
            compiled = compile_file(output, out_dir=output.parent, compiler=compiler, log=say)
        except MissingDependency as e:
            missing = e
            report["compile"] = {"skipped": str(e)}
        else:
            report["compile"] = compiled.to_json()
    if fmt == ReportFormat.json.value:
        typer.echo(json.dumps(report, indent=2))
        say(f"Edge TPU check: {report['edgetpu_verdict']}")
    else:
        _print_report(report)
    if missing is not None:
        say(f"error: --compile: {output} was converted but not compiled: {missing}")
        return int(missing.exit_code)
    if compiled is None:
        return 0
    if fmt != ReportFormat.json.value:
        typer.echo("")
        typer.echo(render_compile(compiled))
    j = compiled.judgement
    for w in j.warnings:
        say(f"warning: {w}")
    for e in j.errors:
        say(f"error: {e}")
    return j.exit_code


def _print_report(r: dict) -> None:
    rows = [("model", f"{r['model']} ({format_bytes(r['size_bytes'])}, {r['io']} I/O, input "
                      f"{r['input_shape']})"),
            ("sidecar", r["sidecar"]),
            ("calibration", f"{r['calibration_samples']} sample(s)")]
    rows += [("note", n) for n in r.get("notes") or []]
    if r.get("embedding_depth") is not None:
        rows.append(("task", f"an embedding extractor ({r['embedding_depth']}-d feature vector, "
                             "from a global pooling): agreement is the outputs' cosine and SQNR; "
                             "`edgeapp retrain PHOTOS --base MODEL` puts a classifier on it"))
    detail = r.get("agreement_detail") or {}
    where = f" on {detail['measured_on']}" if detail.get("measured_on") else ""
    if r.get("agreement") is not None:
        rows.append(("top-1 agreement", f"{r['agreement']:.2%} of {r['samples']} (float vs int8{where})"))
    if r.get("float_accuracy") is not None:
        top5 = (f"; top-5 float {r['float_top5']:.4f}, int8 {r['int8_top5']:.4f}"
                if r.get("float_top5") is not None else "")
        rows.append(("accuracy", f"top-1 float {r['float_accuracy']:.4f}, int8 {r['int8_accuracy']:.4f}{top5}"))
    det = detail.get("detection")
    if det:
        rows.append(("detections", _detection_text(det)))
    if r.get("eval"):
        rows.append(("task metric", eval_line(r["eval"])))
    for o in detail.get("outputs") or []:
        sqnr = "identical" if o["sqnr_db"] is None else f"{o['sqnr_db']:.1f} dB"
        rows.append((f"output {o['name']}", f"cosine {o['cosine']:.4f} (min {o['cosine_min']:.4f}), SQNR {sqnr}"))
    rows.append(("operators", ", ".join(f"{k}×{v}" for k, v in r["ops"].items())))
    if r.get("max_drop"):
        t = r["max_drop"]
        chosen = next((x for x in t["trials"] if x["trial"] == t["chosen"]), {})
        drop = f"{chosen['drop'] * 100:+.2f} points of {t['metric']}" if chosen.get("drop") is not None else "?"
        rows.append(("--max-drop", f"kept {t['chosen']!r} ({drop}; budget {t['budget'] * 100:.2f}, "
                                   f"{'met' if t['met'] else 'NOT met'}) after {len(t['trials'])} trial(s)"))
    if r.get("edgetpu_verdict"):
        rows.append(("Edge TPU check", r["edgetpu_verdict"]))
    if r.get("times_s"):
        rows.append(("time", ", ".join(f"{k} {v:.1f} s" for k, v in r["times_s"].items())))
    if r.get("report"):
        plot = r["report"]["plot"] or (f"no plot ({r['report']['plot_skipped']})"
                                        if r["report"].get("plot_skipped") else None)
        rows.append(("layer report", f"{r['report']['json']}" + (f", {plot}" if plot else "")))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        typer.echo(f"{k:<{width}}  {v}")
    if r.get("report"):
        typer.echo("")
        typer.echo(render_layers(r["report"]["layers"]))


def _detection_text(d: dict) -> str:
    if d.get("map50_95") is None:
        return f"not measured: {d.get('note')}"
    return (f"int8 mAP50-95 {d['map50_95']:.4f}, mAP50 {d['map50']:.4f} against the float model's "
            f"{d['float_boxes']} box(es) on {d['samples']} {d['measured_on']}")


def eval_line(ev: dict) -> str:
    """`map float 0.6120, int8 0.5870 (drop 0.0250) on COCO instances JSON data.json`."""
    parts = [f"{k} float {ev['float']['metrics'][k]:.4f}, int8 {ev['int8']['metrics'][k]:.4f} "
             f"(drop {d:+.4f})" for k, d in ev["drop"].items()]
    return "; ".join(parts) + f" on {ev['data']['format']} {ev['data']['path']}"


def render_layers(layers: list, limit: int = 10) -> str:
    """The worst layers as a table: the output's SQNR with that layer quantized (what it adds over
    its inputs), its own SQNR, its range inflation (range / 99.99th percentile of |x|), op, name,
    and the cause and fix when one is found."""
    lines = [f"{'output dB':>9}  {'SQNR dB':>8}  {'range x':>7}  {'op':<18} layer"]
    for row in layers[:limit]:
        out = "" if row.get("output_sqnr_db") is None else f"{row['output_sqnr_db']:9.1f}"
        sqnr = "    inf" if row["sqnr_db"] is None else f"{row['sqnr_db']:8.1f}"
        inflation = "" if row.get("range_inflation") is None else f"{row['range_inflation']:7.1f}"
        name = row.get("source") or row["name"].split(";")[0]
        lines.append(f"{out:>9}  {sqnr:>8}  {inflation:>7}  {row['op']:<18} {name}")
        if row.get("cause"):
            lines.append(f"{'':>31}cause: {row['cause']}")
            lines.append(f"{'':>31}fix: {row['fix']}")
    if len(layers) > limit:
        lines.append(f"... {len(layers) - limit} more layer(s) in the JSON report")
    return "\n".join(lines)
