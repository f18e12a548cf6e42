"""`retrain`'s model side: recognising an embedding extractor, appending the head to an
existing .tflite (compiled ones included) and what the written model computes, run by the real
TFLite runtime and compared with numpy."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SHARED, make_edgetpu_stand_in
from edgeapp.core.embedding import require_extractor
from edgeapp.core.tflite.model import load_model
from edgeapp.errors import InvalidModel
from retrain_models import keras_extractor, writer_extractor, writer_model

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
        require_extractor(model)
    assert "\n" not in str(e.value) and "--base takes an embedding extractor" in str(e.value)


@pytest.mark.shared
def test_coral_extractors_are_recognised_and_its_classifiers_refused():
    assert require_extractor(load_model(CORAL_EXTRACTOR)) == 1024
    assert require_extractor(load_model(CORAL_EXTRACTOR_TPU)) == 1024
    for name in ("mobilenet_v1_0.25_128_quant.tflite", "mobilenet_v1_0.25_128_quant_edgetpu.tflite",
                 "mobilenet_v2_1.0_224_quant.tflite"):
        with pytest.raises(InvalidModel, match="outputs class scores"):
            require_extractor(load_model(SHARED / name))

