"""Agreement measured after every conversion, here for the Keras path (the session's own
converted colour model): stored in the sidecar, with per-output cosine and SQNR; class folders
matched to the model's labels by name."""

import json

import numpy as np

from edgeapp.flows.convert.agreement import truth_labels
from edgeapp.flows.convert.data import Dataset


def test_keras_conversion_reports_and_stores_agreement(converted):
    detail = converted["agreement_detail"]
    assert detail["measured_on"].startswith("--eval") and detail["float_runtime"] == "Keras"
    assert detail["samples"] == 60 and detail["agreement"] == converted["agreement"]
    (out,) = detail["outputs"]
    assert out["cosine"] >= 0.99 and out["cosine_min"] <= out["cosine"] and out["sqnr_db"] > 15
    assert converted["int8_top5"] == 1.0
    sidecar = json.loads(converted["path"].with_suffix(".json").read_text())
    assert sidecar["agreement"]["outputs"][0]["cosine"] == out["cosine"]
    assert sidecar["agreement"]["int8_accuracy"] == converted["int8_accuracy"]


def test_class_folders_are_matched_to_the_models_labels_by_name():
    data = Dataset(np.zeros((3, 2, 2, 3), np.uint8), np.array([0, 1, 2]), ["cat", "dog", "zebra"])
    imagenet_like = {0: "tench", 1: "zebra", 2: "Dog", 3: "cat"}
    assert truth_labels(data, imagenet_like).tolist() == [3, 2, 1]
    assert truth_labels(data, {0: "cat"}).tolist() == [0, 1, 2]  # not all found: folder order
    assert truth_labels(data, None).tolist() == [0, 1, 2]
