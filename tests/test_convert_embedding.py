"""`convert` on an embedding extractor (a Keras model cut after its global average pool, the
route docs/retrain.md suggests): the output is recognised as features, agreement is measured as
cosine and SQNR only (no top-1 against the class folders, no warning that the folders' labels
do not fit its D "classes"), and the sidecar records the task `embed` without labels; `retrain`
takes the result and `classify` says what it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from retrain_models import KERAS_CUT

from edgeapp.core.meta import read_meta
from edgeapp.core.tflite.model import load_model


@pytest.fixture(scope="module")
def cut_and_converted(tiny_keras, tiny_data, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("embedding") / "features.tflite"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "EDGEAPP_CACHE_DIR": str(out.parent / ".cache"),
           "KERAS_HOME": str(out.parent / ".keras"), "MPLCONFIGDIR": str(out.parent / ".matplotlib")}
    cut = out.with_suffix(".keras")
    subprocess.run([sys.executable, "-c", KERAS_CUT, str(tiny_keras), str(cut)], check=True, cwd=ROOT, env=env)
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "convert", str(cut), "-o", str(out),
                           "--calibration", str(tiny_data / "train"), "--samples", "100",
                           "--eval", str(tiny_data / "test"), "--format", "json"],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = subprocess.run([sys.executable, "-m", "edgeapp", "convert", str(cut), "-o",
                            str(out.with_name("again.tflite")), "--calibration", str(tiny_data / "train"),
                            "--samples", "100", "--eval", str(tiny_data / "test")],
                           capture_output=True, text=True, cwd=ROOT, env=env)
    assert table.returncode == 0, table.stderr[-3000:]
    return {"path": out, "report": json.loads(proc.stdout), "stderr": proc.stderr + table.stderr,
            "table": table.stdout}


def test_an_embedding_output_is_measured_by_agreement_only(cut_and_converted):
    report = cut_and_converted["report"]
    assert report["task"] == "embed" and report["embedding_depth"] == 8
    for key in ("agreement", "float_accuracy", "int8_accuracy", "float_top5", "int8_top5"):
        assert report[key] is None, key
    (out,) = report["agreement_detail"]["outputs"]
    assert out["shape"][-1] == 8 and out["cosine"] >= 0.99 and out["sqnr_db"] > 15
    assert "label(s) for the model's" not in cut_and_converted["stderr"]
    table = cut_and_converted["table"]
    assert "accuracy" not in table and "top-1" not in table
    assert "embedding extractor (8-d feature vector" in " ".join(table.split())


def test_the_sidecar_records_an_embedding_without_labels(cut_and_converted):
    from edgeapp.core.learn.embedding import embedding_output

    path = cut_and_converted["path"]
    meta = read_meta(path)
    assert meta.task == "embed" and meta.labels is None
    assert meta.extra["agreement"]["outputs"][0]["cosine"] >= 0.99
    assert embedding_output(load_model(path)) == 8


def test_retrain_takes_it_and_classify_says_it_is_one(cut_and_converted, tiny_data, tmp_path, cli):
    path = cut_and_converted["path"]
    r = cli("classify", path, tiny_data / "test")
    assert r.exit_code == 0, r.stderr
    assert "looks like an embedding model" in r.stderr and "label(s)" not in r.stderr
    mine = tmp_path / "mine.tflite"
    r = cli("retrain", tiny_data / "train", "--base", path, "-o", mine, "--format", "json")
    assert r.exit_code == 0, r.stderr
    classes = sorted(p.name for p in (tiny_data / "train").iterdir() if p.is_dir())
    meta = read_meta(mine)
    assert [meta.labels[i] for i in sorted(meta.labels)] == classes and meta.task != "embed"
    r = cli("classify", mine, tiny_data / "test", "--format", "jsonl")
    assert r.exit_code == 0 and "embedding" not in r.stderr, r.stderr


def test_a_classifier_is_no_embedding(converted):
    from edgeapp.core.learn.embedding import embedding_output

    assert embedding_output(load_model(converted["path"])) is None
    assert read_meta(converted["path"]).task == "classify"
