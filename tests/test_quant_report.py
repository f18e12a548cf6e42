"""The maths behind convert's agreement numbers and --report: SQNR, cosine, output matching,
per-layer statistics and the causes named, on arrays whose answers are known."""

import math

import numpy as np
import pytest

from edgeapp.core.quant.metrics import align, class_agreement, compare_outputs, cosine_per_sample, sqnr_db, top_k
from edgeapp.core.quant.report import (
    LayerAccumulator,
    attribute_shared_ranges,
    channel_range_ratio,
    diagnose,
    rank,
)


def quantize(x: np.ndarray, scale: float, zero: int) -> np.ndarray:
    return np.clip(np.rint(x / scale + zero), -128, 127).astype(np.int8)


def test_sqnr_is_signal_over_noise_in_db():
    ref = np.ones(1000)
    assert sqnr_db(ref, ref + 0.01) == pytest.approx(40.0)
    assert sqnr_db(ref, ref) == math.inf
    assert sqnr_db(np.zeros(3), np.ones(3)) == -math.inf


def test_cosine_and_top_k():
    a = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    b = np.array([[2.0, 0.0], [-1.0, -1.0], [0.0, 0.0]])
    assert cosine_per_sample(a, b).tolist() == pytest.approx([1.0, -1.0, 1.0])
    assert top_k(np.array([[0.1, 0.7, 0.2]]), 2).tolist() == [[1, 2]]


def test_outputs_are_matched_across_the_layout_change():
    rng = np.random.default_rng(0)
    nchw = rng.normal(size=(4, 3, 5, 6))
    nhwc = nchw.transpose(0, 2, 3, 1)
    assert np.array_equal(align(nchw, nhwc), nchw)
    assert align(nchw, rng.normal(size=(4, 7))) is None
    logits = rng.normal(size=(4, 10))
    rows = compare_outputs([logits, nchw], [nhwc, logits + 0.001], ["logits", "map"])
    assert [r["name"] for r in rows] == ["logits", "map"]
    assert rows[0]["cosine"] > 0.999 and rows[1]["sqnr_db"] is None  # identical: no finite SQNR


def test_class_agreement_and_accuracy():
    ref = np.eye(3)[[0, 1, 2, 0]]
    got = np.eye(3)[[0, 1, 1, 0]]
    out = class_agreement(ref, got, np.array([0, 1, 2, 2]))
    assert out["agreement"] == 0.75 and out["float_accuracy"] == 0.75 and out["int8_accuracy"] == 0.5
    assert out["float_top5"] == 1.0


def test_rare_outliers_are_found_by_the_percentile():
    """99.99th percentile vs max: 20 spikes among 1,000,000 values are outliers; a spread-out
    range is not."""
    rng = np.random.default_rng(1)
    bulk = rng.uniform(0, 6, (100, 10000))
    spiked = bulk.copy()
    spiked[np.arange(0, 100, 5), 7] = 100.0
    for data, outlier in ((spiked, True), (bulk, False)):
        acc = LayerAccumulator()
        scale = data.max() / 255
        for row in data:
            acc.add(row, quantize(row, scale, -128), scale, -128)
        r = acc.result()
        assert (r["outlier_ratio"] > 4) is outlier, r
        assert r["p99_99"] == pytest.approx(6.0, rel=0.01)
        deq = (quantize(data, scale, -128).astype(float) + 128) * scale
        assert r["sqnr_db"] == pytest.approx(sqnr_db(data, deq), abs=0.01)


def test_weight_channel_ranges():
    w = np.ones((4, 3, 3, 2))
    w[1] *= 0.001
    assert channel_range_ratio(w, 0) == pytest.approx(1000.0)
    assert channel_range_ratio(np.zeros((3, 2)), 0) is None


def layer(name, op, sqnr, max_abs, scale=0.1, zero=-128, **kw):
    return {"name": name, "op": op, "sqnr_db": sqnr, "max_abs": max_abs, "scale": scale, "zero_point": zero,
            "p99_99": kw.pop("p99_99", max_abs), "outlier_ratio": kw.pop("outlier_ratio", 1.0), **kw}


def test_a_range_widened_by_its_consumer_is_credited_to_the_consumer():
    """The converter gives an Add's input the Add's range: the rounding shows up in the conv
    before it, the cause is the Add's outliers; the Add is listed first."""
    layers = [layer("conv", "CONV_2D", 28.0, 6.6, scale=0.4),
              layer("add", "ADD", 80.0, 103.0, scale=0.4, p99_99=6.5, outlier_ratio=16.0),
              layer("fc", "FULLY_CONNECTED", 45.0, 7.0, scale=0.05)]
    attribute_shared_ranges(layers)
    for row in layers:
        row["cause"], row["fix"] = diagnose(row)
    ranked = rank(layers)
    assert [r["name"] for r in ranked] == ["add", "conv", "fc"]
    assert ranked[0]["sqnr_db"] == 28.0 and ranked[0]["local_sqnr_db"] == 80.0
    assert "one outlier sets the int8 step" in ranked[0]["cause"] and ranked[1]["range_set_by"] == "add"
    assert ranked[2]["cause"] is None  # 45 dB: nothing worth saying


@pytest.mark.parametrize("row, words", [
    (layer("s", "SOFTMAX", 20.0, 1.0, classes=1000), "Softmax over 1000 classes"),
    (layer("a", "ADD", 20.0, 5.0, input_scale_ratio=40.0), "scales 40x apart"),
    (layer("c", "FULLY_CONNECTED", 20.0, 5.0, weight_range_ratio=500.0), "differ 500x"),
    (layer("r", "CONV_2D", 20.0, 5.0), "no single cause"),
])
def test_causes_in_words(row, words):
    cause, fix = diagnose(row)
    assert words in cause and fix


def test_keras_conversion_report(tiny_keras, tiny_data, tmp_path):
    """--report on the Keras path: the same debugger, table and files as for ONNX."""
    import json
    import os
    import subprocess
    import sys

    from conftest import ROOT

    out = tmp_path / "colors.tflite"
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "convert", str(tiny_keras), "-o", str(out), "-c",
                           str(tiny_data / "train"), "--samples", "40", "--report"], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.with_suffix(".report.json").read_text())
    ops = {row["op"] for row in doc["layers"]}
    assert {"CONV_2D", "FULLY_CONNECTED"} <= ops and all(row["sqnr_db"] > 10 for row in doc["layers"][:3])
    assert "SQNR dB" in proc.stdout and out.with_suffix(".report.png").is_file()


def test_top_k_breaks_ties_as_classify_does():
    """An accuracy convert reports is the one `classify` gets: tied scores rank alike."""
    from edgeapp.core.vision.classify import get_classes_from_scores

    rng = np.random.default_rng(0)
    scores = rng.integers(0, 4, size=(500, 6)).astype(np.float32)  # quantized scores tie often
    ranked = top_k(scores, 3)
    assert ranked.tolist() == [[c.id for c in get_classes_from_scores(s, 3)] for s in scores]


def test_a_range_set_by_one_outlier_is_clipped_at_the_percentile():
    """--max-drop's clip: 3 spikes at 400 among 300,000 values in 0..7 set the calibrated range;
    the 99.99th percentile cuts it back to ~7. A range without outliers is left alone."""
    from edgeapp.core.quant.tune import RangeStats

    rng = np.random.default_rng(2)
    spiked, plain = RangeStats(0.0, 400.0), RangeStats(0.0, 7.0)
    for i in range(30):
        x = rng.uniform(0, 7, 10000)
        plain.add(x)
        if i % 10 == 0:
            x[5] = 400.0
        spiked.add(x)
    low, high, clipped = spiked.clipped(99.99, 4.0, *spiked.measured())
    assert clipped and low == 0.0 and high == pytest.approx(7.0, rel=0.02)
    assert plain.clipped(99.99, 4.0, *plain.measured())[2] is False
    assert spiked.measured() == (0.0, 400.0)


def test_a_range_recorded_wider_than_the_values_is_re_measured():
    from edgeapp.core.quant.tune import RangeStats

    stats = RangeStats(-1.0, 400.0)  # the calibrator's record; the values only reach 0..7
    stats.add(np.linspace(0, 7, 1000))
    assert stats.measured() == (0.0, pytest.approx(7.0))


@pytest.mark.parametrize("detail, metric, drop", [
    ({"float_accuracy": 0.88, "int8_accuracy": 0.858, "agreement": 0.92}, "top-1 accuracy", 0.022),
    ({"float_accuracy": None, "int8_accuracy": None, "agreement": 0.97}, "top-1 agreement", 0.03),
    ({"agreement": None, "outputs": [{"cosine": 0.99}, {"cosine": 0.95}]}, "output cosine", 0.05),
])
def test_the_loss_is_in_the_task_metric(detail, metric, drop):
    from edgeapp.core.quant.tune import drop_of, meets, metric_of

    name, ref, got = metric_of(detail)
    assert name == metric and drop_of(ref, got) == pytest.approx(drop)
    assert meets(drop, drop) and not meets(drop, drop - 0.001)


def test_with_labelled_data_the_loss_is_in_evals_main_metric():
    from edgeapp.core.quant.tune import box_metric_of, drop_of, task_metric_of

    ref = {"map": 0.83, "map50": 0.98, "per_class": {}}
    got = {"map": 0.81, "map50": 0.99, "per_class": {}}
    name, a, b = task_metric_of("detection", ref, got)
    assert name == "mAP50-95" and drop_of(a, b) == pytest.approx(0.02)
    assert task_metric_of("classification", {"top1": 0.9, "top5": 1.0}, {"top1": 0.95, "top5": 0.9})[1:] == (0.9, 0.95)
    assert task_metric_of("segmentation", {"miou": 0.5}, {"miou": 0.4})[0] == "mIoU"
    assert task_metric_of("keypoints", {"oks_ap": 0.5}, {"oks_ap": 0.4})[0] == "OKS AP"
    name, a, b = box_metric_of({"map50_95": 0.97, "map50": 1.0})
    assert name == "box agreement mAP50-95" and drop_of(a, b) == pytest.approx(0.03)


def test_the_kept_trial_loses_least_then_keeps_most_on_the_edge_tpu():
    from edgeapp.core.quant.tune import best_of, tail_cuts

    trials = [{"trial": "plain", "order": 0, "drop": 0.02, "macs_tpu_share": 1.0},
              {"trial": "clip", "order": 1, "drop": 0.004, "macs_tpu_share": 1.0},
              {"trial": "tail", "order": 2, "drop": 0.004, "macs_tpu_share": 0.4},
              {"trial": "skipped", "order": 3, "drop": None}]
    assert best_of(trials)["trial"] == "clip"
    assert tail_cuts([0, 2, 4, 7], 8, 8) == [7, 4, 2, 1] and tail_cuts([0, 2, 4, 7], 8, 2) == [7, 4, 1]
    assert tail_cuts([0, 2, 4, 7], 8, 2, outliers=[3]) == [7, 4, 3, 1]


def test_a_trial_below_the_tpu_floor_is_never_the_kept_one():
    """--min-tpu: a float tail that loses least but leaves 40% of the MACs on the Edge TPU is
    not kept under a 0.9 floor; the floor is at most what the plain conversion maps."""
    from edgeapp.core.quant.tune import best_of, mapped, tpu_floor

    trials = [{"trial": "plain", "order": 0, "drop": 0.02, "macs_tpu_share": 1.0},
              {"trial": "tail", "order": 1, "drop": 0.001, "macs_tpu_share": 0.4},
              {"trial": "bias", "order": 2, "drop": 0.01, "macs_tpu_share": 1.0}]
    assert best_of(trials)["trial"] == "tail" and best_of(trials, 0.9)["trial"] == "bias"
    assert not mapped(trials[1], 0.9) and mapped(trials[1], 0.0) and mapped(trials[1], 0.4)
    assert tpu_floor(0.9, trials[0]) == 0.9 and tpu_floor(0.9, {"macs_tpu_share": 0.5}) == 0.5


def test_equalization_is_kept_when_it_measures_better():
    """Less of the metric lost wins; the same loss (50 held-out images: top-1 moves by steps of
    2 points) is decided by the outputs' SQNR against the float model, by more than 0.1 dB."""
    from edgeapp.core.quant.tune import improves

    def row(drop, *sqnr):
        return {"drop": drop, "detail": {"outputs": [{"sqnr_db": v} for v in sqnr]}}

    assert improves(row(0.0, 10.0), row(0.02, 30.0)) and not improves(row(0.02, 30.0), row(0.0, 10.0))
    assert improves(row(0.02, 30.1), row(0.02, 20.5)) and not improves(row(0.02, 20.55), row(0.02, 20.5))
    assert not improves(row(0.02, 30.0, 5.0), row(0.02, 20.5))  # the worst output counts
    assert not improves({"drop": 0.02, "detail": {}}, row(0.02, 20.5)) and not improves({"drop": None}, row(0.02))


def test_bias_correction_takes_the_mean_error_off_each_channel():
    from edgeapp.core.quant.tune import bias_shift

    f = np.zeros((4, 5, 5, 3))
    q = f + np.array([0.5, -0.25, 0.0])  # channel errors, scale 0.125 per int32 step
    assert bias_shift(f, q, np.array([0.125, 0.125, 0.125])).tolist() == [4, -2, 0]


def test_constants_are_replaced_in_place_and_shared_buffers_refused(tiny_model):
    from edgeapp.core.edgetpu.ops import constant_reader
    from edgeapp.core.tflite.model import parse_model
    from edgeapp.core.tflite.patch import replace_constants

    data = tiny_model.read_bytes()
    m = parse_model(data)
    bias = next(m.tensors[op.inputs[2]] for op in m.operators if op.op == "CONV_2D")
    new = (np.arange(bias.shape[0], dtype="<i4") * 7).tobytes()
    patched = replace_constants(data, {bias.index: new})
    assert len(patched) == len(data) and constant_reader(patched)(parse_model(patched).tensors[bias.index]) == new
    with pytest.raises(ValueError):
        replace_constants(data, {bias.index: new + b"\0\0\0\0"})


def test_harm_at_the_output_ranks_before_the_layers_own_error():
    """A layer the output barely feels (its own SQNR low) goes after one that costs the output
    most; layers not measured at the output follow, by their own SQNR."""
    layers = [layer("early", "CONV_2D", 12.0, 5.0, output_sqnr_db=45.0),
              layer("add", "ADD", 30.0, 400.0, output_sqnr_db=18.0, range_inflation=50.0),
              layer("fc", "FULLY_CONNECTED", 20.0, 3.0)]
    assert [r["name"] for r in rank(layers)] == ["add", "early", "fc"]
    cause, _ = diagnose(layers[1] | {"sqnr_db": 14.0})
    assert "its range is 50x what 99.99% of its values need: one outlier sets the int8 step" in cause


@pytest.mark.parametrize("tensor, weights, name", [
    ("functional_2_1/conv3_1/Relu;functional_2_1/conv3_1/BiasAdd", None, "conv3"),
    ("StatefulPartitionedCall_1:0", "functional_2_1/fc_1/MatMul", "fc"),
    ("PartitionedCall:0", None, None),
])
def test_layers_are_named_by_their_keras_layer(tensor, weights, name):
    from edgeapp.core.quant.report import source_name

    assert source_name(tensor, weights) == name
