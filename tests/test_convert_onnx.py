"""`edgeapp convert MODEL.onnx`: the committed ONNX fixtures (scripts/build_onnx_fixtures.py)
through the real onnx2tf, TensorFlow Lite converter, `check` and ONNX Runtime.

Each fixture is converted once per session, as a user would (a subprocess), with any HTTP(S)
request sent to a dead local port: onnx2tf's sample-data download would fail the conversion.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from media import write_color_folders

from edgeapp.core.edgetpu.rules import MAX_KNOWN_VERSION
from edgeapp.core.tflite.model import load_model
from edgeapp.errors import ExitCode

pytest.importorskip("onnx2tf", reason="the onnx extra: pip install -e '.[dev]'")
FIXTURES = ROOT / "tests" / "fixtures" / "onnx"
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}


def run_convert(*args, check=True, cwd=ROOT):
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "convert", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **OFFLINE})
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="session")
def onnx_data(tmp_path_factory):
    """Colour images in class folders (and a copy where a few images hold one white pixel: the
    outlier fixture's trigger)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("onnx_data")
    write_color_folders(root / "photos", 30, seed=11)
    white = write_color_folders(root / "white", 30, seed=11)
    for f in sorted(white.glob("*/*.png"))[::15]:
        a = np.asarray(Image.open(f)).copy()
        a[3, 4] = 255
        Image.fromarray(a).save(f)
    return root


@pytest.fixture(scope="session")
def onnx_converted(onnx_data, tmp_path_factory):
    """name -> (report, output path), each fixture converted once."""
    out = tmp_path_factory.mktemp("onnx_out")
    runs = {
        "colors_nchw": ["-c", onnx_data / "photos", "--val", "15"],
        "colors_dynamic_batch": ["-c", onnx_data / "photos", "--io", "int8"],
        "colors_softmax": ["-c", onnx_data / "photos", "--scale", "1/255"],
        "colors_outlier": ["-c", onnx_data / "white", "--report"],
        "colors_hardswish": ["-c", onnx_data / "photos"],
        # the docs' --report example: ordinary photos never fire the outlier's branch
        "colors_outlier on photos": ["-c", onnx_data / "photos", "--report"],
    }
    done = {}
    for name, args in runs.items():
        fixture = name.split(" ")[0]
        target = out / name.replace(" ", "_") / f"{fixture}.tflite"
        proc = run_convert(FIXTURES / f"{fixture}.onnx", "-o", target, *args, "--format", "json")
        done[name] = (json.loads(proc.stdout), target, proc.stderr)
    return done


def ort_outputs(onnx_file: Path, images: list) -> np.ndarray:
    import onnxruntime as ort
    from PIL import Image

    s = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    x = np.stack([np.asarray(Image.open(p).convert("RGB"), np.float32) / 255.0 for p in images])
    return np.concatenate([s.run(None, {"input": x[i:i + 1].transpose(0, 3, 1, 2)})[0] for i in range(len(x))])


def tflite_outputs(model: Path, images: list) -> np.ndarray:
    """The int8 model run as classify runs it, dequantized."""
    from edgeapp.core.vision.preprocess import load_image, quantize_input
    from edgeapp.hw.runtime import open_engine

    engine = open_engine(model, "cpu")
    scale, zero = engine.input_quantization
    out_scale, out_zero = engine.outputs[0]["quantization"]
    rows = []
    for p in images:
        q = quantize_input(np.asarray(load_image(p)), engine.input_dtype, scale, zero, 0.0, 255.0)
        rows.append((engine.run(q[None])[0].astype(np.float32) - out_zero) * out_scale)
    return np.concatenate(rows)


@pytest.mark.parametrize("name", ["colors_nchw", "colors_dynamic_batch", "colors_softmax", "colors_outlier",
                                  "colors_hardswish"])
def test_every_fixture_converts_fully_mapped_and_integer(onnx_converted, name):
    report, out, _ = onnx_converted[name]
    m = load_model(out)
    assert report["edgetpu_check"]["verdict"] == "fully_mapped", report["edgetpu_verdict"]
    assert m.input_tensors[0].shape == (1, 16, 16, 3)  # NHWC: images feed directly
    assert m.input_tensors[0].dtype == report["io"] and m.output_tensors[0].dtype == report["io"]
    assert not {"TRANSPOSE", "SHAPE", "STRIDED_SLICE", "DEQUANTIZE", "PADV2"} & set(m.op_names), m.op_names
    assert "MAX_POOL_2D" in m.op_names  # its padding: PAD with zeros, not PADV2 with float's minimum
    assert not {"HARD_SWISH", "RELU_0_TO_1"} & set(m.op_names)  # what compiler 16 lacks
    assert all(t.dtype in ("int8", "uint8", "int32") for t in m.tensors)
    too_new = [(op.op, op.version) for op in m.operators
               if op.op in MAX_KNOWN_VERSION and op.version > MAX_KNOWN_VERSION[op.op]]
    assert not too_new
    assert report["agreement"] >= 0.97 and report["int8_accuracy"] >= 0.95
    assert report["agreement_detail"]["float_runtime"] == "ONNX Runtime"
    assert report["agreement_detail"]["outputs"][0]["cosine"] >= 0.99


def test_int8_model_agrees_with_onnx_runtime(onnx_converted, onnx_data):
    """Measured here independently of convert's own report: ONNX Runtime on the .onnx file vs
    the written .tflite through edgeapp's CPU runtime, on every image."""
    report, out, _ = onnx_converted["colors_nchw"]
    images = sorted((onnx_data / "photos").glob("*/*.png"))
    ref, got = ort_outputs(FIXTURES / "colors_nchw.onnx", images), tflite_outputs(out, images)
    cos = np.sum(ref * got, 1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(got, axis=1)
    assert cos.min() > 0.98 and np.mean(ref.argmax(1) == got.argmax(1)) >= 0.98, cos.min()
    labels = np.array([["blue", "green", "red"].index(p.parent.name) for p in images])
    assert np.mean(got.argmax(1) == labels) >= 0.95


def test_held_out_images_are_not_calibrated_on(onnx_converted):
    report, out, _ = onnx_converted["colors_nchw"]
    assert report["samples"] == 15 and report["calibration_samples"] == 75
    assert report["agreement_detail"]["measured_on"] == "held-out calibration images"
    assert report["float_top5"] == 1.0  # 3 classes: top-5 holds every class
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["agreement"]["samples"] == 15 and sidecar["labels"] == ["blue", "green", "red"]
    assert sidecar["agreement"]["outputs"][0]["sqnr_db"] > 20


def test_hard_activations_become_ops_the_compiler_knows(onnx_converted):
    """HardSwish is built from ADD/RELU6/MUL (not fused into HARD_SWISH); the RELU_0_TO_1 the
    converter fuses for HardSigmoid becomes RELU6 on a [0, 1] int8 range, the same result."""
    report, out, _ = onnx_converted["colors_hardswish"]
    m = load_model(out)
    assert "RELU6" in m.op_names and "MUL" in m.op_names
    assert any("RELU_0_TO_1 -> RELU6" in n for n in report["notes"]), report["notes"]
    for op in m.operators:
        if op.op == "RELU6" and m.tensors[op.outputs[0]].quantization.per_tensor[0] < 0.004:
            scale, zero = m.tensors[op.outputs[0]].quantization.per_tensor
            assert (scale, zero) == (pytest.approx(1 / 255), -128)


def test_dynamic_batch_is_fixed_to_one(onnx_converted):
    report, out, _ = onnx_converted["colors_dynamic_batch"]
    m = load_model(out)
    assert all(not t.has_dynamic_batch for t in m.tensors)
    assert any("batch" in n for n in report["notes"]) and report["io"] == "int8"


def test_softmax_output_is_a_quantized_probability(onnx_converted):
    report, out, _ = onnx_converted["colors_softmax"]
    m = load_model(out)
    assert "SOFTMAX" in m.op_names and report["task"] == "classify"
    scale, zero = m.output_tensors[0].quantization.per_tensor
    assert abs(scale - 1 / 256) < 1e-6 and zero == 0  # TFLite's fixed int8 Softmax range
    assert json.loads(out.with_suffix(".json").read_text())["preprocessing"]["std"] == pytest.approx(255.0)


def test_report_names_the_outlier_layer_first(onnx_converted):
    report, out, _ = onnx_converted["colors_outlier"]
    doc = json.loads(out.with_suffix(".report.json").read_text())
    first = doc["layers"][0]
    assert first["source"] == "outlier_add" and "outlier_add" in first["name"] and first["op"] == "ADD"
    assert "outlier" in first["cause"] and first["outlier_ratio"] > 4
    harm = [row["output_sqnr_db"] for row in doc["layers"] if row.get("output_sqnr_db") is not None]
    assert harm == sorted(harm) and first["output_sqnr_db"] == harm[0]  # worst first, by harm at the output
    assert out.with_suffix(".report.png").stat().st_size > 5000
    assert report["report"]["layers"][0]["source"] == "outlier_add"


def test_a_branch_the_calibration_never_fires_is_floored_and_named(onnx_converted):
    """The docs' --report example: calibrated on photos without a near-white pixel, the outlier
    branch's convolution stays at 0 on every image. Its int8 range is floored to one input step
    times its largest weight step (else an output step of 1e-9 the CPU runtime refuses): the
    model runs, is written with its sidecar, and the silent layer is named."""
    report, out, stderr = onnx_converted["colors_outlier on photos"]
    (silent,) = report["silent_layers"]
    assert silent["recorded"] == [0.0, 0.0] and silent["floored"][1] > 0.1, silent
    assert f"warning: layer {silent['layer']} stays within 0..0 on every calibration image" in stderr
    assert out.with_suffix(".json").is_file() and report["agreement"] >= 0.97
    rows = json.loads(out.with_suffix(".report.json").read_text())["layers"]
    (row,) = [r for r in rows if r.get("silent")]
    assert row["source"] == silent["layer"] and "stays within 0..0" in row["cause"], row
    m = load_model(out)
    conv = next(op for op in m.operators if op.op == "CONV_2D" and m.tensors[op.outputs[0]].name == silent["tensor"])
    x, w, y = (m.tensors[i].quantization for i in (conv.inputs[0], conv.inputs[1], conv.outputs[0]))
    assert x.scale[0] * max(w.scale) <= y.scale[0] * (1 + 1e-5)  # a requantization multiplier of at most 1


def test_a_model_the_runtime_refuses_is_not_written(tmp_path):
    """A conversion whose result the CPU runtime refuses (an output step of 1e-12: XNNPACK
    "failed to prepare") writes nothing and is a conversion failure (exit 6), not a model
    left without its sidecar."""
    import struct

    from edgeapp.errors import ConvertError
    from edgeapp.flows.convert.quantize import write_runnable

    good = ROOT / "models" / "digits_int8.tflite"
    m = load_model(good)
    conv = next(op for op in m.operators if op.op == "CONV_2D")
    scale = struct.pack("<f", m.tensors[conv.outputs[0]].quantization.scale[0])
    broken = good.read_bytes().replace(scale, struct.pack("<f", 1e-12))
    out = tmp_path / "new" / "m.tflite"
    with pytest.raises(ConvertError, match=r"cannot be run \(.*m.tflite not written\)") as e:
        write_runnable(out, broken)
    assert e.value.exit_code == ExitCode.CONVERT_FAILED and "failed to prepare" in str(e.value)
    assert list(out.parent.iterdir()) == []  # nor a temporary file
    write_runnable(out, good.read_bytes())  # the same path for a model the runtime runs
    assert out.read_bytes() == good.read_bytes()


def test_onnx2tf_chatter_goes_to_the_log(onnx_converted):
    _, out, stderr = onnx_converted["colors_nchw"]
    log = out.with_suffix(".onnx2tf.log").read_text()
    assert "onnx_op_type: Conv" in log and "\x1b[" not in log
    assert "onnx_op_type" not in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("fixture, words", [
    ("lppool.onnx", ["LpPool", "lp_pool"]),
    ("two_inputs.onnx", ["2 inputs", "left", "right"]),
    ("text_input.onnx", ["tokens", "not an image"]),
])
def test_unconvertible_models_fail_in_one_line_before_tensorflow(fixture, words, tmp_path, onnx_data):
    out = tmp_path / "new" / "x.tflite"
    proc = run_convert(FIXTURES / fixture, "-o", out, "-c", onnx_data / "photos", check=False)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == ExitCode.CONVERT_FAILED and "Traceback" not in proc.stderr
    assert last.startswith("edgeapp: error: ") and all(w in last for w in words), last
    assert not (tmp_path / "new").exists()  # nothing half-written, not even the folder
    assert "TensorFlow" not in proc.stderr  # refused before TensorFlow loaded


def test_bad_onnx_files_are_one_line_errors(tmp_path, onnx_data):
    good = (FIXTURES / "colors_nchw.onnx").read_bytes()
    cases = {"garbage.onnx": os.urandom(3000), "truncated.onnx": good[:len(good) // 2], "empty.onnx": b"",
             "text.onnx": b"not a model at all\n" * 20}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        proc = run_convert(tmp_path / name, "-o", tmp_path / "o.tflite", "-c", onnx_data / "photos", check=False)
        assert proc.returncode in (ExitCode.MODEL_INVALID, ExitCode.CONVERT_FAILED), (name, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (name, proc.stderr)
    assert not (tmp_path / "o.tflite").exists()


def test_symbolic_size_needs_input_size(tmp_path, onnx_data):
    import onnx

    m = onnx.load(str(FIXTURES / "colors_nchw.onnx"))
    for d, name in zip(m.graph.input[0].type.tensor_type.shape.dim[2:], ("height", "width")):
        d.Clear()
        d.dim_param = name
    onnx.save(m, str(tmp_path / "any_size.onnx"))
    proc = run_convert(tmp_path / "any_size.onnx", "-o", tmp_path / "o.tflite", "-c", onnx_data / "photos",
                       check=False)
    assert proc.returncode == ExitCode.USAGE and "--input-size" in proc.stderr.strip().splitlines()[-1]
    proc = run_convert(tmp_path / "any_size.onnx", "-o", tmp_path / "o.tflite", "-c", onnx_data / "photos",
                       "--input-size", "banana", check=False)
    assert proc.returncode == ExitCode.USAGE and "HxW" in proc.stderr


def test_too_big_for_memory_is_refused_before_converting(tmp_path, onnx_data):
    """MemAvailable read through the one system root (EDGEAPP_SYSROOT), as doctor's tests do."""
    (tmp_path / "root" / "proc").mkdir(parents=True)
    (tmp_path / "root" / "proc" / "meminfo").write_text("MemTotal: 1000 kB\nMemAvailable: 500 kB\n")
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "convert", str(FIXTURES / "colors_nchw.onnx"), "-o",
                           str(tmp_path / "o.tflite"), "-c", str(onnx_data / "photos")], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "EDGEAPP_SYSROOT": str(tmp_path / "root")})
    assert proc.returncode == ExitCode.CONVERT_FAILED and "too big" in proc.stderr, proc.stderr
    assert not (tmp_path / "o.tflite").exists()


def test_without_the_extra_convert_says_the_install_line(tmp_path, onnx_data):
    code = ("import sys\nsys.modules['onnx'] = None\nsys.modules['onnx2tf'] = None\n"
            "from edgeapp.cli.app import app\n"
            f"app(['convert', {str(FIXTURES / 'colors_nchw.onnx')!r}, '-o', {str(tmp_path / 'o.tflite')!r}, "
            f"'-c', {str(onnx_data / 'photos')!r}])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == ExitCode.MISSING_DEPENDENCY, proc.stderr
    assert "pip install 'edgeapp[onnx]'" in proc.stderr and "Traceback" not in proc.stderr


def test_eval_runs_the_onnx_float_original_beside_its_int8(onnx_converted, onnx_data, cli):
    """`edgeapp eval FLOAT.onnx INT8.tflite`: the ONNX file on ONNX Runtime (NCHW, fed the NHWC
    image transposed) with the preprocessing of its conversion (the int8 model's sidecar names
    it as its source), its top-1 recomputed here from ONNX Runtime directly."""
    from media import CLASSES

    _, out, _ = onnx_converted["colors_nchw"]
    r = cli("eval", FIXTURES / "colors_nchw.onnx", out, "--data", onnx_data / "photos", "--format", "json")
    assert r.exit_code == 0, r.stderr
    flt, q = json.loads(r.stdout)["models"]
    assert flt["runs_on"] == "float on ONNX Runtime" and q["runs_on"] == "cpu"
    images = sorted((onnx_data / "photos").rglob("*.png"))
    truth = np.array([CLASSES.index(p.parent.name) for p in images])
    top1 = float((ort_outputs(FIXTURES / "colors_nchw.onnx", images).argmax(axis=1) == truth).mean())
    assert flt["images"] == len(images) and flt["metrics"]["top1"] == pytest.approx(top1)
    assert q["delta"]["top1"] == pytest.approx(q["metrics"]["top1"] - flt["metrics"]["top1"])
