"""The bundled digits model (models/digits_int8.tflite) and its report: the report says which
TensorFlow and CPU built it, and there (or when it does not say) `scripts/build_default_model.py`
rebuilds the very same model and numbers (the build is deterministic per TensorFlow build, CPU
architecture and widest vector extension; others give other, equally stable, numbers)."""

import json
import os
import platform
import subprocess
import sys

import pytest
from conftest import ROOT

from edgeapp.hw.hostinfo import cpu_vector_isa

MODEL = ROOT / "models" / "digits_int8.tflite"
REPORT = json.loads((ROOT / "models" / "digits_int8.report.json").read_text())
EXTRACTOR = ROOT / "models" / "digits_embedding_int8.tflite"
SHAPES = ROOT / "models" / "retrain_samples"
SHAPES_CHECK = ROOT / "models" / "retrain_check"


def test_the_report_says_what_built_it():
    built = REPORT.get("built_with")
    assert built, "the report must say which TensorFlow and CPU made these numbers"
    assert {"tensorflow", "keras", "numpy", "python", "machine", "cpu_vector_isa"} <= set(built)


def test_the_build_reproduces_the_committed_model(tmp_path):
    pytest.importorskip("sklearn", reason="pip install scikit-learn (in the dev extra)")
    probe = subprocess.run([sys.executable, "-c", "import tensorflow as tf; print(tf.__version__)"],
                           capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if probe.returncode != 0:  # asked in a child: TensorFlow stays out of the test process
        pytest.skip("pip install 'edgeapp[convert]' (TensorFlow) to rebuild the model")
    tf_version = probe.stdout.strip().splitlines()[-1]
    built = REPORT.get("built_with")
    here = {"tensorflow": tf_version, "machine": platform.machine(), "cpu_vector_isa": cpu_vector_isa()}
    if built and {k: built.get(k) for k in here} != here:
        pytest.skip(f"the model was built with {built}; here {here} gives other, equally stable, numbers")
    out = tmp_path / "models"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "build_default_model.py"), "--out", str(out)],
                   check=True, capture_output=True, cwd=ROOT, timeout=900)
    report = json.loads((out / "digits_int8.report.json").read_text())
    for key in ("float_accuracy", "int8_accuracy", "agreement", "samples"):
        assert report[key] == REPORT[key], key
    assert (out / "digits_int8.tflite").read_bytes() == MODEL.read_bytes()
    assert (out / "digits_embedding_int8.tflite").read_bytes() == EXTRACTOR.read_bytes()
    drawn = sorted(p.relative_to(out) for p in (out / "retrain_samples").rglob("*.png"))
    assert drawn == sorted(p.relative_to(ROOT / "models") for p in SHAPES.rglob("*.png"))
    assert all((out / p).read_bytes() == (ROOT / "models" / p).read_bytes() for p in drawn)


BUILD_SCRIPT = ROOT / "scripts" / "build_default_model.py"


@pytest.mark.parametrize("hidden, named", [("sklearn", "scikit-learn"), ("tensorflow", "TensorFlow")])
def test_the_build_script_names_the_extra_it_needs(tmp_path, hidden, named):
    """In a venv with edgeapp but not scikit-learn (or TensorFlow), one line naming the extra,
    exit 7, nothing written; `None` in sys.modules is how Python itself blocks an import."""
    run = (f"import runpy, sys; sys.modules[{hidden!r}] = None; "
           f"sys.argv = [{str(BUILD_SCRIPT)!r}, '--out', {str(tmp_path / 'out')!r}]; "
           f"runpy.run_path({str(BUILD_SCRIPT)!r}, run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 7, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert named in lines[0] and "pip install '.[build]'" in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_the_build_extra_is_declared_and_the_readme_names_it():
    pyproject = (ROOT / "pyproject.toml").read_text()
    build = next(ln for ln in pyproject.splitlines() if ln.startswith("build = "))
    assert "edgeapp[convert]" in build and "scikit-learn" in build
    dev = next(ln for ln in pyproject.splitlines() if ln.startswith("dev = "))
    assert "build" in dev.split("]", 1)[0]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "pip install '.[build]' && python scripts/build_default_model.py" in readme


def test_the_shipped_extractor_is_recorded_as_one(cli):
    from edgeapp.core.learn.embedding import embedding_output
    from edgeapp.core.meta import read_meta
    from edgeapp.core.tflite.model import load_model

    meta = read_meta(EXTRACTOR)
    assert meta.task == "embed" and meta.labels is None
    assert embedding_output(load_model(EXTRACTOR)) == 32
    assert meta.extra["agreement"]["outputs"][0]["cosine"] >= 0.99


def test_retrain_runs_offline_on_what_ships(cli, tmp_path):
    """The README's try-it: the shipped extractor learns the shipped drawn shapes (classes it
    never saw), and the result classifies shapes it was not trained on."""
    classes = sorted(p.name for p in SHAPES.iterdir() if p.is_dir())
    assert len(classes) >= 3 and all(len(list((SHAPES / c).glob("*.png"))) >= 10 for c in classes)
    out = tmp_path / "shapes.tflite"
    r = cli("retrain", SHAPES, "--base", EXTRACTOR, "-o", out, "--format", "json")
    assert r.exit_code == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["classes"] == classes and report["val_accuracy"] >= 0.8, report
    r = cli("classify", out, SHAPES_CHECK, "--top-k", "1", "--format", "jsonl")
    assert r.exit_code == 0, r.stderr
    records = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(records) == len(list(SHAPES_CHECK.glob("*.png"))) >= len(classes)
    right = [rec for rec in records if rec["classes"][0]["label"] == rec["path"].rsplit("/", 1)[1].split("_")[0]]
    assert len(right) >= 0.7 * len(records), records


@pytest.mark.parametrize("flags, isa", [
    ("flags\t\t: fpu sse4_2 avx fma avx2 avx512f avx512bw", "avx512"),
    ("flags\t\t: fpu sse4_2 avx fma avx2", "avx2"),  # the AVX2 CPU whose build gave 0.9721, not 0.9749
    ("flags\t\t: fpu sse4_2", "sse4.2"),
    ("Features\t: fp asimd evtstrm crc32", "asimd"),  # a Raspberry Pi 4/5
    ("processor\t: 0", None),
])
def test_the_build_records_which_vector_extension_its_kernels_ran_on(tmp_path, flags, isa):
    """The rebuild is compared only on a CPU with the same widest vector extension: TensorFlow
    picks its kernels (and their float rounding) by it, so an AVX2 machine with the very same
    versions trains another, equally stable, model."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(f"processor\t: 0\n{flags}\n\nprocessor\t: 1\n{flags}\n")
    assert cpu_vector_isa(tmp_path) == isa
