"""A model given to a command or a device it does not fit: an embedding extractor or a Keras
file to classify, pose and segmentation models to classify, a labels file of another
length, a CPU model on an explicit Edge TPU, a --cpu-model for an uncompiled model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import tflite_schema

from edgeapp.errors import ExitCode


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


def test_label_count_that_does_not_fit_warns_once(cli, tiny_model, color_images, tmp_path):
    labels = tmp_path / "two.txt"
    labels.write_text("cat\ndog\n")
    r = cli("classify", tiny_model, color_images["red"], color_images["blue"], "--labels", labels)
    assert r.exit_code == 0
    warning = f"warning: 2 label(s) from --labels {labels} for the model's 3 class(es)"
    assert r.stderr.count(warning) == 1
    assert "warning" not in cli("classify", tiny_model, color_images["red"]).stderr  # its own 3 labels


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


def test_cpu_model_with_an_uncompiled_model_is_warned_about(cli, tiny_model, compiled_pair, color_images):
    compiled, twin = compiled_pair
    r = cli("classify", tiny_model, color_images["red"], "--cpu-model", twin)
    assert r.exit_code == 0, r.stderr
    assert f"warning: --cpu-model {twin} is ignored: {tiny_model} is not compiled" in r.stderr
    r = cli("classify", compiled, color_images["red"], "--cpu-model", twin, "--no-probe")
    assert "is ignored" not in r.stderr  # the twin of a compiled model: what it is for
