"""The rough edges a new user hit (issue 11, item 3, and the full-disk runs of item 4), each
through the CLI as the user met it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from test_compiler import fake_compiler, model_copy  # noqa: F401  (fixtures: stand-in compiler)
from test_probe import fake_libs  # noqa: F401  (fixture: stand-in Edge TPU libraries)

from edgeapp.errors import ExitCode

COMMANDS = ("convert", "check", "compile", "classify", "detect", "camera", "bench", "devices", "doctor")


def edgeapp(*args, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeapp", *map(str, args)], capture_output=True,
                          text=True, cwd=kw.pop("cwd", ROOT), env={**os.environ, **(env or {})}, **kw)


def flat(text: str) -> str:
    return " ".join(text.split())


# --- help texts ----------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ("",) + COMMANDS)
def test_help_keeps_every_word_and_shows_no_bool_metavar(cli, command):
    r = cli(*filter(None, [command]), "--help")
    assert r.exit_code == 0, r.stderr
    assert "<bool>" not in r.stdout and "Usage:" in r.stdout
    text = flat(r.stdout)
    if command == "convert":
        assert "pip install 'edgeapp[convert]'" in text
    if command == "detect":
        assert "[xmin, ymin, xmax, ymax]" in text
    if command == "camera":
        assert "--display / --no-display" in text or "--display/--no-display" in text


# --- --runtime tensorflow ------------------------------------------------------------------------

def test_runtime_tensorflow_classifies(tiny_model, color_images):
    r = edgeapp("classify", "--runtime", "tensorflow", tiny_model, color_images["red"], "-f", "jsonl",
                "-k", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["classes"][0]["label"] == "red"
    assert "Warning" not in r.stderr and "internal error" not in r.stderr


def test_doctor_checks_the_tensorflow_runtime_before_calling_its_pair_ok(fake_libs, tmp_path):
    env = {"EDGEAPP_EDGETPU_LIB": str(fake_libs["LOADS"]), "EDGEAPP_CACHE_DIR": str(tmp_path)}
    r = edgeapp("doctor", "--format", "json", env=env)
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["runtime tensorflow"]["status"] == "ok", checks["runtime tensorflow"]
    assert checks["pair tensorflow"]["status"] == "ok"


def test_a_pair_whose_runtime_does_not_import_is_not_ok(fake_libs, tmp_path):
    from edgeapp.flows.doctor import FAIL, Check, library_checks

    env = {"EDGEAPP_EDGETPU_LIB": str(fake_libs["LOADS"]), "EDGEAPP_CACHE_DIR": str(tmp_path),
           "PATH": os.environ.get("PATH", "")}
    broken = Check("runtime tensorflow", FAIL, "2.21 does not import: ImportError", "pip install ...")
    lib, pair = library_checks(env, {"tensorflow": "2.21"}, imports={"tensorflow": broken})
    assert lib.status == "ok" and pair.status == FAIL and "does not import" in pair.detail


# --- one compiler lookup for compile and doctor ----------------------------------------------------

def test_compile_runs_a_relative_compiler_path_and_doctor_honours_the_same_variable(
        cli, fake_compiler, model_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # the stand-in is on no PATH
    monkeypatch.chdir(fake_compiler.path.parent)
    r = cli("compile", "--compiler", "./edgetpu_compiler", model_copy, "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["compiler"] == str(fake_compiler.path)

    monkeypatch.setenv("EDGETPU_COMPILER", "./edgetpu_compiler")
    assert cli("compile", model_copy).exit_code == 0
    if os.uname().machine in ("x86_64", "amd64"):
        checks = {c["name"]: c for c in json.loads(cli("doctor", "-f", "json").stdout)["checks"]}
        assert checks["edgetpu_compiler"]["status"] == "ok"
        assert checks["edgetpu_compiler"]["detail"] == f"16.0.384591198 at {fake_compiler.path}"
        monkeypatch.setenv("EDGETPU_COMPILER", "./nope")
        checks = {c["name"]: c for c in json.loads(cli("doctor", "-f", "json").stdout)["checks"]}
        assert checks["edgetpu_compiler"]["status"] == "fail"
        assert "$EDGETPU_COMPILER ./nope" in checks["edgetpu_compiler"]["detail"]


# --- detect: OpenCV, --annotate, -o into a new folder ---------------------------------------------

@pytest.fixture(scope="module")
def det_model(tmp_path_factory) -> Path:
    import detection_models as dm

    return dm.build(tmp_path_factory)["det_tf1"]


def without_opencv(*args) -> subprocess.CompletedProcess:
    """edgeapp in a Python where `import cv2` fails, as on a machine without OpenCV."""
    code = ("import sys\nsys.modules['cv2'] = None\nfrom edgeapp.cli.app import main\n"
            f"sys.argv = ['edgeapp'] + {[str(a) for a in args]!r}\nmain()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)


def test_detect_annotate_without_opencv_is_exit_7_and_doctor_checks_opencv(det_model, tmp_path, cli):
    from PIL import Image

    Image.new("RGB", (64, 64)).save(tmp_path / "a.png")
    r = without_opencv("detect", det_model, tmp_path / "a.png", "--annotate", tmp_path / "ann")
    assert r.returncode == ExitCode.MISSING_DEPENDENCY, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("edgeapp: error: OpenCV is needed for --annotate")
    assert "pip install opencv-python" in r.stderr and "Traceback" not in r.stderr
    assert without_opencv("detect", det_model, tmp_path / "a.png").returncode == 0  # not needed

    checks = {c["name"]: c for c in json.loads(cli("doctor", "-f", "json").stdout)["checks"]}
    import cv2

    assert (checks["opencv"]["status"], checks["opencv"]["detail"].split()[0]) == ("ok", cv2.__version__)
    from edgeapp.flows.doctor import opencv_check

    missing = opencv_check("edgeapp_no_such_module")
    assert missing.status == "warn" and "pip install opencv-python" in missing.fix


def test_detect_does_not_read_its_own_annotated_images(det_model, tmp_path, cli):
    from PIL import Image

    a = np.zeros((64, 64, 3), np.uint8)
    a[16:32, 16:32, 0] = 255
    Image.fromarray(a).save(tmp_path / "one.png")
    for run in range(2):
        r = cli("detect", det_model, tmp_path, "--annotate", tmp_path / "ann", "-f", "jsonl",
                "-o", tmp_path / "new" / "dir" / "boxes.jsonl")
        assert r.exit_code == 0, r.stderr
        records = [json.loads(ln) for ln in (tmp_path / "new/dir/boxes.jsonl").read_text().splitlines()]
        assert [Path(rec["path"]).name for rec in records] == ["one.png"]
        assert sorted(p.name for p in (tmp_path / "ann").iterdir()) == ["one.png"]
    assert "skipping 1 image(s) in the --annotate folder" in r.stderr


# --- classify: output folder, --resume with another model, Keras files, label counts, other tasks ---

def test_classify_output_into_a_new_folder(cli, tiny_model, color_images, tmp_path):
    out = tmp_path / "results" / "today" / "x.csv"
    r = cli("classify", tiny_model, color_images["red"], "-f", "csv", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert out.read_text().splitlines()[0].startswith("path,rank,id,label,score")


def test_resume_refuses_results_of_another_model(cli, tiny_model, color_images, tmp_path):
    other = tmp_path / "other.tflite"
    other.write_bytes(tiny_model.read_bytes())
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"results.{fmt}"
        r = cli("classify", tiny_model, color_images["red"], "-f", fmt, "-o", out)
        assert r.exit_code == 0, r.stderr
        before = out.read_bytes()
        r = cli("classify", other, color_images["red"], color_images["blue"], "-f", fmt, "-o", out,
                "--resume")
        assert r.exit_code == ExitCode.USAGE
        assert f"holds results of {tiny_model}, not of {other}" in r.stderr
        assert out.read_bytes() == before
        r = cli("classify", tiny_model, color_images["red"], color_images["blue"], "-f", fmt, "-o", out,
                "--resume")  # the same model resumes
        assert r.exit_code == 0, r.stderr
        assert "1 already done" in r.stderr  # a complete CSV keeps its last image, as JSONL does


@pytest.mark.parametrize("name", ["colors.keras", "colors.h5", "saved_model_dir"])
def test_a_keras_model_given_to_classify_points_to_convert(cli, tmp_path, color_images, name):
    target = tmp_path / name
    if name == "saved_model_dir":
        target.mkdir()
        (target / "saved_model.pb").write_bytes(b"\x08\x01")
    else:
        target.write_bytes(b"PK\x03\x04 not really a zip")
    r = cli("classify", target, color_images["red"])
    assert r.exit_code == ExitCode.MODEL_INVALID
    assert f"convert it first, e.g. `edgeapp convert {target} -o" in r.stderr


def test_label_count_that_does_not_fit_warns_once(cli, tiny_model, color_images, tmp_path):
    labels = tmp_path / "two.txt"
    labels.write_text("cat\ndog\n")
    r = cli("classify", tiny_model, color_images["red"], color_images["blue"], "--labels", labels)
    assert r.exit_code == 0
    warning = f"warning: --labels {labels} has 2 label(s) for the model's 3 class(es)"
    assert r.stderr.count(warning) == 1
    assert "warning" not in cli("classify", tiny_model, color_images["red"]).stderr  # its own 3 labels


def other_task_model(path: Path, shape: tuple) -> Path:
    """An int8 3x3 conv model, input and output `shape`: a pixel map or MoveNet's keypoints."""
    from edgeapp.core.tflite.writer import ModelWriter, conv_layer, int8_input

    rng = np.random.default_rng(0)
    w = ModelWriter("test")
    x = int8_input(w, "input", shape, scale=1 / 32)
    c = shape[-1]
    y = conv_layer(w, x, rng.integers(-127, 128, (c, 3, 3, c), dtype=np.int8),
                   np.zeros(c, np.int32), [0.01] * c, 0.1)
    path.write_bytes(w.build(inputs=[x.index], outputs=[y.index]))
    return path


@pytest.mark.parametrize("shape, command", [((1, 16, 16, 3), "segment"), ((1, 1, 17, 3), "pose")])
def test_classify_refuses_pose_and_segmentation_models(cli, tmp_path, color_images, shape, command):
    model = other_task_model(tmp_path / f"{command}.tflite", shape)
    r = cli("classify", model, color_images["red"])
    assert r.exit_code == ExitCode.MODEL_INVALID, r.stdout + r.stderr
    assert f"use `edgeapp {command}`" in r.stderr and r.stdout == ""


# --- convert ---------------------------------------------------------------------------------------

def read_only(folder: Path) -> list[str]:
    """Make `folder` read-only; the command prefix that makes that hold for root too (without
    CAP_DAC_OVERRIDE root ignores no permission bits)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o555)
    if os.geteuid() != 0:
        return []
    import shutil

    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: no way to make a folder read-only")
    return ["setpriv", "--bounding-set", "-dac_override"]


def test_convert_checks_output_and_calibration_before_loading_tensorflow(tmp_path, tiny_data):
    model = tmp_path / "m.keras"
    model.write_bytes(b"not loaded anyway")
    prefix = read_only(tmp_path / "ro")
    r = subprocess.run([*prefix, sys.executable, "-m", "edgeapp", "convert", str(model), "-o",
                        str(tmp_path / "ro" / "m.tflite"), "-c", str(tiny_data / "train")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == ExitCode.USAGE, r.stderr
    assert r.stderr.strip() == (f"edgeapp: error: --output {tmp_path}/ro/m.tflite: cannot write in "
                                f"{tmp_path}/ro (Permission denied)")
    r = edgeapp("convert", model, "-o", tmp_path / "m.tflite", "-c", tmp_path / "nothere")
    assert r.returncode == ExitCode.USAGE
    assert r.stderr.strip() == f"edgeapp: error: --calibration {tmp_path}/nothere: not found (a folder " \
                               "of images or an .npy file)"  # and not "loading ... (TensorFlow)"


def on_a_terminal(*args) -> tuple[int, str, str]:
    """edgeapp with stderr on a pseudo-terminal: (exit code, stdout, what the terminal showed)."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "edgeapp", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=slave, cwd=ROOT, env={**os.environ, "COLUMNS": "100"})
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    out = proc.stdout.read().decode()
    return proc.wait(), out, shown.decode("utf-8", "replace")


def test_convert_on_a_terminal_shows_progress_not_tensorflow_chatter(tiny_keras, tiny_data, tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("blue\ngreen\n")
    code, out, shown = on_a_terminal("convert", tiny_keras, "-o", tmp_path / "c.tflite", "-c",
                                     tiny_data / "train", "--labels", labels, "--samples", "40")
    assert code == 0, shown
    assert "calibrating" in shown and "40/40" in shown  # the progress bar
    assert "fully_quantize" not in shown and "inference_type" not in shown
    assert shown.count("has 2 label(s) for the model's 3 class(es)") == 1
    assert "top-1 agreement" in out


def test_convert_that_is_not_int8_leaves_no_model_behind(tmp_path):
    """A SIN layer has no int8 kernel: the converter keeps it in float (DEQUANTIZE, SIN, QUANTIZE)."""
    code = f"""
import os; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import keras, numpy as np
inp = keras.Input((8, 8, 3))
x = keras.layers.Lambda(keras.ops.sin)(keras.layers.Conv2D(4, 3, padding="same")(inp))
out = keras.layers.Dense(3, activation="softmax")(keras.layers.GlobalAveragePooling2D()(x))
keras.Model(inp, out).export({str(tmp_path / "sin_sm")!r}, format="tf_saved_model", verbose=False)
np.save({str(tmp_path / "cal.npy")!r}, np.random.default_rng(0).integers(0, 255, (8, 8, 8, 3)).astype(np.uint8))
"""
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    out = tmp_path / "models" / "sin.tflite"
    r = edgeapp("convert", tmp_path / "sin_sm", "-o", out, "-c", tmp_path / "cal.npy")
    assert r.returncode == ExitCode.CONVERT_FAILED, r.stderr
    assert "not fully int8" in r.stderr and "SIN #" in r.stderr and f"{out} not written" in r.stderr
    assert list(out.parent.iterdir()) == []  # no .tflite, no temporary file, no sidecar


# --- camera: CSV precision, Ctrl-C, full disk; bench full disk -------------------------------------

def red_video(path: Path, frames: int, fps: float = 30.0) -> Path:
    cv2 = pytest.importorskip("cv2")
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (64, 48))
    frame = np.zeros((48, 64, 3), np.uint8)
    frame[:, :, 2] = 220  # red in BGR
    for _ in range(frames):
        writer.write(frame)
    writer.release()
    return path


def test_camera_csv_keeps_timestamps_and_latencies_precise(cli, tiny_model, tmp_path):
    import csv
    import re
    import time

    out = tmp_path / "frames.csv"
    r = cli("camera", tiny_model, "--source", red_video(tmp_path / "v.avi", 3), "--no-display",
            "-f", "csv", "-o", out, "-k", "1")
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 3
    for row in rows:
        assert re.fullmatch(r"\d{10}\.\d{3}", row["timestamp"]), row["timestamp"]  # not 1.79542e+09
        assert abs(float(row["timestamp"]) - time.time()) < 3600
        assert re.fullmatch(r"\d+\.\d{3}", row["latency_ms"]) and re.fullmatch(r"\d+\.\d{3}", row["frame_ms"])
        assert row["label"] == "red"


def _default_sigint() -> None:
    """Ctrl-C as a terminal delivers it: a test run started in the background (SIGINT ignored,
    which children inherit and Python keeps) must not change what the command does."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_is_130_with_the_summary_in_camera_as_in_classify(tiny_model, color_images, tmp_path):
    import signal

    video = red_video(tmp_path / "long.avi", 600, fps=30.0)  # 20 s at its own rate
    proc = subprocess.Popen([sys.executable, "-m", "edgeapp", "camera", str(tiny_model), "--source",
                             str(video), "--no-display", "--drop-frames"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=_default_sigint)
    assert proc.stdout.readline()  # running: one frame done
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED == 130, err
    assert "stop: interrupted" in err.strip().splitlines()[-1]

    # classify: the same image under many spellings of its path, stopped after the first result
    image = color_images["red"]
    listing = tmp_path / "paths.txt"
    spellings = (f"{image.parent}{'/.' * i}/{image.name}\n" for i in range(1, 1900))  # < PATH_MAX
    listing.write_text("".join(spellings))
    with listing.open() as stdin:
        proc = subprocess.Popen([sys.executable, "-m", "edgeapp", "classify", str(tiny_model), "-",
                                 "-f", "jsonl", "--workers", "0"], stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                preexec_fn=_default_sigint)
    assert proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("edgeapp: interrupted: "), err  # + how to resume


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_full_disk_keeps_the_camera_summary_and_the_bench_json(cli, tiny_model, tmp_path):
    r = cli("camera", tiny_model, "--source", red_video(tmp_path / "v.avi", 5), "--no-display",
            "-o", "/dev/full")
    assert r.exit_code == ExitCode.USAGE
    lines = r.stderr.strip().splitlines()
    assert "error: cannot write results to /dev/full: No space left on device" in lines[-2]
    assert "processed" in lines[-1] and "stop: output error" in lines[-1]

    r = edgeapp("bench", tiny_model, "--runs", "3", "--warmup", "0", "-o", "/dev/full")
    assert r.returncode == ExitCode.USAGE
    assert r.stderr.strip().splitlines()[-1] == ("edgeapp: error: cannot append to /dev/full: No space "
                                                 "left on device; the JSON document is on stdout instead")
    doc = json.loads(r.stdout.strip().splitlines()[-1])  # after the table
    assert doc["schema"] == "edgeapp.bench/1" and doc["results"][0]["runs"] == 3
    r = edgeapp("bench", tiny_model, "--runs", "3", "--warmup", "0", "-o", "/dev/full", "-f", "json")
    assert r.returncode == ExitCode.USAGE and json.loads(r.stdout)["results"][0]["runs"] == 3


# --- bench --synthetic where no compiler can run ---------------------------------------------------

def test_bench_synthetic_says_honestly_why_the_edge_tpu_cannot_be_measured(tmp_path):
    import shutil

    no_compiler = {"PATH": str(tmp_path), "EDGETPU_COMPILER": ""}
    r = edgeapp("bench", "--synthetic", "--device", "edgetpu", env=no_compiler)
    assert r.returncode == ExitCode.MISSING_DEPENDENCY
    assert "--synthetic needs edgetpu_compiler" in r.stderr and "sudo apt-get install edgetpu-compiler" \
        in r.stderr and "--compiler" not in r.stderr  # bench has no such flag
    setarch = shutil.which("setarch")
    if setarch is None or os.uname().machine != "x86_64":
        pytest.skip("needs setarch on x86-64 to run as a machine edgetpu_compiler does not exist for")
    r = subprocess.run([setarch, "i686", sys.executable, "-m", "edgeapp", "bench", "--synthetic",
                        "--device", "edgetpu"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == ExitCode.MISSING_DEPENDENCY
    last = r.stderr.strip().splitlines()[-1]
    assert "cannot measure the Edge TPU on this Linux i686" in last and "x86-64 Linux" in last
    assert "--compiler" not in r.stderr


# --- a CPU model on an explicit Edge TPU: one rule, exit 2 (README) -------------------------------

@pytest.mark.parametrize("device", ["usb", "edgetpu", "pci:0"])
def test_cpu_model_on_an_explicit_edge_tpu_is_a_usage_error(cli, tiny_model, color_images, tmp_path,
                                                           device):
    r = cli("classify", tiny_model, color_images["red"], "--device", device)
    assert r.exit_code == ExitCode.USAGE == 2
    assert f"is not compiled for the Edge TPU, so --device {device} cannot run it: run `edgeapp " \
           "compile" in r.stderr
    model = tmp_path / "m.tflite"
    model.write_bytes(tiny_model.read_bytes())
    (tmp_path / "m_edgetpu.tflite").write_bytes(b"")
    r = cli("classify", model, color_images["red"], "--device", device)
    assert r.exit_code == 2 and f"pass its compiled build {tmp_path}/m_edgetpu.tflite" in r.stderr

