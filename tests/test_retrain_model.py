"""`retrain`'s model side: recognising an embedding extractor, appending the head to an
existing .tflite (compiled ones included) and what the written model computes, run by the real
TFLite runtime and compared with numpy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED, make_edgetpu_stand_in, tflite_schema
from media import color_pixels
from retrain_models import keras_extractor, writer_extractor, writer_model

from edgeapp.core.learn.embedding import require_extractor
from edgeapp.core.learn.head import NORM_SCALE, SCORE_SCALE, head_tensors, logit_range
from edgeapp.core.learn.train import dense, imprint, l2_normalize, softmax, train_softmax
from edgeapp.core.tflite.append import NewOperator, NewTensor, append_operators
from edgeapp.core.tflite.model import load_model, parse_model
from edgeapp.errors import InvalidModel
from edgeapp.tasks import noun_for

CORAL_EXTRACTOR = SHARED / "mobilenet_v1_1.0_224_quant_embedding_extractor.tflite"
CORAL_EXTRACTOR_TPU = SHARED / "mobilenet_v1_1.0_224_quant_embedding_extractor_edgetpu.tflite"


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def int8_extractor(tmp_path_factory) -> Path:
    return writer_extractor(tmp_path_factory.mktemp("wx") / "extractor.tflite")


@pytest.fixture(scope="module")
def uint8_extractor(tiny_keras, tiny_data, tmp_path_factory) -> Path:
    return keras_extractor(tiny_keras, tiny_data / "train", tmp_path_factory.mktemp("kx") / "gap.tflite")


@pytest.fixture(scope="module")
def float32_extractor(tiny_keras, tiny_data, tmp_path_factory) -> Path:
    return keras_extractor(tiny_keras, tiny_data / "train",
                           tmp_path_factory.mktemp("kf") / "gapf.tflite", "float32")


# -- recognising an extractor ------------------------------------------------------------------

def test_extractors_are_recognised(int8_extractor, uint8_extractor, tmp_path):
    assert require_extractor(load_model(int8_extractor)) == 8
    m = load_model(uint8_extractor)
    assert m.output_tensors[0].shape == (1, 8) and m.output_tensors[0].dtype == "uint8"
    assert require_extractor(m) == 8
    # compiled: only the edgetpu-custom-op and the output's quantization are left to judge by
    compiled = make_edgetpu_stand_in(uint8_extractor, tmp_path / "gap_edgetpu.tflite")
    assert require_extractor(load_model(compiled)) == 8


def test_class_score_models_are_refused(tiny_model, tmp_path):
    with pytest.raises(InvalidModel, match=r"outputs class scores, not an embedding \(its output "
                                           r"comes from SOFTMAX\)"):
        require_extractor(load_model(tiny_model))
    compiled = make_edgetpu_stand_in(tiny_model, tmp_path / "colors_edgetpu.tflite")
    with pytest.raises(InvalidModel, match="quantized as probabilities"):
        require_extractor(load_model(compiled))
    logits = load_model(writer_model(tmp_path / "logits.tflite", [(1, 3)]))
    assert require_extractor(logits) == 3  # logits without labels: a 3-d feature, as far as we know
    with pytest.raises(InvalidModel, match="its labels name its 3 outputs"):
        require_extractor(logits, label_count=3)


@pytest.mark.parametrize("shapes, kind", [
    ([(1, 10, 4), (1, 10), (1, 10), (1,)], "is a detection model with 4 outputs"),
    ([(1, 8, 8, 4)], r"output \[1, 8, 8, 4\] is not a feature vector \(it looks like a segmentation"),
    ([(1, 1, 17, 3)], r"looks like a pose estimation model"),
    ([(1, 1)], r"output \[1, 1\] is not a feature vector"),
    ([(1, 4), (1, 4)], "a model with 2 outputs")])
def test_other_outputs_are_refused_in_one_line(tmp_path, shapes, kind):
    model = load_model(writer_model(tmp_path / "m.tflite", shapes))
    with pytest.raises(InvalidModel, match=kind) as e:
        require_extractor(model, guess=noun_for)  # as retrain asks it
    assert "\n" not in str(e.value) and "--base takes an embedding extractor" in str(e.value)


@pytest.mark.shared
def test_coral_extractors_are_recognised_and_its_classifiers_refused():
    assert require_extractor(load_model(CORAL_EXTRACTOR)) == 1024
    assert require_extractor(load_model(CORAL_EXTRACTOR_TPU)) == 1024
    for name in ("mobilenet_v1_0.25_128_quant.tflite", "mobilenet_v1_0.25_128_quant_edgetpu.tflite",
                 "mobilenet_v2_1.0_224_quant.tflite"):
        with pytest.raises(InvalidModel, match="outputs class scores"):
            require_extractor(load_model(SHARED / name))


# -- the written model, run by the TFLite runtime -----------------------------------------------

def run_all(path: Path, image: np.ndarray) -> dict:
    """Every tensor of one invoke, by name (the runtime edgeapp picks, all tensors kept)."""
    import warnings

    from edgeapp.hw.runtime import find_runtime

    try:
        with warnings.catch_warnings():  # "intended for debugging purposes only": it is
            warnings.simplefilter("ignore")
            it = find_runtime().module.Interpreter(model_path=str(path),
                                                   experimental_preserve_all_tensors=True)
    except TypeError:
        pytest.skip("this TFLite runtime cannot keep intermediate tensors")
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], image)
    it.invoke()
    out = {}
    for d in it.get_tensor_details():
        try:
            out[d["name"]] = (it.get_tensor(d["index"]), d["quantization"])
        except ValueError:  # tensors the runtime does not expose (packed constants)
            pass
    return out


def model_input(model_path: Path, c: int, rng) -> np.ndarray:
    """A colour image of class c as the model's input tensor (Coral's (p - 128) / 128 rule)."""
    t = load_model(model_path).input_tensors[0]
    _, h, w, _ = t.shape
    pixels = color_pixels(c, rng, max(h, w))[:h, :w].astype(np.float64)
    if t.dtype == "float32":
        return (pixels / 255.0)[None].astype(np.float32)  # convert's default: [0, 1] inputs
    scale, zero = t.quantization.per_tensor
    x = (pixels - 128) / 128 if t.dtype == "int8" else pixels / 255.0 / scale
    q = np.round(x / scale + zero) if t.dtype == "int8" else np.round(x + zero)
    return np.clip(q, *((-128, 127) if t.dtype == "int8" else (0, 255)))[None].astype(t.dtype)


def dq(values, quant) -> np.ndarray:
    scale, zero = quant
    v = np.asarray(values, dtype=np.float64)
    return v if not scale else (v - zero) * scale


def q(values, scale: float, zero: int, dtype: str) -> np.ndarray:
    lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
    return np.clip(np.round(np.asarray(values) / scale + zero), lo, hi)


def embeddings_of(base: Path, rng, per_class: int = 6) -> tuple:
    """(embeddings as the base outputs them, dequantized; labels) of generated colour images."""
    out_name = load_model(base).output_tensors[0].name
    emb, labels = [], []
    for c in range(3):
        for _ in range(per_class):
            values, quant = run_all(base, model_input(base, c, rng))[out_name]
            emb.append(dq(values, quant).ravel())
            labels.append(c)
    return np.array(emb), np.array(labels)


def write_head(base: Path, out: Path, weights, bias, emb) -> Path:
    data = base.read_bytes()
    model = parse_model(data, str(base))
    tensors, ops, output = head_tensors(model, weights, bias, logit_range(emb, weights, bias))
    out.write_bytes(append_operators(data, tensors, ops, [output], str(base)))
    return out


@pytest.mark.parametrize("base", ["uint8", "int8", "float32"])
@pytest.mark.parametrize("method", ["imprint", "softmax"])
def test_written_head_computes_what_numpy_does(request, base, method, tmp_path):
    """Stage by stage, each within one quantization step of numpy given the stage's input: the
    L2 norm, the fully-connected layer (with the stored weights), the softmax; and the whole head
    close to the float computation from the embedding, with the same top class."""
    path = request.getfixturevalue(f"{base}_extractor")
    rng = np.random.default_rng(4)
    emb, labels = embeddings_of(path, rng)
    if method == "imprint":
        w, b = imprint(emb, labels, 3)
    else:
        fit = train_softmax(emb, labels, 3)
        w, b = fit.weights, fit.bias
    model = load_model(write_head(path, tmp_path / "mine.tflite", w, b, emb))
    assert model.op_names[-3:] == ["L2_NORMALIZATION", "FULLY_CONNECTED", "SOFTMAX"]
    assert model.output_tensors[0].shape == (1, 3) and model.output_tensors[0].dtype == base
    T = {t.name: t for t in model.tensors}
    base_out = load_model(path).output_tensors[0].name
    for c in range(3):
        got = run_all(tmp_path / "mine.tflite", model_input(path, c, rng))
        e = dq(*got[base_out]).reshape(1, -1)
        norm, logits, scores = (got[f"retrain/{n}"] for n in ("l2_norm", "logits", "scores"))
        if base == "float32":
            assert np.allclose(norm[0].reshape(1, -1), l2_normalize(e), atol=1e-6)
            assert np.allclose(logits[0], dense(l2_normalize(e), w, b), atol=1e-4)
            assert np.allclose(scores[0], softmax(logits[0]), atol=1e-6)
            continue
        z_scale, z_zero = T["retrain/logits"].quantization.per_tensor
        norm_zero = 128 if base == "uint8" else 0
        assert norm[1] == (NORM_SCALE, norm_zero)
        expect = q(l2_normalize(e), NORM_SCALE, norm_zero, base)
        assert np.abs(norm[0].reshape(1, -1).astype(int) - expect).max() <= 1
        mine = tmp_path / "mine.tflite"
        expect = q(dense(dq(*norm).reshape(1, -1), stored(mine, "weights"), stored(mine, "bias")),
                   z_scale, z_zero, base)
        assert np.abs(logits[0].astype(int) - expect).max() <= 1
        score_zero = 0 if base == "uint8" else -128
        expect = q(softmax(dq(*logits)), SCORE_SCALE, score_zero, base)
        assert np.abs(scores[0].astype(int) - expect).max() <= 1
        # end to end against the float head: the quantization steps add up to a few hundredths
        float_scores = softmax(dense(l2_normalize(e), w, b))
        assert np.abs(dq(*scores) - float_scores).max() < 0.05
        assert dq(*scores).argmax() == float_scores.argmax() == c


def stored(path: Path, name: str) -> np.ndarray:
    """The dequantized constant retrain/<name> as the file stores it."""
    from edgeapp.core.edgetpu.rules import constant_reader

    data = path.read_bytes()
    t = next(t for t in parse_model(data).tensors if t.name == f"retrain/{name}")
    raw = np.frombuffer(constant_reader(data)(t), dtype=np.dtype(t.dtype).newbyteorder("<"))
    return dq(raw.reshape(t.shape), t.quantization.per_tensor)


# -- appending keeps the base ------------------------------------------------------------------

def imprinted_head(base: Path, out: Path) -> Path:
    emb = np.random.default_rng(0).random((6, 8))
    w, b = imprint(emb, np.array([0, 0, 1, 1, 2, 2]), 3)
    return write_head(base, out, w, b, emb)


def same_tensor(a, b) -> bool:
    return (a.name, a.shape, a.dtype, a.quantization, a.data_size, a.shape_signature) == \
        (b.name, b.shape, b.dtype, b.quantization, b.data_size, b.shape_signature)


def test_appending_keeps_every_part_of_the_base(uint8_extractor, tmp_path):
    """The converter's output (signature, metadata, description, buffers): everything the base
    had is still there, the constants byte for byte; the signature names the new output."""
    from edgeapp.core.edgetpu.rules import constant_reader

    old_data = uint8_extractor.read_bytes()
    old = parse_model(old_data)
    assert old.signature_outputs and old.metadata  # what the TFLite converter writes
    new_path = imprinted_head(uint8_extractor, tmp_path / "mine.tflite")
    data = new_path.read_bytes()
    new = load_model(new_path)
    n = len(old.tensors)
    assert all(same_tensor(a, b) for a, b in zip(old.tensors, new.tensors[:n]))
    assert new.operators[:len(old.operators)] == old.operators
    assert new.inputs == old.inputs and new.outputs == (n + 4,)
    assert new.metadata == old.metadata and new.description == old.description
    assert new.version == old.version and new.subgraph_count == old.subgraph_count
    read_old, read_new = constant_reader(old_data), constant_reader(data)
    assert all(read_old(t) == read_new(t) for t in old.tensors if t.is_constant)
    [(name, index)] = old.signature_outputs
    assert new.signature_outputs == ((name, n + 4),)
    # the whole old file is inside the new one, 16-byte aligned: every alignment in it holds
    assert data.find(old_data) % 16 == 0 and len(data) % 16 == 0
    # the runtime's signature runner gives the scores under the old output name
    from edgeapp.hw.runtime import find_runtime

    it = find_runtime().module.Interpreter(model_path=str(new_path))
    runner = it.get_signature_runner()
    image = model_input(uint8_extractor, 0, np.random.default_rng(1))
    by_signature = runner(**{it.get_signature_list()["serving_default"]["inputs"][0]: image})
    assert by_signature[name].shape == (1, 3)


def test_appending_to_a_compiled_model_keeps_its_custom_op(uint8_extractor, tmp_path):
    schema = tflite_schema()
    compiled = make_edgetpu_stand_in(uint8_extractor, tmp_path / "gap_edgetpu.tflite")
    new_path = imprinted_head(compiled, tmp_path / "mine_edgetpu.tflite")
    m = schema.ModelT.InitFromPackedBuf(new_path.read_bytes(), 0)
    ops = m.subgraphs[0].operators
    codes = [m.operatorCodes[o.opcodeIndex] for o in ops]
    assert codes[0].customCode == b"edgetpu-custom-op"
    assert bytes(ops[0].customOptions) == b"compiled-for-edgetpu"
    assert [c.builtinCode for c in codes[1:]] == [schema.BuiltinOperator.L2_NORMALIZATION,
                                                 schema.BuiltinOperator.FULLY_CONNECTED,
                                                 schema.BuiltinOperator.SOFTMAX]
    assert load_model(new_path).is_edgetpu_compiled


def test_check_shows_the_head_on_the_cpu_after_the_edge_tpu(uint8_extractor, tmp_path, cli):
    compiled = make_edgetpu_stand_in(uint8_extractor, tmp_path / "gap_edgetpu.tflite")
    new_path = imprinted_head(compiled, tmp_path / "mine_edgetpu.tflite")
    r = cli("check", new_path, "--format", "json")
    report = json.loads(r.stdout)
    ops = report["ops"]
    assert [o["op"] for o in ops] == ["edgetpu-custom-op", "L2_NORMALIZATION", "FULLY_CONNECTED",
                                      "SOFTMAX"]
    assert ops[0]["mapped"] and not any(o["mapped"] for o in ops[1:])
    assert all("already compiled" in o["reason"] for o in ops[1:])
    assert report["summary"]["ops_tpu"] == 1 and report["summary"]["ops_cpu"] == 3
    assert r.exit_code == 8  # not fully on the Edge TPU, as for any partly mapped model
    # the CPU twin with the same head would map whole if compiled
    cpu = imprinted_head(uint8_extractor, tmp_path / "mine.tflite")
    assert json.loads(cli("check", cpu, "--format", "json").stdout)["ops"][-1]["op"] == "SOFTMAX"


def test_refuses_what_it_cannot_rewrite(tmp_path):
    with pytest.raises(InvalidModel, match="not a TFLite model"):
        append_operators(b"not a model at all", [], [], [0], "junk.tflite")


def test_new_operators_reuse_matching_operator_codes(int8_extractor, tmp_path):
    """A second FULLY_CONNECTED of the same version shares the first one's operator code."""
    data = int8_extractor.read_bytes()
    first = parse_model(data)
    x = first.outputs[0]
    n = len(first.tensors)
    w = np.ones((2, 8), np.int8)
    tensors = [NewTensor("w", (2, 8), "int8", w, (0.01,), (0,)),
               NewTensor("b", (2,), "int32", np.zeros(2, np.int32), (0.01 / 255,), (0,)),
               NewTensor("y", (1, 2), "int8", scale=(0.1,), zero_point=(0,))]
    once = append_operators(data, tensors, [NewOperator("FULLY_CONNECTED", (x, n, n + 1), (n + 2,), 4)],
                            [n + 2])
    m1 = parse_model(once)
    twice = append_operators(once, [NewTensor("w2", (2, 2), "int8", np.ones((2, 2), np.int8), (0.01,), (0,)),
                                    NewTensor("b2", (2,), "int32", np.zeros(2, np.int32), (0.001,), (0,)),
                                    NewTensor("z", (1, 2), "int8", scale=(0.1,), zero_point=(0,))],
                             [NewOperator("FULLY_CONNECTED", (n + 2, n + 3, n + 4), (n + 5,), 4)], [n + 5])
    m2 = parse_model(twice)
    assert m2.op_names == m1.op_names + ["FULLY_CONNECTED"]
    from edgeapp.hw.runtime import find_runtime

    path = tmp_path / "two.tflite"
    path.write_bytes(twice)
    it = find_runtime().module.Interpreter(model_path=str(path))
    it.allocate_tensors()
    it.invoke()
    assert it.get_tensor(it.get_output_details()[0]["index"]).shape == (1, 2)


@pytest.mark.shared
def test_coral_extractor_with_a_head(tmp_path, cli):
    """Coral's MobileNet v1 extractor (uint8, 1024-d) and its compiled twin take the head; the
    CPU model's scores match numpy; `check` puts the head after the Edge TPU segment."""
    rng = np.random.default_rng(6)
    emb = rng.random((9, 1024)) * 3
    w, b = imprint(emb, np.repeat(np.arange(3), 3), 3)
    cpu = write_head(CORAL_EXTRACTOR, tmp_path / "mine.tflite", w, b, emb)
    tpu = write_head(CORAL_EXTRACTOR_TPU, tmp_path / "mine_edgetpu.tflite", w, b, emb)
    image = rng.integers(0, 256, (1, 224, 224, 3), dtype=np.uint8)
    got = run_all(cpu, image)
    e = dq(*got[load_model(CORAL_EXTRACTOR).output_tensors[0].name]).reshape(1, -1)
    scores = dq(*got["retrain/scores"])
    assert np.abs(scores - softmax(dense(l2_normalize(e), w, b))).max() < 0.05
    report = json.loads(cli("check", tpu, "--format", "json").stdout)
    assert [(o["op"], o["mapped"]) for o in report["ops"]] == [
        ("edgetpu-custom-op", True), ("L2_NORMALIZATION", False), ("FULLY_CONNECTED", False),
        ("SOFTMAX", False)]
    schema = tflite_schema()
    old = schema.ModelT.InitFromPackedBuf(CORAL_EXTRACTOR_TPU.read_bytes(), 0)
    new = schema.ModelT.InitFromPackedBuf(tpu.read_bytes(), 0)
    assert bytes(new.subgraphs[0].operators[0].customOptions) == \
        bytes(old.subgraphs[0].operators[0].customOptions)
