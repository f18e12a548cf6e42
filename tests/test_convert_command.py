"""`edgeapp convert` as a user runs it: paths checked before TensorFlow loads, the model written
with the user's umask, a progress bar and none of TensorFlow's chatter on a terminal, and no
file left behind by a conversion that is not fully int8.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import edgeapp
from conftest import ROOT

from edgeapp.errors import ExitCode


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
    for noise in ("absl::InitializeLog", "port.cc", "oneDNN", "fully_quantize", "XNNPACK", "INFO:"):
        assert noise not in proc.stderr, proc.stderr
    # 10 images hold out 2, fewer than the default 50: no notice about --val or --eval, not given
    assert "--val" not in proc.stderr and "--eval" not in proc.stderr, proc.stderr


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
    model.write_bytes(b"PK\x03\x04 a zip's signature, not loaded anyway")
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
    assert shown.count("2 label(s) from --labels") == 1 and "for the model's 3 class(es)" in shown
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
    assert not out.parent.exists()  # no .tflite, no temporary file, no sidecar, not even the folder


def test_convert_report_says_what_it_left_out_and_none_of_tflites_chatter(tiny_keras, tiny_data, tmp_path):
    """--report: the runtime's "INFO: Created TensorFlow Lite XNNPACK delegate" stays off the
    terminal; a plot left out for want of matplotlib (hidden here by a package on PYTHONPATH
    that fails to import, as a missing one does) and a --val capped at a fifth are said."""
    hidden = tmp_path / "without_matplotlib" / "matplotlib"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'matplotlib'\")\n")
    out = tmp_path / "m.tflite"
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environ["PYTHONPATH"] = str(hidden.parent)
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "convert", str(tiny_keras), "-o", str(out),
                           "--calibration", str(tiny_data / "train"), "--samples", "40", "--val", "100",
                           "--report"], capture_output=True, text=True, cwd=ROOT, env=environ)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "XNNPACK" not in proc.stderr and "INFO:" not in proc.stderr, proc.stderr
    # every ranked layer named by its source: the Keras layer, else its op and position (the
    # Softmax's tensor is named after the signature, `StatefulPartitionedCall:0`)
    layers = json.loads(out.with_suffix(".report.json").read_text())["layers"]
    assert all(row.get("source") and "PartitionedCall" not in row["source"] for row in layers), layers
    assert any(row["op"] == "SOFTMAX" and row["source"].startswith("SOFTMAX #") for row in layers), layers
    total = sum(1 for p in (tiny_data / "train").rglob("*") if p.suffix in (".png", ".jpg"))
    assert f"edgeapp: --val 100: {total // 5} of the {total} image(s) held out to measure agreement " \
           "(at most a fifth" in proc.stderr, proc.stderr
    assert not out.with_suffix(".report.png").exists()
    assert "edgeapp: report plot skipped: the report's plot needs matplotlib: pip install " \
           "'edgeapp[plot]'" in proc.stderr
    (row,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("layer report")]
    assert row.endswith("no plot (the report's plot needs matplotlib: pip install 'edgeapp[plot]')"), row


@pytest.mark.parametrize("name, data", [("notes.keras", b"a text file, not a model\n" * 5),
                                        ("weights.h5", b"\x89PNG\r\n\x1a\n a picture"),
                                        ("empty.keras", b"")])
def test_a_file_that_is_no_keras_model_is_refused_before_tensorflow(tmp_path, tiny_data, name, data):
    """A .keras file is a zip archive and a .h5 an HDF5 file: anything else is one line, exit 4,
    before TensorFlow loads (not Keras' "File not found" after it)."""
    model = tmp_path / name
    model.write_bytes(data)
    r = edgeapp("convert", model, "-o", tmp_path / "m.tflite", "-c", tiny_data / "train")
    assert r.returncode == ExitCode.MODEL_INVALID, r.stderr
    assert r.stderr.strip().splitlines() == [f"edgeapp: error: {model}: not a Keras model: the file is "
                                             + ("empty" if not data else "neither a zip archive (.keras) "
                                                "nor an HDF5 file (.h5)")]
