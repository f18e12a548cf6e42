"""`edgeapp convert`: a Keras model to a full-integer int8 TFLite model, with a report."""

import json
from collections import Counter
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from typing_extensions import Annotated

from edgeapp.cli.options import ReportFormat, ReportFormatOpt, cli_errors, finite, progress_bar, say
from edgeapp.core.units import format_bytes

app = typer.Typer()


class IOType(str, Enum):
    uint8 = "uint8"
    int8 = "int8"
    float32 = "float32"


@app.command("convert")
@cli_errors
def convert_command(
    model: Annotated[Path, typer.Argument(help="Keras model: .keras, .h5, or a SavedModel folder.",
                                          metavar="MODEL", show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", metavar="OUT.tflite",
                                         help="The .tflite file to write.", show_default=False)],
    calibration: Annotated[Path, typer.Option(
        "--calibration", "-c", help="Calibration images: a folder (sub-folders = classes) or an "
        ".npy array (N,H,W,C) of uint8 pixels, or of float model inputs.", show_default=False)],
    samples: Annotated[int, typer.Option("--samples", "-n", min=1,
                                         help="Calibration images to use (random subset).")] = 300,
    io: Annotated[IOType, typer.Option("--io", help="Input/output tensor type. uint8 is what "
                                                    "Coral's models and examples use.")] = IOType.uint8,
    mean: Annotated[float, typer.Option(
        "--mean", help="Your float model takes (pixel − mean)/std. Default: [0, 1] inputs.")] = 0.0,
    std: Annotated[float, typer.Option("--std", help="See --mean (127.5/127.5 for [-1, 1]).")] = 255.0,
    eval_dir: Annotated[Optional[Path], typer.Option(
        "--eval", help="Folder with one sub-folder per class: report float and int8 accuracy.",
        show_default=False)] = None,
    labels: Annotated[Optional[Path], typer.Option(
        "--labels", "-l", help="Labels file to store with the model (default: class folder names).",
        show_default=False)] = None,
    fmt: ReportFormatOpt = ReportFormat.table,
    compile_: Annotated[bool, typer.Option(
        "--compile", help="Then compile it for the Edge TPU with edgetpu_compiler, when installed "
                          "(x86-64 Linux): writes OUT_edgetpu.tflite beside OUT.tflite.")] = False,
    compiler: Annotated[Optional[str], typer.Option(
        "--compiler", help="The edgetpu_compiler executable for --compile (default: "
                           "$EDGETPU_COMPILER, else PATH).", show_default=False)] = None,
) -> None:
    """Quantize a Keras model to full-integer int8 TFLite, calibrated on your images.

    Writes OUT.tflite and OUT.json (labels and preprocessing, read by classify), then reports
    float vs int8 agreement, size, operators and the `edgeapp check` verdict (what will run on
    the Edge TPU). Needs TensorFlow: pip install 'edgeapp[convert]'.
    """
    from edgeapp.core.meta import ModelMeta, write_sidecar
    from edgeapp.flows import convert as converter

    given_labels = _check_before_tensorflow(output, calibration, eval_dir, labels, mean, std)
    say(f"loading {model} (TensorFlow)")
    float_model = converter.load_float_model(model)
    h, w, c = float_model.input_shape
    cal = converter.load_dataset(calibration, (w, h), c, samples)
    evaluation = converter.load_dataset(eval_dir, (w, h), c, None, seed=1) if eval_dir else cal
    say(f"calibrating on {len(cal.x)} sample(s), input {h}x{w}x{c}")
    with progress_bar(len(cal.x), "calibrating") as advance:
        tflite = converter.quantize(float_model, converter.normalize(cal, mean, std), output, io.value,
                                    progress=advance)

    names = evaluation.class_names or cal.class_names
    label_map = given_labels or ({i: n for i, n in enumerate(names)} if names else None)
    task = _task_of(tflite, label_map, labels)
    sidecar = write_sidecar(output, ModelMeta(labels=label_map, mean=mean, std=std, task=task,
                                              extra={"source": str(model)}))
    report = converter.evaluate(output, float_model, evaluation, mean, std)
    report.update(model=str(output), source=str(model), sidecar=str(sidecar), io=io.value,
                  size_bytes=tflite.size, input_shape=list(tflite.input_tensors[0].shape),
                  calibration_samples=len(cal.x),
                  ops=dict(Counter(op.op for op in tflite.operators).most_common()))
    report["task"] = task
    if task == "classify" and report["agreement"] is not None and report["agreement"] < 0.9:
        say(f"warning: int8 agrees with float on only {report['agreement']:.1%} of samples; "
            "calibrate with more representative images or check --mean/--std")
    code = finish_report(output, report, fmt.value, compile_, compiler)
    if code:
        raise typer.Exit(code)


def _check_before_tensorflow(output: Path, calibration: Path, eval_dir: Optional[Path],
                             labels: Optional[Path], mean: float, std: float) -> Optional[dict]:
    """Everything that can be checked without TensorFlow, before its seconds of loading; the
    labels given with --labels."""
    from edgeapp.core.labels import read_labels
    from edgeapp.errors import UsageError
    from edgeapp.flows import convert as converter

    finite("--mean", mean)
    finite("--std", std)
    if std <= 0:
        raise UsageError(f"--std must be greater than 0, not {std:g} (the model takes "
                         "(pixel - mean) / std)")
    if output.suffix.lower() != ".tflite":
        raise UsageError(f"--output {output}: use a .tflite file name")
    converter.check_output(output)
    converter.check_dataset_source(calibration, "--calibration")
    if eval_dir is not None:
        converter.check_dataset_source(eval_dir, "--eval")
    return read_labels(labels) if labels else None


def _task_of(tflite, label_map: Optional[dict], labels: Optional[Path]) -> str:
    """The converted model's task by its outputs; for a classifier, labels that do not fit its
    class vector are said."""
    from edgeapp.core.labels import label_count_warning
    from edgeapp.tasks import guess_from

    task = guess_from([t.shape for t in tflite.output_tensors],
                      [op.op for op in tflite.operators]) or "classify"
    if task == "classify":  # keypoints and pixel maps have no one-label-per-output rule
        classes = 1
        for d in tflite.output_tensors[0].shape:
            classes *= int(d)
        warning = label_count_warning(label_map, classes, f"--labels {labels}" if labels
                                      else "the class folders")
        if warning:
            say(f"warning: {warning}")
    return task


def finish_report(output: Path, report: dict, fmt: str, compile_: bool = False,
                  compiler: Optional[str] = None) -> int:
    """Add the `check` verdict (and the --compile result) to the report, print it, and return
    the exit code: 0, or the compile step's code when it ran and did not map everything."""
    from edgeapp.cli.check import verdict_line
    from edgeapp.errors import MissingDependency
    from edgeapp.flows.check import check_file

    checked = check_file(output)
    report["edgetpu_check"] = checked.summary
    report["edgetpu_verdict"] = verdict_line(checked)
    compiled = None
    if compile_:
        from edgeapp.flows.compile import compile_file

        try:  # the same use case as `edgeapp compile`, with its checks
            compiled = compile_file(output, out_dir=output.parent, compiler=compiler, log=say)
        except MissingDependency as e:
            say(f"--compile skipped: {e}")
            report["compile"] = {"skipped": str(e)}
        else:
            report["compile"] = compiled.to_json()
    if fmt == ReportFormat.json.value:
        typer.echo(json.dumps(report, indent=2))
        say(f"Edge TPU check: {report['edgetpu_verdict']}")
    else:
        _print_report(report)
    if compiled is None:
        return 0
    from edgeapp.cli.compile import render

    if fmt != ReportFormat.json.value:
        typer.echo("")
        typer.echo(render(compiled))
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
            ("calibration", f"{r['calibration_samples']} sample(s)"),
            ("top-1 agreement", f"{r['agreement']:.2%} of {r['samples']} (float vs int8)")]
    if r["float_accuracy"] is not None:
        rows.append(("accuracy", f"float {r['float_accuracy']:.4f}, int8 {r['int8_accuracy']:.4f}"))
    rows.append(("operators", ", ".join(f"{k}×{v}" for k, v in r["ops"].items())))
    if r.get("edgetpu_verdict"):
        rows.append(("Edge TPU check", r["edgetpu_verdict"]))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        typer.echo(f"{k:<{width}}  {v}")
