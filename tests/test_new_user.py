"""What a new user hit (issue 24), each through the CLI as the user met it: numbers that crashed,
results files in the wrong format, a model written 0600, the suite writing into the user's
cache, two fallback lines, help texts, contradictions accepted, TensorFlow's chatter, Ctrl-C
without a word on resuming, ambiguous table lines, a file where a folder should be, models that
will not run, NaN images, a runtime that dies on every model, and the README's promises.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import typer
from conftest import CLASSES, ROOT, default_runtime, make_edgetpu_stand_in, tflite_schema
from test_models import env, published, registry_doc, server  # noqa: F401  (fixtures: model server)
from test_rough_edges import red_video

from edgeapp.errors import ExitCode

IMAGE_COMMANDS = ("classify", "detect", "pose", "segment")


def edgeapp(*args, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeapp", *map(str, args)], capture_output=True,
                          text=True, cwd=kw.pop("cwd", ROOT), env={**os.environ, **(env or {})}, **kw)


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("edgeapp: error:")]


# --- 1: --std 0 or negative ------------------------------------------------------------------------

@pytest.mark.parametrize("std", ["0", "-1", "-0.5"])
@pytest.mark.parametrize("command", IMAGE_COMMANDS + ("camera",))
def test_std_zero_or_negative_is_a_usage_error(cli, tiny_model, color_images, tmp_path, command, std):
    if command == "camera":
        args = ("camera", tiny_model, "--source", red_video(tmp_path / "v.avi", 3), "--no-display")
    else:
        args = (command, tiny_model, color_images["red"])
    r = cli(*args, "--std", std)
    assert r.exit_code == ExitCode.USAGE, r.stderr
    (line,) = error_lines(r.stderr)
    assert f"--std must be greater than 0, not {float(std):g}" in line
    assert "internal error" not in r.stderr and not r.stdout


# --- 2: the results format follows --output's extension ------------------------------------------

def test_output_extension_picks_the_format_and_resume_takes_it(cli, tiny_model, color_images, tmp_path):
    csv_out, jsonl_out = tmp_path / "results.csv", tmp_path / "results.jsonl"
    red, green, blue = (color_images[c] for c in ("red", "green", "blue"))
    r = cli("classify", tiny_model, red, green, "-o", csv_out)
    assert r.exit_code == 0, r.stderr
    assert csv_out.read_text().splitlines()[0].startswith("path,rank,id,label,score")
    r = cli("classify", tiny_model, red, green, blue, "-o", csv_out, "--resume")
    assert r.exit_code == 0, r.stderr
    assert "2 already done (--resume)" in r.stderr  # a complete CSV keeps its last image
    rows = csv_out.read_text().splitlines()
    names = [Path(row.split(",")[0]).name for row in rows[1:]]
    assert rows.count(rows[0]) == 1 and names == ["red.png"] * 3 + ["green.png"] * 3 + ["blue.png"] * 3

    r = cli("classify", tiny_model, color_images["blue"], "-o", jsonl_out)
    assert r.exit_code == 0, r.stderr
    (record,) = map(json.loads, jsonl_out.read_text().splitlines())
    assert record["classes"][0]["label"] == "blue"

    r = cli("classify", tiny_model, color_images["blue"], "-o", tmp_path / "x.csv", "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    assert "warning: --format jsonl into" in r.stderr and "extension says csv" in r.stderr
    json.loads((tmp_path / "x.csv").read_text())  # as asked: JSON lines


# --- 3: convert writes the model with the user's umask, and 15: without TensorFlow's chatter -----

def test_convert_honours_the_umask_and_keeps_tensorflow_quiet(tiny_keras, tiny_data, tmp_path):
    out = tmp_path / "m.tflite"
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "convert", str(tiny_keras), "-o", str(out),
                           "--calibration", str(tiny_data / "train"), "--samples", "10"],
                          capture_output=True, text=True, cwd=ROOT, env=environ,
                          preexec_fn=lambda: os.umask(0o027))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.stat().st_mode & 0o777 == 0o640  # 0666 & ~027; mkstemp alone gave 0600
    assert out.with_suffix(".json").stat().st_mode & 0o777 == 0o640
    for noise in ("absl::InitializeLog", "port.cc", "oneDNN", "fully_quantize"):
        assert noise not in proc.stderr, proc.stderr


def test_the_runtime_tensorflow_says_nothing_of_its_own(tiny_model, color_images):
    pytest.importorskip("tensorflow")
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    r = subprocess.run([sys.executable, "-m", "edgeapp", "classify", "--runtime", "tensorflow",
                        str(tiny_model), str(color_images["red"]), "-k", "1"],
                       capture_output=True, text=True, cwd=ROOT, env=environ)
    assert r.returncode == 0, r.stderr
    assert "red" in r.stdout
    assert [ln for ln in r.stderr.splitlines() if not ln.startswith("edgeapp: ")] == []


# --- 4: the suite's cache and Keras home are temporary ------------------------------------------

def test_a_cli_run_leaves_the_users_cache_alone(tiny_model, color_images):
    from edgeapp.core.userdirs import cache_dir

    real = cache_dir({k: v for k, v in os.environ.items() if k != "EDGEAPP_CACHE_DIR"}) / "probe.json"
    ours = Path(os.environ["EDGEAPP_CACHE_DIR"])
    assert ours != real.parent and Path(os.environ["KERAS_HOME"]).parent == ours.parent

    def stamp():
        return real.stat().st_mtime_ns if real.exists() else None

    before = stamp()
    r = edgeapp("classify", tiny_model, color_images["red"])
    assert r.returncode == 0, r.stderr
    assert stamp() == before
    assert str(Path(tiny_model).resolve()) in (ours / "probe.json").read_text()


# --- 6: one fallback line for a Coral model by name ----------------------------------------------

def test_a_model_by_name_says_once_that_it_runs_on_the_cpu(cli, env, color_images):  # noqa: F811
    r = cli("classify", "colors", color_images["red"], "-k", "1")
    assert r.exit_code == 0, r.stderr
    on_cpu = [ln for ln in r.stderr.splitlines() if "on CPU" in ln]
    assert on_cpu == ["edgeapp: no Edge TPU found: running colors.tflite (Coral's CPU build of "
                      "colors) on CPU"], r.stderr


# --- 7: help texts ---------------------------------------------------------------------------------

def commands() -> list[tuple[str, ...]]:
    from edgeapp.cli.app import app

    groups = [g for g in app.registered_groups if g.typer_instance.info.name]
    singles = [(info.name,) for g in app.registered_groups if not g.typer_instance.info.name
               for info in g.typer_instance.registered_commands]
    nested = [(g.typer_instance.info.name, info.name) for g in groups
              for info in g.typer_instance.registered_commands]
    return [()] + singles + [(g.typer_instance.info.name,) for g in groups] + nested


NOISE = re.compile(r"\\|<?list\[|<class |typing\.|NoneType|Optional\[|\{[A-Za-z_]+\}|PosixPath")


@pytest.mark.parametrize("command", commands(), ids=lambda c: " ".join(c) or "edgeapp")
def test_every_help_is_free_of_backslashes_and_python_noise(cli, command):
    r = cli(*command, "--help")
    assert r.exit_code == 0, r.stderr
    assert "Usage:" in r.stdout
    noise = [ln for ln in r.stdout.splitlines() if NOISE.search(ln)]
    assert noise == [], noise


def test_every_command_is_in_the_help_scan():
    scanned = {" ".join(c) for c in commands()}
    assert {"classify", "detect", "pose", "segment", "camera", "convert", "bench", "models list",
            "models pull", "models path", "doctor", "devices", "check", "compile"} <= scanned


def test_usage_lines_name_the_arguments_plainly(cli):
    r = cli("classify", "--help")
    assert "classify [OPTIONS] MODEL INPUTS..." in r.stdout
    assert re.search(r"^  INPUTS\.\.\.\s+Image files", r.stdout, re.M), r.stdout
    assert "models pull [OPTIONS] NAMES..." in cli("models", "pull", "--help").stdout


@pytest.mark.parametrize("args, expected", [
    (("classify", "m", "x", "--format", "xml"), "'xml' is not one of table, jsonl, csv"),
    (("--runtime", "foo", "classify", "m", "x"),
     "'foo' is not one of ai-edge-litert, tflite-runtime, tensorflow"),
    (("models", "list", "--task", "count"), "'count' is not one of classify, detect, pose, segment"),
    (("classify", "m", "x", "--cpu-kernels", "slow"), "'slow' is not one of fast, reference"),
])
def test_a_bad_choice_names_the_choices_plainly(cli, args, expected):
    r = cli(*args)
    assert r.exit_code == ExitCode.USAGE
    assert expected in r.stderr and "Value error" not in r.stderr, r.stderr


def test_threads_help_says_what_the_readme_says(cli):
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "without `--threads`, one one-thread interpreter per core runs side by side" in readme
    for command in IMAGE_COMMANDS:
        text = " ".join(cli(command, "--help").stdout.split())
        assert "Default: one single-thread interpreter per usable core" in text, command
        assert "the runtime's" not in text.split("--threads", 1)[1].split("--cpu-kernels")[0]


def test_serve_needs_its_address_as_the_help_says(cli, tiny_model):
    r = cli("camera", tiny_model, "--serve")
    assert r.exit_code == ExitCode.USAGE and "requires an argument" in r.stderr
    text = " ".join(cli("camera", "--help").stdout.split())
    serve = text.split("--serve ", 1)[1].split("--serve-fps")[0]
    assert "ADDRESS is required" in serve and "PORT to 8080" not in serve


# --- 10 and 19: models list ------------------------------------------------------------------------

def test_a_shared_labels_file_makes_no_model_cached(cli, env):  # noqa: F811
    assert cli("models", "pull", "colors_pipeline2").exit_code == 0  # its labels are colors' too
    r = cli("models", "list", "--format", "json")
    models = {m["name"]: m for m in json.loads(r.stdout)["models"]}
    colors = models["colors"]
    assert colors["cached"] is False and colors["cached_models"] == []
    assert [f["cached"] for f in colors["files"]] == [False, False, True]  # the labels only
    assert models["colors_pipeline2"]["cached"] is True
    for m in models.values():
        assert isinstance(m["cached"], bool) and all(isinstance(f["cached"], bool) for f in m["files"])
    row = next(ln for ln in cli("models", "list").stdout.splitlines() if ln.startswith("colors "))
    assert re.search(r"B\s+-\s+SHA-256", row), row  # SIZE, then CACHED "-"
    assert cli("models", "pull", "colors", "--cpu-only").exit_code == 0
    row = next(ln for ln in cli("models", "list").stdout.splitlines() if ln.startswith("colors "))
    assert " cpu " in row


def test_models_needing_a_custom_op_are_named_by_list_and_pull(cli, env, server, tiny_model,  # noqa: F811
                                                                tmp_path):
    posenet = make_edgetpu_stand_in(tiny_model, tmp_path / "posenet.tflite", "PosenetDecoderOp")
    server.files["posenet.tflite"] = posenet.read_bytes()
    models = {**env["models"], "toy_posenet": {"task": "pose", "cpu": "posenet.tflite"}}
    env["registry"].write_text(json.dumps(registry_doc(server.files, models)))
    r = cli("models", "pull", "toy_posenet", "--cpu-only")
    assert r.exit_code == 0, r.stderr
    (warning,) = [ln for ln in r.stderr.splitlines() if "warning:" in ln]
    assert "toy_posenet needs the custom operator(s) PosenetDecoderOp" in warning
    assert "`edgeapp pose` will refuse it" in warning and "MoveNet" in warning
    r = cli("models", "list", "--format", "json")
    needs = {m["name"]: m["needs_ops"] for m in json.loads(r.stdout)["models"]}
    assert needs["toy_posenet"] == ["PosenetDecoderOp"] and needs["colors"] == []
    assert "note: toy_posenet needs" in cli("models", "list").stderr


def test_the_shipped_registry_says_which_models_need_posenets_op():
    from edgeapp.core.registry import load_registry

    reg = load_registry()
    needing = {name for name, e in reg.models.items() if e.custom_ops}
    assert needing == {name for name in reg.models if name.startswith("posenet_")}
    assert all(reg.models[n].custom_ops == ("PosenetDecoderOp",) for n in needing)


# --- 19: an embedding extractor is no classifier ----------------------------------------------------

def embedding_model(path: Path) -> Path:
    """x (1,16,16,3) float -> AVERAGE_POOL_2D 16x16 -> RESHAPE (1,3): pooled features, as an
    embedding extractor's output is (no classifier layer after the pooling)."""
    import flatbuffers

    schema = tflite_schema()
    m = schema.ModelT()
    m.version = 3
    shape = schema.BufferT()
    shape.data = list(np.array([1, 3], np.int32).tobytes())
    m.buffers = [schema.BufferT(), shape]
    codes = []
    for name in ("AVERAGE_POOL_2D", "RESHAPE"):
        code = schema.OperatorCodeT()
        code.builtinCode = code.deprecatedBuiltinCode = getattr(schema.BuiltinOperator, name)
        code.version = 1
        codes.append(code)
    m.operatorCodes = codes
    tensors = []
    for name, dims, kind, buffer in (("x", (1, 16, 16, 3), "FLOAT32", 0),
                                     ("pooled", (1, 1, 1, 3), "FLOAT32", 0),
                                     ("shape", (2,), "INT32", 1), ("features", (1, 3), "FLOAT32", 0)):
        t = schema.TensorT()
        t.name, t.shape, t.type, t.buffer = name, list(dims), getattr(schema.TensorType, kind), buffer
        tensors.append(t)
    pool = schema.OperatorT()
    pool.opcodeIndex, pool.inputs, pool.outputs = 0, [0], [1]
    options = schema.Pool2DOptionsT()
    options.padding = schema.Padding.VALID
    options.strideW = options.strideH = options.filterWidth = options.filterHeight = 16
    pool.builtinOptionsType, pool.builtinOptions = schema.BuiltinOptions.Pool2DOptions, options
    reshape = schema.OperatorT()
    reshape.opcodeIndex, reshape.inputs, reshape.outputs = 1, [1, 2], [3]
    sg = schema.SubGraphT()
    sg.tensors, sg.operators, sg.inputs, sg.outputs = tensors, [pool, reshape], [0], [3]
    m.subgraphs = [sg]
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    path.write_bytes(bytes(b.Output()))
    return path


def test_classify_says_an_embedding_model_gives_features(cli, tiny_model, color_images, tmp_path):
    model = embedding_model(tmp_path / "extractor.tflite")
    r = cli("classify", model, color_images["red"], "--mean", "0", "--std", "255", "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    (warning,) = [ln for ln in r.stderr.splitlines() if "warning:" in ln]
    assert "looks like an embedding model" in warning and "AVERAGE_POOL_2D" in warning
    red = json.loads(r.stdout)["classes"][0]
    assert red["id"] == 0 and red["score"] > 0.5  # channel 0 (red) has the largest mean: features
    r = cli("classify", tiny_model, color_images["red"])  # a classifier (softmax) is not warned about
    assert r.exit_code == 0 and "embedding" not in r.stderr


# --- 11: EDGEAPP_MAX_PIXELS decides, also over Pillow's own limit --------------------------------

def png_header_only(path: Path, width: int, height: int) -> Path:
    """A 1-bit PNG that declares width×height and holds no pixel data (its IDAT is not even a
    zlib stream): Pillow reads the size without decoding, and fails at once when asked to
    decode, before touching the pixels it set aside."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"no pixels here")
                     + chunk(b"IEND", b""))
    return path


def test_the_pixel_limit_is_edgeapps_also_past_pillows(tiny_model, tmp_path):
    big = png_header_only(tmp_path / "big.png", 20000, 10000)  # 200 MP: past Pillow's 179 MP error
    r = edgeapp("classify", tiny_model, big, "-f", "jsonl", env={"EDGEAPP_MAX_PIXELS": "150000000"})
    assert r.returncode == ExitCode.INPUTS_FAILED, r.stderr
    error = json.loads(r.stdout)["error"]
    assert "over the 150-megapixel limit; set EDGEAPP_MAX_PIXELS" in error
    assert "decompression bomb" not in error.lower() and "exceeds limit" not in error

    r = edgeapp("classify", tiny_model, big, "-f", "jsonl", env={"EDGEAPP_MAX_PIXELS": "500000000"})
    assert r.returncode == ExitCode.INPUTS_FAILED, r.stderr
    error = json.loads(r.stdout)["error"]  # allowed: decoding starts, and finds no pixels
    assert "cannot decode image" in error and "megapixel" not in error
    assert "decompression bomb" not in error.lower() and "exceeds limit" not in error


# --- 13: the example script's errors ---------------------------------------------------------------

def classify_folder(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "classify_folder.py"), *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def test_classify_folder_script_errors_are_one_line_with_the_clis_codes(tiny_model, color_images, tmp_path):
    folder = color_images["red"].parent
    r = classify_folder(tmp_path / "missing.tflite", folder, tmp_path / "a.csv")
    assert r.returncode == ExitCode.MODEL_INVALID and "Traceback" not in r.stderr
    missing = tmp_path / "missing.tflite"
    assert r.stderr.strip().splitlines() == [f"classify_folder: error: model not found: {missing}"]
    r = classify_folder(tiny_model, tmp_path / "nowhere", tmp_path / "b.csv")
    assert r.returncode == ExitCode.USAGE and "no such folder" in r.stderr
    assert not (tmp_path / "b.csv").exists()
    images = tmp_path / "images"
    images.mkdir()
    (images / "red.png").write_bytes(color_images["red"].read_bytes())
    (images / "broken.png").write_bytes(b"not a png")
    r = classify_folder(tiny_model, images, tmp_path / "c.csv")
    assert r.returncode == ExitCode.INPUTS_FAILED, r.stderr
    rows = (tmp_path / "c.csv").read_text().splitlines()
    assert len(rows) == 3 and "not an image" in rows[1] and rows[2].split(",")[1] == "red"


# --- 14: contradictions --------------------------------------------------------------------------

def test_empty_device_is_a_usage_error(cli, tiny_model, color_images):
    r = cli("classify", tiny_model, color_images["red"], "--device", "")
    assert r.exit_code == ExitCode.USAGE and "--device is empty" in r.stderr, r.stderr


@pytest.mark.parametrize("threshold, outcome",
                         [("2", "nothing will pass it"), ("-0.5", "everything passes it")])
def test_a_threshold_outside_0_to_1_is_warned_about(cli, tiny_model, color_images, threshold, outcome):
    r = cli("classify", tiny_model, color_images["red"], "--threshold", threshold)
    assert r.exit_code == 0, r.stderr
    assert f"warning: --threshold {float(threshold):g} is outside 0..1" in r.stderr and outcome in r.stderr


def test_cpu_model_with_an_uncompiled_model_is_warned_about(cli, tiny_model, compiled_pair, color_images):
    compiled, twin = compiled_pair
    r = cli("classify", tiny_model, color_images["red"], "--cpu-model", twin)
    assert r.exit_code == 0, r.stderr
    assert f"warning: --cpu-model {twin} is ignored: {tiny_model} is not compiled" in r.stderr
    r = cli("classify", compiled, color_images["red"], "--cpu-model", twin, "--no-probe")
    assert "is ignored" not in r.stderr  # the twin of a compiled model: what it is for


def test_two_options_that_contradict_each_other_are_a_usage_error():
    """For bench's --runs and --duration (cli/options.check_exclusive): only typed values count."""
    from typer.testing import CliRunner

    from edgeapp.cli.options import check_exclusive, cli_errors

    app = typer.Typer()

    @app.command()
    @cli_errors
    def bench(ctx: typer.Context, runs: int = typer.Option(100, "--runs", "-n"),
              duration: Optional[float] = typer.Option(None, "--duration")) -> None:
        check_exclusive(ctx, "runs", "duration", "--duration times the loop instead of --runs")
        typer.echo(f"runs={runs} duration={duration}")

    runner = CliRunner()
    r = runner.invoke(app, ["--runs", "5", "--duration", "0.5"])
    assert r.exit_code == ExitCode.USAGE
    assert "--runs and --duration contradict each other" in r.output
    for ok in (["--duration", "0.5"], ["-n", "5"], []):
        assert runner.invoke(app, ok).exit_code == 0


# --- 16: Ctrl-C says what was written and how to go on ----------------------------------------------

def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupted(tiny_model, image: Path, listing: Path, *args) -> tuple[str, Path]:
    spellings = (f"{image.parent}{'/.' * i}/{image.name}\n" for i in range(1, 1900))
    listing.write_text("".join(spellings))
    out = Path(args[args.index("-o") + 1]) if "-o" in args else None
    with listing.open() as stdin:
        proc = subprocess.Popen([sys.executable, "-m", "edgeapp", "classify", str(tiny_model), "-",
                                 "--workers", "0", *map(str, args)], stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                preexec_fn=_default_sigint)
        if out is None:
            assert proc.stdout.readline()
        else:
            deadline = time.monotonic() + 60
            while not (out.exists() and out.read_text().count("\n") >= 2) and time.monotonic() < deadline:
                time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    return err.strip().splitlines()[-1], out


def test_ctrl_c_in_a_batch_says_how_many_results_and_how_to_resume(tiny_model, color_images, tmp_path):
    last, _ = interrupted(tiny_model, color_images["red"], tmp_path / "a.txt", "-f", "jsonl")
    assert re.match(r"edgeapp: interrupted: \d+ result\(s\) written to stdout; .*--output .*--resume",
                    last), last

    last, out = interrupted(tiny_model, color_images["red"], tmp_path / "b.txt", "-o", tmp_path / "r.jsonl")
    n = int(re.match(r"edgeapp: interrupted: (\d+) result\(s\) written to (\S+);", last).group(1))
    assert n == len(out.read_text().splitlines()) >= 2
    assert f"written to {out}; run the same command with --resume" in last


# --- 17: table entries apart unambiguously ------------------------------------------------------

def test_table_entries_are_apart_though_labels_hold_commas(cli, tiny_model, color_images, tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"{i} {name}, {name}ish\n" for i, name in enumerate(CLASSES)))
    r = cli("classify", tiny_model, color_images["red"], "--labels", labels, "-k", "3")
    assert r.exit_code == 0, r.stderr
    path, rest = r.stdout.strip().split("  ", 1)
    entries = rest.split(" | ")
    assert len(entries) == 3 and entries[0].startswith("red, redish ")
    assert sorted(e.rsplit(" ", 1)[0] for e in entries) == sorted(f"{c}, {c}ish" for c in CLASSES)


# --- 18: a file where the output's folder should be ----------------------------------------------

def test_output_under_a_file_says_it_is_not_a_folder(cli, tiny_model, color_images, tmp_path):
    photo = tmp_path / "some.png"
    photo.write_bytes(color_images["red"].read_bytes())
    for out in (photo / "out.jsonl", photo / "deeper" / "out.jsonl"):
        r = cli("classify", tiny_model, color_images["red"], "-o", out)
        assert r.exit_code == ExitCode.USAGE
        assert error_lines(r.stderr) == [
            f"edgeapp: error: cannot write {out}: {photo} is a file, not a folder"]


# --- 22: NaN in a float image ----------------------------------------------------------------------

def test_a_float_image_with_nan_is_an_error_record_without_numpys_warning(tiny_model, color_images, tmp_path):
    from PIL import Image

    a = np.full((16, 16), 0.5, np.float32)
    a[3, 4] = np.nan
    Image.fromarray(a, "F").save(tmp_path / "nan.tiff")
    r = edgeapp("classify", tiny_model, tmp_path / "nan.tiff", color_images["red"], "-f", "jsonl")
    assert r.returncode == ExitCode.INPUTS_FAILED, r.stderr
    records = {Path(rec["path"]).name: rec for rec in map(json.loads, r.stdout.splitlines())}
    assert "1 NaN or infinite pixel value(s)" in records["nan.tiff"]["error"]
    assert records["nan.tiff"]["classes"] == [] and records["red.png"]["error"] is None
    assert "RuntimeWarning" not in r.stderr and "invalid value" not in r.stderr


# --- 20, 23, 24: the README -------------------------------------------------------------------------

def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    return text.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_first_command_to_copy_works_with_bullseyes_pip():
    first = readme_section("Try it").split("```bash\n", 1)[1].split("\n", 1)[0]
    assert first.startswith("pip install . && edgeapp classify"), first
    assert "-e" not in first.split("&&")[0]  # pip 20.3 cannot install a setup.py-less project editable


def test_the_install_table_says_what_a_lite_image_needs_for_opencv():
    install = readme_section("Install").split("\n### ", 1)[0]  # the install table, not pip's report
    rows = [ln for ln in install.splitlines() if ln.startswith(("| Raspberry Pi OS", "| Debian 11"))]
    assert rows and all("libgl1" in row or "as for 64-bit" in row for row in rows), rows
    assert "opencv-python-headless" in install and "Lite" in install


def test_the_readme_says_where_reference_kernels_match_coral():
    text = " ".join(readme_section("Devices and the CPU fallback").split())
    assert "reproduce Coral's numbers on x86-64" in text
    assert "On 64-bit ARM" in text and "NEON" in text and "0.285" in text


# --- 25: a runtime that dies on every model ---------------------------------------------------------

STAND_IN_RUNTIME = '''
"""A TFLite runtime that dies natively (FAKE_RUNTIME_CRASH=all: on every model; =user: on every
model but edgeapp's known-good one), else ai-edge-litert's."""
import os
import signal

from ai_edge_litert.interpreter import *  # noqa
from ai_edge_litert import interpreter as _real


class Interpreter(_real.Interpreter):
    def __init__(self, model_path=None, **kw):
        mode = os.environ.get("FAKE_RUNTIME_CRASH", "")
        if mode == "all" or (mode == "user" and "known-good" not in str(model_path)):
            os.kill(os.getpid(), signal.SIGSEGV)
        super().__init__(model_path=model_path, **kw)
'''


@pytest.fixture(scope="module")
def crashing_runtime(tmp_path_factory) -> dict:
    """tflite-runtime, as edgeapp finds it (a user site-packages folder, which the model check's
    `python -I` child is given too), standing in for a runtime broken on this machine."""
    if default_runtime()[0] != "ai-edge-litert" or any(
            (Path(p) / "tflite_runtime").exists() for p in sys.path if p):
        pytest.skip("needs ai-edge-litert and no real tflite-runtime")
    base = tmp_path_factory.mktemp("userbase")
    site = base / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "tflite_runtime").mkdir(parents=True)
    (site / "tflite_runtime" / "__init__.py").write_text("")
    (site / "tflite_runtime" / "interpreter.py").write_text(STAND_IN_RUNTIME)
    info = site / "tflite_runtime-2.14.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tflite-runtime\nVersion: 2.14.0\n")
    return {"PYTHONUSERBASE": str(base)}


@pytest.mark.parametrize("spawn", ["0", "1"], ids=["fork", "spawn"])
def test_a_runtime_dying_on_every_model_is_blamed_and_nothing_is_cached(
        crashing_runtime, tiny_model, color_images, tmp_path, spawn):
    cache = tmp_path / "cache"
    environ = {**crashing_runtime, "EDGEAPP_CACHE_DIR": str(cache), "EDGEAPP_PROBE_SPAWN": spawn}
    r = edgeapp("classify", "--runtime", "tflite-runtime", tiny_model, color_images["red"],
                env={**environ, "FAKE_RUNTIME_CRASH": "all"})
    assert r.returncode == ExitCode.MISSING_DEPENDENCY, r.stderr
    (line,) = error_lines(r.stderr)
    assert "the TFLite runtime tflite-runtime 2.14.0 dies on every model here" in line
    assert f"so {tiny_model} is not to blame" in line and "edgeapp doctor" in line
    assert "pip install --force-reinstall tflite-runtime" in line
    if (cache / "probe.json").exists():
        assert json.loads((cache / "probe.json").read_text())["models"] == {}

    r = edgeapp("classify", "--runtime", "tflite-runtime", tiny_model, color_images["red"],
                env={**environ, "FAKE_RUNTIME_CRASH": "user"})  # the known-good model runs: the file
    assert r.returncode == ExitCode.MODEL_INVALID, r.stderr
    (line,) = error_lines(r.stderr)
    assert "crashes the TFLite runtime tflite-runtime 2.14.0 (SIGSEGV)" in line
    (entry,) = json.loads((cache / "probe.json").read_text())["models"].values()
    assert entry["status"] == "crash"


def test_the_verdict_cache_counts_every_verdict_it_acts_on(tmp_path):
    from edgeapp.hw.verdicts import ModelKey, Pair, Verdict, VerdictCache

    cache = VerdictCache(tmp_path)
    assert cache.describe().startswith("no cached probe or model-check verdicts")
    for i in range(5):
        cache.put_model(ModelKey(f"{i:064x}", "ai-edge-litert", "2.3.0"), Verdict("crash", "dies"), f"m{i}")
    cache.put_model(ModelKey("f" * 64, "ai-edge-litert", "2.3.0"), Verdict("pass", ""), "ok")
    cache.put(Pair("ai-edge-litert", "2.3.0", "/lib/libedgetpu.so.1", "a" * 64), Verdict("pass", ""))
    assert cache.counts() == {"pairs": {"pass": 1}, "models": {"crash": 5, "pass": 1}}
    text = cache.describe()
    assert text.startswith("7 cached verdict(s): Edge TPU pairs pass 1; model files crash 5, pass 1")
    assert "5 refused until `edgeapp doctor --forget-probes`" in text


def test_an_error_raised_while_ctrl_c_unwinds_is_still_ctrl_c():
    """Python 3.9 can turn a KeyboardInterrupt landing inside a lock's wait into "RuntimeError:
    release unlocked lock" (seen once in the bullseye chroot): that is Ctrl-C, exit 130."""
    import typer

    from edgeapp.cli.options import cli_errors
    from edgeapp.errors import is_interrupt

    def broken_by_ctrl_c():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("release unlocked lock")

    try:
        broken_by_ctrl_c()
    except RuntimeError as e:
        assert is_interrupt(e)
    assert not is_interrupt(RuntimeError("a bug"))
    with pytest.raises(typer.Exit) as exit_:
        cli_errors(broken_by_ctrl_c)()
    assert exit_.value.exit_code == 130


def test_the_resume_hint_survives_an_error_raised_while_it_unwinds(capsys):
    """Closing a runner as Ctrl-C unwinds can fail on Python 3.9 (seen in the bullseye chroot):
    the user still hears how many results were written and how to resume."""
    import typer

    from edgeapp.cli.options import Interrupted, cli_errors

    def batch_then_a_broken_close():
        try:
            raise Interrupted("3 result(s) written to r.jsonl; run the same command with --resume")
        finally:
            raise RuntimeError("release unlocked lock")

    with pytest.raises(typer.Exit) as exit_:
        cli_errors(batch_then_a_broken_close)()
    assert exit_.value.exit_code == 130
    assert "interrupted: 3 result(s) written to r.jsonl; run the same command with --resume" in \
        capsys.readouterr().err
