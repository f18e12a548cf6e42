"""Model validation: every bad file is a one-line InvalidModel, never a native crash."""

import subprocess
import sys

import pytest
from tflite_edit import edited_model

from edgeapp.core.tflite.model import load_model, parse_model
from edgeapp.errors import ExitCode, InvalidModel


def test_converted_model_graph(tiny_model):
    m = load_model(tiny_model)
    (inp,), (out,) = m.input_tensors, m.output_tensors
    assert inp.shape == (1, 16, 16, 3) and inp.dtype == "uint8"
    assert out.shape == (1, 3) and out.dtype == "uint8"
    assert inp.quantization.per_tensor[0] > 0
    assert not m.is_edgetpu_compiled and m.subgraph_count == 1
    assert "CONV_2D" in m.op_names and "FULLY_CONNECTED" in m.op_names
    for op in m.operators:
        for i in op.inputs + op.outputs:
            if i >= 0:
                assert m.tensors[i].dtype in ("int8", "uint8", "int32"), (op.op, m.tensors[i])
    assert m.parameter_bytes > 0


def bad_files(tiny_model, tmp_path):
    data = tiny_model.read_bytes()
    cases = {
        "empty.tflite": b"",
        "text.tflite": b"this is not a model\n" * 10,
        "random.tflite": bytes(range(256)) * 4,
        "header_only.tflite": data[:8],
        "truncated_10.tflite": data[:len(data) // 10],
        "truncated_half.tflite": data[:len(data) // 2],
        "truncated_last_byte.tflite": data[:-1] if data[-1:] != b"\0" else data[:-200],
        "bad_root.tflite": b"\xff\xff\xff\x7fTFL3" + data[8:],
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    return [tmp_path / n for n in cases]


def test_bad_model_files_raise_invalid_model(tiny_model, tmp_path):
    for path in bad_files(tiny_model, tmp_path):
        with pytest.raises(InvalidModel) as e:
            load_model(path)
        assert "\n" not in str(e.value) and path.name in str(e.value), str(e.value)


def test_every_truncation_is_caught_or_still_valid(tiny_model):
    """Cut the model at many points: the reader either rejects it or reads a consistent graph."""
    data = tiny_model.read_bytes()
    for cut in range(0, len(data), max(1, len(data) // 300)):
        try:
            m = parse_model(data[:cut], "cut")
        except InvalidModel:
            continue
        assert m.operators, cut  # a prefix that parses must still be structurally whole


def test_missing_and_folder(tmp_path):
    with pytest.raises(InvalidModel, match="model not found"):
        load_model(tmp_path / "nope.tflite")
    with pytest.raises(InvalidModel, match="is a folder"):
        load_model(tmp_path)


def test_text_file_hint(tmp_path):
    p = tmp_path / "labels.txt"
    p.write_text("0 cat\n1 dog\n")
    with pytest.raises(InvalidModel, match="looks like a text file"):
        load_model(p)


def test_cli_rejects_bad_models_with_exit_code(cli, tiny_model, tmp_path, color_images):
    for path in bad_files(tiny_model, tmp_path) + [tmp_path / "missing.tflite"]:
        r = cli("classify", path, color_images["red"])
        assert r.exit_code == ExitCode.MODEL_INVALID, (path.name, r.stderr)
        assert r.stderr.startswith("edgeapp: error: ") and r.stderr.count("\n") == 1, r.stderr


def test_truncated_model_in_a_real_process(tiny_model, tmp_path, color_images):
    """The native runtime never sees a truncated file: no segfault (exit 139), exit 4."""
    p = tmp_path / "cut.tflite"
    p.write_bytes(tiny_model.read_bytes()[:3000])
    r = subprocess.run([sys.executable, "-m", "edgeapp", "classify", str(p), str(color_images["red"])],
                       capture_output=True, text=True)
    assert r.returncode == ExitCode.MODEL_INVALID, r.stderr
    assert "truncated or corrupt" in r.stderr


@pytest.mark.parametrize("scale,shown", [(0.0, "0.0"), (float("nan"), "nan"), (float("inf"), "inf")])
def test_invalid_quantization_scale_is_rejected_before_the_runtime(tiny_model, tmp_path, scale, shown,
                                                                   color_images):
    """A zero/NaN/inf scale segfaults ai-edge-litert in allocate_tensors: never let it through."""
    def edit(m):
        out = m.subgraphs[0].outputs[0]
        m.subgraphs[0].tensors[out].quantization.scale = [scale]

    p = edited_model(tiny_model, tmp_path, "bad_scale.tflite", edit)
    with pytest.raises(InvalidModel, match=f"invalid quantization scale {shown}"):
        load_model(p)
    r = subprocess.run([sys.executable, "-m", "edgeapp", "classify", str(p), str(color_images["red"])],
                       capture_output=True, text=True)
    assert r.returncode == ExitCode.MODEL_INVALID, r.stderr


def test_negative_dimension_and_no_operators(tiny_model, tmp_path):
    def negative(m):
        m.subgraphs[0].tensors[m.subgraphs[0].inputs[0]].shape = [1, -16, 16, 3]

    with pytest.raises(InvalidModel, match="negative dimension"):
        load_model(edited_model(tiny_model, tmp_path, "neg.tflite", negative))

    def no_ops(m):
        m.subgraphs[0].operators = []

    with pytest.raises(InvalidModel, match="no operators"):
        load_model(edited_model(tiny_model, tmp_path, "noops.tflite", no_ops))
