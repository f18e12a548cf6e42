"""`edgeapp classify`: images, folders and globs through a classification model."""

from pathlib import Path
from typing import List

import typer
from typing_extensions import Annotated

from edgeapp.cli.options import CpuKernels, CpuKernelsOpt
from edgeapp.cli.options import (ChunkSizeOpt, ClusterOpt, CpuModelOpt, DeviceOpt, LabelsOpt, MeanOpt,
                                 NoProbeOpt, OutputOpt, ResumeOpt, RuntimeOpt, ShipBytesOpt, StdOpt,
                                 ThreadsOpt, WorkersOpt, cluster_job, cli_errors, finite,
                                 decode_workers, open_runner, progress_bar, results_writer, say)
from edgeapp.errors import ExitCode
from edgeapp.flows.records import Format

app = typer.Typer()

CSV_COLUMNS = ["path", "rank", "id", "label", "score", "device", "model", "latency_ms", "error"]


@app.command("classify")
@cli_errors
def classify_command(
    ctx: typer.Context,
    model: Annotated[Path, typer.Argument(help="A .tflite model (uint8, int8 or float input), "
                                               "or its *_edgetpu.tflite build, or a Coral model's name "
                                               "(`edgeapp models list`).", show_default=False)],
    inputs: Annotated[List[str], typer.Argument(
        help="Image files, folders (recursive), globs, or - to read paths from stdin.",
        show_default=False)],
    labels: LabelsOpt = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="Classes per image.")] = 5,
    threshold: Annotated[float, typer.Option("--threshold", "-t",
                                             help="Minimum score to report.")] = 0.0,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: OutputOpt = None,
    resume: ResumeOpt = False,
    mean: MeanOpt = None,
    std: StdOpt = None,
    workers: WorkersOpt = None,
    fast_decode: Annotated[bool, typer.Option(
        "--fast-decode", help="Decode JPEGs at reduced scale (faster on large photos; scores "
                              "differ slightly from a full decode).")] = False,
    device: DeviceOpt = None,
    cpu_model: CpuModelOpt = None,
    threads: ThreadsOpt = None,
    cpu_kernels: CpuKernelsOpt = CpuKernels.fast,
    runtime: RuntimeOpt = None,
    no_probe: NoProbeOpt = False,
    cluster: ClusterOpt = None,
    ship_bytes: ShipBytesOpt = False,
    chunk_size: ChunkSizeOpt = 16,
) -> None:
    """Classify images on the Edge TPU, or on the CPU when none is usable.

    Results stream to stdout (or --output) as they are produced; a bad image gives an error
    record and the batch goes on (exit code 3 at the end).
    """
    finite("--threshold", threshold)
    finite("--mean", mean)
    finite("--std", std)

    from edgeapp.flows.batch import image_model, label_count_note, run_batch
    from edgeapp.hw.hostinfo import usable_cores
    from edgeapp.flows.inputs import expand_inputs
    from edgeapp.flows.tasks import classify_task

    paths = expand_inputs(inputs)
    if cluster:
        from edgeapp.flows.cluster import run_cluster

        job = cluster_job(ctx, "classify", model, device, cpu_model, runtime, threads, no_probe,
                          labels, mean, std, decode_workers(workers), fast_decode, top_k=top_k,
                          threshold=threshold)
        with results_writer(fmt, CSV_COLUMNS, _csv_rows, _table_line, output, resume,
                            (job.model, job.cpu_model)) as writer, \
                progress_bar(len(paths), "classify") as advance:
            stats = run_cluster(paths, job, writer, cluster, ship_bytes, chunk_size, advance)
        where = f"the cluster {cluster}"
    else:
        runner = open_runner(ctx, model, device, cpu_model, runtime, threads, no_probe,
                             cpu_kernels, cpu_replicas=usable_cores())
        with runner:  # its threads end however this ends
            engine = runner.engine
            loaded = image_model(engine, runner.meta_path, labels, mean, std, fast_decode)
            task = classify_task(loaded, top_k, threshold)
            note = label_count_note(loaded, labels)
            if note:
                say(f"warning: {note}")
            with results_writer(fmt, CSV_COLUMNS, _csv_rows, _table_line, output, resume,
                                (engine.model_path, engine.requested_model)) as writer, \
                    progress_bar(len(paths), "classify") as advance:
                stats = run_batch(paths, runner, task, writer, workers=decode_workers(workers),
                                  progress=advance)
            where = runner.label
    say("; ".join(stats.summary(where, output)))
    if stats.failed:
        raise typer.Exit(int(ExitCode.INPUTS_FAILED))


def _csv_rows(record: dict) -> List[dict]:
    base = {k: record.get(k) for k in ("path", "device", "model", "latency_ms", "error")}
    if not record["classes"]:
        return [base]
    return [{**base, "rank": r, **c} for r, c in enumerate(record["classes"], 1)]


def _table_line(record: dict) -> str:
    if record["error"]:
        return f"{record['path']}  ERROR: {record['error']}"
    shown = ", ".join(f"{c['label'] if c['label'] is not None else c['id']} {c['score']:.3f}"
                      for c in record["classes"]) or "(no class above threshold)"
    return f"{record['path']}  {shown}"
