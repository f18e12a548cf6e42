"""The bundled digits model (models/digits_int8.tflite) and its report: the report says which
TensorFlow and CPU built it, and there (or when it does not say) `scripts/build_default_model.py`
rebuilds the very same model and numbers (the build is deterministic per TensorFlow build and
CPU architecture; others give other, equally stable, numbers)."""

import json
import os
import platform
import subprocess
import sys

import pytest
from conftest import ROOT

MODEL = ROOT / "models" / "digits_int8.tflite"
REPORT = json.loads((ROOT / "models" / "digits_int8.report.json").read_text())


def test_the_report_says_what_built_it():
    built = REPORT.get("built_with")
    assert built, "the report must say which TensorFlow and CPU made these numbers"
    assert {"tensorflow", "keras", "numpy", "python", "machine"} <= set(built)


def test_the_build_reproduces_the_committed_model(tmp_path):
    pytest.importorskip("sklearn", reason="pip install scikit-learn (in the dev extra)")
    probe = subprocess.run([sys.executable, "-c", "import tensorflow as tf; print(tf.__version__)"],
                           capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if probe.returncode != 0:  # asked in a child: TensorFlow stays out of the test process
        pytest.skip("pip install 'edgeapp[convert]' (TensorFlow) to rebuild the model")
    tf_version = probe.stdout.strip().splitlines()[-1]
    built = REPORT.get("built_with")
    here = {"tensorflow": tf_version, "machine": platform.machine()}
    if built and {k: built.get(k) for k in here} != here:
        pytest.skip(f"the model was built with {built}; here {here} gives other, equally stable, numbers")
    out = tmp_path / "models"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "build_default_model.py"), "--out", str(out)],
                   check=True, capture_output=True, cwd=ROOT, timeout=900)
    report = json.loads((out / "digits_int8.report.json").read_text())
    for key in ("float_accuracy", "int8_accuracy", "agreement", "samples"):
        assert report[key] == REPORT[key], key
    assert (out / "digits_int8.tflite").read_bytes() == MODEL.read_bytes()
