"""`edgeapp convert`: real Keras models through the real TFLite converter."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT

from edgeapp.core.meta import read_meta
from edgeapp.core.tflite.model import load_model
from edgeapp.errors import ExitCode


def run_convert(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "convert", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_report_and_model(converted):
    assert converted["agreement"] >= 0.97
    assert converted["int8_accuracy"] >= 0.95 and converted["float_accuracy"] >= 0.95
    assert converted["samples"] == 60 and converted["calibration_samples"] == 100
    assert converted["input_shape"] == [1, 16, 16, 3] and converted["io"] == "uint8"
    m = load_model(converted["path"])
    assert converted["size_bytes"] == m.size
    assert converted["ops"] == {op: m.op_names.count(op) for op in set(m.op_names)}
    assert all(not t.has_dynamic_batch for t in m.tensors)
    assert "SHAPE" not in m.op_names and "STRIDED_SLICE" not in m.op_names


def test_sidecar_feeds_classify(converted):
    meta = read_meta(converted["path"])
    assert meta.labels == {0: "blue", 1: "green", 2: "red"}
    assert (meta.mean, meta.std) == (0.0, 255.0)
    edgetpu_name = converted["path"].with_name("colors_int8_edgetpu.tflite")
    assert read_meta(edgetpu_name).labels == meta.labels  # a compiled model shares its twin's


@pytest.fixture(scope="module")
def saved_model(tiny_keras, tmp_path_factory):
    out = tmp_path_factory.mktemp("sm") / "colors_savedmodel"
    code = (f"import os; os.environ['TF_CPP_MIN_LOG_LEVEL']='2'\nimport keras\n"
            f"m = keras.models.load_model({str(tiny_keras)!r})\n"
            f"m.export({str(out)!r}, format='tf_saved_model', verbose=False)\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    return out


def test_saved_model_int8_io_npy_calibration(saved_model, tiny_data, tmp_path, cli):
    from PIL import Image

    pixels = np.stack([np.asarray(Image.open(p).convert("RGB"))
                       for p in sorted((tiny_data / "train").glob("*/*.png"))])
    np.save(tmp_path / "cal.npy", pixels)
    out = tmp_path / "sm_int8.tflite"
    proc = run_convert(saved_model, "-o", out, "-c", tmp_path / "cal.npy", "--io", "int8",
                       "--samples", "60", "--format", "json")
    report = json.loads(proc.stdout)
    assert report["io"] == "int8" and report["agreement"] >= 0.97
    m = load_model(out)
    assert m.input_tensors[0].dtype == "int8" and m.input_tensors[0].shape == (1, 16, 16, 3)
    r = cli("classify", out, tiny_data / "test" / "red", "-f", "jsonl", "-k", "1",
            "--labels", _labels(tmp_path))
    labels = [json.loads(line)["classes"][0]["label"] for line in r.stdout.splitlines()]
    assert r.exit_code == 0 and labels.count("red") >= 19


def _labels(tmp_path):
    p = tmp_path / "labels.txt"
    p.write_text("blue\ngreen\nred\n")
    return p


def test_bad_inputs_fail_cleanly(tmp_path, tiny_data):
    not_keras = tmp_path / "model.keras"
    not_keras.write_text("nope")
    cases = [
        ((tmp_path / "missing.keras", "-o", tmp_path / "o.tflite", "-c", tiny_data / "train"), ExitCode.MODEL_INVALID),
        ((not_keras, "-o", tmp_path / "o.tflite", "-c", tiny_data / "train"), ExitCode.MODEL_INVALID),
        ((tmp_path, "-o", tmp_path / "o.tflite", "-c", tiny_data / "train"), ExitCode.MODEL_INVALID),
        ((not_keras, "-o", tmp_path / "o.bin", "-c", tiny_data / "train"), ExitCode.USAGE),
    ]
    for args, code in cases:
        proc = run_convert(*args, check=False)
        assert proc.returncode == code, (args, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("edgeapp: error: ")


def test_float32_io_model_classifies(tiny_keras, tiny_data, tmp_path, cli):
    """--io float32: int8 inside, float at the edges; classify feeds it (pixel − mean)/std."""
    out = tmp_path / "float_io.tflite"
    report = json.loads(run_convert(tiny_keras, "-o", out, "-c", tiny_data / "train", "--io", "float32",
                                    "--samples", "50", "--format", "json").stdout)
    assert report["io"] == "float32" and report["agreement"] >= 0.97
    m = load_model(out)
    assert m.input_tensors[0].dtype == "float32" and m.output_tensors[0].dtype == "float32"
    assert {"QUANTIZE", "DEQUANTIZE"} <= set(m.op_names)
    r = cli("classify", out, tiny_data / "test" / "green", "-f", "jsonl", "-k", "1")
    labels = [json.loads(line)["classes"][0]["label"] for line in r.stdout.splitlines()]
    assert r.exit_code == 0 and labels.count("green") >= 19, r.stderr


def test_legacy_h5_model(tiny_keras, tiny_data, tmp_path):
    h5 = tmp_path / "colors.h5"
    code = (f"import os; os.environ['TF_CPP_MIN_LOG_LEVEL']='2'\nimport keras\n"
            f"keras.models.load_model({str(tiny_keras)!r}).save({str(h5)!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    out = tmp_path / "from_h5.tflite"
    report = json.loads(run_convert(h5, "-o", out, "-c", tiny_data / "train", "--samples", "30",
                                    "--format", "json").stdout)
    assert report["agreement"] >= 0.97 and load_model(out).input_tensors[0].shape == (1, 16, 16, 3)


def test_nan_calibration_data_is_named_as_the_cause(tiny_keras, tmp_path):
    bad = np.full((4, 16, 16, 3), np.nan, np.float32)
    np.save(tmp_path / "nan.npy", bad)
    proc = run_convert(tiny_keras, "-o", tmp_path / "x.tflite", "-c", tmp_path / "nan.npy", check=False)
    assert proc.returncode == ExitCode.USAGE and "NaN" in proc.stderr.strip().splitlines()[-1]
