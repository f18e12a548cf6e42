"""The TFLite runtimes edgeapp runs: TensorFlow's as a runtime (quiet, and checked by doctor
before its pair is called ok), one found through EDGEAPP_RUNTIME_PATH, and one that dies
natively on every model (blamed, and no model's verdict cached for it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cli_run import edgeapp, error_lines
from conftest import ROOT, default_runtime

from edgeapp.errors import ExitCode


def test_runtime_tensorflow_classifies(tiny_model, color_images):
    r = edgeapp("classify", "--runtime", "tensorflow", tiny_model, color_images["red"], "-f", "jsonl",
                "-k", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["classes"][0]["label"] == "red"
    assert "Warning" not in r.stderr and "internal error" not in r.stderr


def test_the_runtime_tensorflow_says_nothing_of_its_own(tiny_model, color_images):
    pytest.importorskip("tensorflow")
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    r = subprocess.run([sys.executable, "-m", "edgeapp", "classify", "--runtime", "tensorflow",
                        str(tiny_model), str(color_images["red"]), "-k", "1"],
                       capture_output=True, text=True, cwd=ROOT, env=environ)
    assert r.returncode == 0, r.stderr
    assert "red" in r.stdout
    assert [ln for ln in r.stderr.splitlines() if not ln.startswith("edgeapp: ")] == []


def test_doctor_checks_the_tensorflow_runtime_before_calling_its_pair_ok(fake_libs, tmp_path):
    env = {"EDGEAPP_EDGETPU_LIB": str(fake_libs["LOADS"]), "EDGEAPP_CACHE_DIR": str(tmp_path)}
    r = edgeapp("doctor", "--format", "json", env=env)
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["runtime tensorflow"]["status"] == "ok", checks["runtime tensorflow"]
    assert checks["pair tensorflow"]["status"] == "ok"


def test_a_pair_whose_runtime_does_not_import_is_not_ok(fake_libs, tmp_path):
    from edgeapp.flows.doctor.install import FAIL, Check, library_checks

    env = {"EDGEAPP_EDGETPU_LIB": str(fake_libs["LOADS"]), "EDGEAPP_CACHE_DIR": str(tmp_path),
           "PATH": os.environ.get("PATH", "")}
    broken = Check("runtime tensorflow", FAIL, "2.21 does not import: ImportError", "pip install ...")
    lib, pair = library_checks(env, {"tensorflow": "2.21"}, imports={"tensorflow": broken})
    assert lib.status == "ok" and pair.status == FAIL and "does not import" in pair.detail


STAND_IN_RUNTIME = '''
"""A TFLite runtime that dies natively (FAKE_RUNTIME_CRASH=all: on every model; =user: on every
model but edgeapp's known-good one), else ai-edge-litert's."""
import os
import signal

from ai_edge_litert.interpreter import *  # noqa
from ai_edge_litert import interpreter as _real


class Interpreter(_real.Interpreter):
    def __init__(self, model_path=None, **kw):
        mode = os.environ.get("FAKE_RUNTIME_CRASH", "")
        if mode == "all" or (mode == "user" and "known-good" not in str(model_path)):
            os.kill(os.getpid(), signal.SIGSEGV)
        super().__init__(model_path=model_path, **kw)
'''


@pytest.fixture(scope="module")
def crashing_runtime(tmp_path_factory) -> dict:
    """tflite-runtime 2.14.0 in a folder of $EDGEAPP_RUNTIME_PATH (where edgeapp and the model
    check's `python -I` child look first, in a venv or outside one), standing in for a runtime
    broken on this machine."""
    if default_runtime()[0] != "ai-edge-litert":
        pytest.skip("the stand-in runtime wraps ai-edge-litert")
    folder = tmp_path_factory.mktemp("runtimes")
    (folder / "tflite_runtime").mkdir()
    (folder / "tflite_runtime" / "__init__.py").write_text("")
    (folder / "tflite_runtime" / "interpreter.py").write_text(STAND_IN_RUNTIME)
    info = folder / "tflite_runtime-2.14.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tflite-runtime\nVersion: 2.14.0\n")
    return {"EDGEAPP_RUNTIME_PATH": str(folder)}


def test_a_runtime_on_edgeapp_runtime_path_is_found_by_commands_and_doctor(
        crashing_runtime, tiny_model, color_images, tmp_path):
    """EDGEAPP_RUNTIME_PATH's folders come first for every command and for doctor's import
    check, which runs in a `python -I` child (PYTHONPATH and user site ignored)."""
    environ = {**crashing_runtime, "EDGEAPP_CACHE_DIR": str(tmp_path)}
    r = edgeapp("classify", "--runtime", "tflite-runtime", tiny_model, color_images["red"], "-f",
                "jsonl", "-k", "1", env=environ)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["classes"][0]["label"] == "red"
    r = edgeapp("doctor", "-f", "json", env=environ)
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["runtime tflite-runtime"]["status"] == "ok", checks.get("runtime tflite-runtime")
    assert checks["runtime tflite-runtime"]["detail"] == "2.14.0, imports"


@pytest.mark.parametrize("spawn", ["0", "1"], ids=["fork", "spawn"])
def test_a_runtime_dying_on_every_model_is_blamed_and_nothing_is_cached(
        crashing_runtime, tiny_model, color_images, tmp_path, spawn):
    cache = tmp_path / "cache"
    environ = {**crashing_runtime, "EDGEAPP_CACHE_DIR": str(cache), "EDGEAPP_PROBE_SPAWN": spawn}
    r = edgeapp("classify", "--runtime", "tflite-runtime", tiny_model, color_images["red"],
                env={**environ, "FAKE_RUNTIME_CRASH": "all"})
    assert r.returncode == ExitCode.MISSING_DEPENDENCY, r.stderr
    (line,) = error_lines(r.stderr)
    assert "the TFLite runtime tflite-runtime 2.14.0 dies on every model here" in line
    assert f"so {tiny_model} is not to blame" in line and "edgeapp doctor" in line
    assert "pip install --force-reinstall tflite-runtime" in line
    if (cache / "probe.json").exists():
        assert json.loads((cache / "probe.json").read_text())["models"] == {}

    r = edgeapp("classify", "--runtime", "tflite-runtime", tiny_model, color_images["red"],
                env={**environ, "FAKE_RUNTIME_CRASH": "user"})  # the known-good model runs: the file
    assert r.returncode == ExitCode.MODEL_INVALID, r.stderr
    (line,) = error_lines(r.stderr)
    assert "crashes the TFLite runtime tflite-runtime 2.14.0 (SIGSEGV)" in line
    (entry,) = json.loads((cache / "probe.json").read_text())["models"].values()
    assert entry["status"] == "crash"


def test_the_verdict_cache_counts_every_verdict_it_acts_on(tmp_path):
    from edgeapp.hw.verdicts import ModelKey, Pair, Verdict, VerdictCache

    cache = VerdictCache(tmp_path)
    assert cache.describe().startswith("no cached probe or model-check verdicts")
    for i in range(5):
        cache.put_model(ModelKey(f"{i:064x}", "ai-edge-litert", "2.3.0"), Verdict("crash", "dies"), f"m{i}")
    cache.put_model(ModelKey("f" * 64, "ai-edge-litert", "2.3.0"), Verdict("pass", ""), "ok")
    cache.put(Pair("ai-edge-litert", "2.3.0", "/lib/libedgetpu.so.1", "a" * 64), Verdict("pass", ""))
    assert cache.counts() == {"pairs": {"pass": 1}, "models": {"crash": 5, "pass": 1}}
    text = cache.describe()
    assert text.startswith("7 cached verdict(s): Edge TPU pairs pass 1; model files crash 5, pass 1")
    assert "5 refused until `edgeapp doctor --forget-probes`" in text


NUMPY_1_RUNTIME = '''
"""tflite-runtime 2.14 (built for numpy 1.x) under numpy 2: it imports, saying so on stderr,
and its extension then fails on every model, the failed numpy import chained under the
SystemError CPython raises for it."""
import sys

sys.stderr.write("\\nA module that was compiled using NumPy 1.x cannot be run in\\nNumPy 2.1.3 as it "
                 "may crash. To support both 1.x and 2.x\\nversions of NumPy, modules must be "
                 "compiled with NumPy 2.0.\\n")


class Interpreter:
    def __init__(self, model_path=None, **kw):
        try:
            raise ImportError("numpy.core.multiarray failed to import")
        except ImportError as e:
            raise SystemError("<built-in method CreateWrapperFromFile of PyCapsule object at "
                              "0x7f3a2c1d5e30> returned a result with an exception set") from e
'''


@pytest.mark.parametrize("probe", ["checked in a child", "--no-probe"])
def test_a_runtime_built_for_numpy_1_is_the_runtimes_failure_not_the_models(tiny_model, color_images,
                                                                              tmp_path, probe):
    """Exit 7 naming numpy and the extra that pins it, not exit 4 "model invalid"; no verdict
    is cached against the model."""
    folder = tmp_path / "runtimes"
    (folder / "tflite_runtime").mkdir(parents=True)
    (folder / "tflite_runtime" / "__init__.py").write_text("")
    (folder / "tflite_runtime" / "interpreter.py").write_text(NUMPY_1_RUNTIME)
    info = folder / "tflite_runtime-2.14.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tflite-runtime\nVersion: 2.14.0\n")
    cache = tmp_path / "cache"
    extra = ["--no-probe"] if probe == "--no-probe" else []
    r = edgeapp("classify", "--runtime", "tflite-runtime", tiny_model, color_images["red"], *extra,
                env={"EDGEAPP_RUNTIME_PATH": str(folder), "EDGEAPP_CACHE_DIR": str(cache)})
    assert r.returncode == ExitCode.MISSING_DEPENDENCY, r.stderr
    (line,) = error_lines(r.stderr)
    assert "tflite-runtime 2.14.0 was built for another numpy than numpy " in line
    assert "pip install 'edgeapp[tflite-runtime]' (tflite-runtime with numpy<2)" in line
    if (cache / "probe.json").exists():
        assert json.loads((cache / "probe.json").read_text())["models"] == {}


def test_the_tflite_runtime_hint_names_the_extra_that_pins_numpy(tiny_model, color_images, tmp_path):
    r = edgeapp("classify", "--runtime", "tflite-runtime", tiny_model, color_images["red"],
                env={"EDGEAPP_RUNTIME_PATH": str(tmp_path)})
    if r.returncode != ExitCode.MISSING_DEPENDENCY:
        pytest.skip("tflite-runtime is installed here")
    (line,) = error_lines(r.stderr)
    assert "runtime 'tflite-runtime' is not installed (pip install 'edgeapp[tflite-runtime]'" in line
