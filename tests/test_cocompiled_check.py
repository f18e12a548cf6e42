"""A co-compiled model's first run on an Edge TPU is checked against its CPU twin, once per model
file: the comparison on arrays, the wiring with injected engines (the Engine protocol), and a
whole command on the stand-in Edge TPU, whose custom op gives outputs unlike the CPU model's."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED, edgetpu_package, make_edgetpu_stand_in

from edgeapp.core.edgetpu.agreement import TOLERANCE_STEPS, check_input, compare_with_twin
from edgeapp.core.edgetpu.package import EXECUTION_ONLY, PARAMETER_CACHING
from edgeapp.core.tflite.model import load_model
from edgeapp.errors import ExitCode, InvalidModel
from edgeapp.hw.cocompiled import cocompiled_partners, verify_cocompiled
from edgeapp.hw.runtime import open_engine
from edgeapp.hw.verdicts import VerdictCache

# -- the comparison ------------------------------------------------------------------------------


def test_outputs_within_the_rounding_agree_and_wrong_ones_do_not():
    want = [np.array([[0, 10, 200, 255]], np.uint8), np.array([[-128, 0, 127]], np.int8)]
    assert compare_with_twin(want, want).max_steps == 0
    near = [np.array([[2, 9, 198, 253]], np.uint8), np.array([[-127, 1, 127]], np.int8)]
    assert compare_with_twin(near, want).agree and compare_with_twin(near, want).max_steps == 2
    wrong = [want[0], np.array([[-128, 60, 127]], np.int8)]
    verdict = compare_with_twin(wrong, want)
    assert not verdict.agree and (verdict.max_steps, verdict.output) == (60, 1)
    assert compare_with_twin([want[0]], want).max_steps == float("inf")  # an output missing
    assert compare_with_twin([want[0], want[1][:, :2]], want).max_steps == float("inf")
    assert compare_with_twin(near, want, tolerance=1).agree is False


def test_float_outputs_count_steps_of_their_range_and_forgive_a_reordering():
    boxes = np.array([[0.1, 0.1, 0.5, 0.5], [0.2, 0.3, 0.9, 0.8]], np.float32)
    swapped = boxes[::-1].copy()  # two detections whose scores tied swap places
    assert compare_with_twin([swapped], [boxes]).agree
    step = (boxes.max() - boxes.min()) / 255
    moved = boxes + np.float32(3 * step)
    assert compare_with_twin([moved], [boxes]).max_steps == pytest.approx(3, abs=0.01)
    garbage = np.array([[0.9, 0.0, 0.1, 0.2], [0.7, 0.6, 0.0, 0.05]], np.float32)
    assert not compare_with_twin([garbage], [boxes]).agree


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.float32])
def test_the_check_input_is_deterministic_and_spans_the_input_type(dtype):
    x = check_input((1, 16, 16, 3), dtype)
    assert x.dtype == dtype and x.shape == (1, 16, 16, 3)
    assert np.array_equal(x, check_input((1, 16, 16, 3), dtype))
    low, high = (0.0, 1.0) if dtype == np.float32 else (np.iinfo(dtype).min, np.iinfo(dtype).max)
    assert x.min() == low and x.max() == high
    assert len(np.unique(x)) > 50  # an image-like pattern, not a constant


# -- knowing a model was co-compiled -------------------------------------------------------------

def _compiled(cpu_model: Path, path: Path, token: int, cached: int = 1000) -> Path:
    package = edgetpu_package([(EXECUTION_ONLY, 0, token), (PARAMETER_CACHING, cached, token)])
    return make_edgetpu_stand_in(cpu_model, path, custom_options=package)


@pytest.fixture()
def cocompiled(tiny_model, tmp_path) -> dict:
    """As `edgeapp compile a.tflite b.tflite` leaves them: two compiled models of one call (one
    caching token) with their CPU twins, and a model compiled alone, in one folder."""
    folder = tmp_path / "models"
    folder.mkdir()
    for stem in ("a", "b", "solo"):
        shutil.copy(tiny_model, folder / f"{stem}.tflite")
        shutil.copy(tiny_model.with_suffix(".json"), folder / f"{stem}.json")
    return {"a": _compiled(tiny_model, folder / "a_edgetpu.tflite", 41),
            "b": _compiled(tiny_model, folder / "b_edgetpu.tflite", 41, cached=2000),
            "solo": _compiled(tiny_model, folder / "solo_edgetpu.tflite", 42)}


def test_a_model_is_cocompiled_when_a_compiled_model_beside_it_shares_its_token(cocompiled, tmp_path):
    assert cocompiled_partners(cocompiled["a"]) == [cocompiled["b"]]
    assert cocompiled_partners(cocompiled["solo"]) == []
    copy = cocompiled["solo"].with_name("solo_copy_edgetpu.tflite")
    shutil.copy(cocompiled["solo"], copy)
    assert cocompiled_partners(cocompiled["solo"]) == []  # a copy of a file is no partner


@pytest.mark.shared
def test_corals_cocompiled_models_are_recognised_and_their_solo_compiles_are_not():
    folder = SHARED / "cocompilation"
    small, large = sorted(folder.glob("*_edgetpu.tflite"))
    assert cocompiled_partners(small) == [large] and cocompiled_partners(large) == [small]
    for solo in ("mobilenet_v1_0.25_128_quant_edgetpu.tflite", "mobilenet_v1_0.5_160_quant_edgetpu.tflite"):
        assert cocompiled_partners(SHARED / solo) == []


# -- the check, with engines injected through the Engine protocol ---------------------------------

class OnTheTpu:
    """A stand-in for a model opened on an Edge TPU: the CPU engine's outputs, moved by `off`
    quantized steps (a co-compile gone wrong), its invokes counted."""

    def __init__(self, compiled: Path, cpu_engine, off: int = 0) -> None:
        self.cpu, self.off, self.runs = cpu_engine, off, 0
        self.model = load_model(compiled)
        self.inputs, self.input, self.outputs = cpu_engine.inputs, cpu_engine.input, cpu_engine.outputs
        self.input_shape, self.input_dtype = cpu_engine.input_shape, cpu_engine.input_dtype
        self.input_quantization = cpu_engine.input_quantization
        self.model_path = self.requested_model = str(compiled)
        self.device, self.name, self.notice, self.cpu_kernels = "edgetpu", "usb:0", None, "fast"

    def run(self, tensor):
        self.runs += 1
        return [np.clip(o.astype(np.int64) + self.off, 0, 255).astype(o.dtype) for o in self.cpu.run(tensor)]


def _twin_of(compiled: Path):
    return lambda: open_engine(compiled, "cpu", trust_model=True)


@pytest.fixture()
def cache(tmp_path) -> VerdictCache:
    return VerdictCache(tmp_path / "cache")


def test_a_cocompiled_model_that_gives_its_twins_outputs_runs_silently_and_once(cocompiled, cache):
    a = cocompiled["a"]
    tpu = OnTheTpu(a, open_engine(a.with_name("a.tflite"), "cpu", trust_model=True))
    said: list = []
    agreement = verify_cocompiled(tpu, _twin_of(a), "warn", said.append, cache)
    assert agreement is not None and agreement.agree and agreement.max_steps == 0
    assert said == [] and tpu.runs == 1
    again = verify_cocompiled(tpu, _twin_of(a), "strict", said.append, cache)
    assert again == agreement and tpu.runs == 1 and said == []  # the verdict is cached: not run again


def test_a_cocompiled_model_whose_outputs_differ_is_said_or_refused(cocompiled, cache):
    a = cocompiled["a"]
    tpu = OnTheTpu(a, open_engine(a.with_name("a.tflite"), "cpu", trust_model=True), off=40)
    said: list = []
    agreement = verify_cocompiled(tpu, _twin_of(a), "warn", said.append, cache)
    assert agreement is not None and not agreement.agree
    assert len(said) == 1 and said[0].startswith("warning: a_edgetpu.tflite, co-compiled with b_edgetpu.tflite")
    assert f"by up to {int(agreement.max_steps)} quantized steps" in said[0]
    assert agreement.max_steps > TOLERANCE_STEPS and "compile it alone" in said[0]
    with pytest.raises(InvalidModel, match="verdict cached"):  # from the cache: no second invoke
        verify_cocompiled(tpu, _twin_of(a), "strict", said.append, cache)
    assert tpu.runs == 1


def test_models_compiled_alone_on_the_cpu_or_with_the_check_off_are_not_run(cocompiled, cache):
    solo, a = cocompiled["solo"], cocompiled["a"]
    cpu = open_engine(a.with_name("a.tflite"), "cpu", trust_model=True)
    for engine, mode in ((OnTheTpu(solo, cpu, off=40), "strict"), (OnTheTpu(a, cpu, off=40), "off")):
        assert verify_cocompiled(engine, _twin_of(a), mode, cache=cache) is None and engine.runs == 0
    assert verify_cocompiled(cpu, _twin_of(a), "strict", cache=cache) is None  # on the CPU: nothing to compare


def test_without_a_cpu_twin_the_check_says_once_why_it_could_not_run(cocompiled, cache):
    a = cocompiled["a"]
    cpu = open_engine(a.with_name("a.tflite"), "cpu", trust_model=True)
    a.with_name("a.tflite").unlink()
    said: list = []
    assert verify_cocompiled(OnTheTpu(a, cpu), _twin_of(a), "strict", said.append, cache) is None
    assert len(said) == 1 and "could not be checked" in said[0] and "--cpu-model" in said[0], said


# -- a whole command on the stand-in Edge TPU ------------------------------------------------------

def test_classify_warns_once_per_model_file_and_strict_ends_with_exit_4(tpus, cli, cocompiled, images):
    tpus("usb")  # its custom op hashes the input: nothing like the CPU model's outputs
    r = cli("classify", cocompiled["a"], images[0], "-d", "usb:0", "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    assert "warning: a_edgetpu.tflite, co-compiled with b_edgetpu.tflite" in r.stderr
    assert r.stdout.strip()  # it still ran
    r = cli("classify", cocompiled["a"], images[0], "-d", "usb:0", "--cocompiled-check", "strict")
    assert r.exit_code == ExitCode.MODEL_INVALID and "verdict cached" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = cli("classify", cocompiled["solo"], images[0], "-d", "usb:0")
    assert r.exit_code == 0 and "co-compiled" not in r.stderr, r.stderr


def test_the_api_takes_the_check_as_the_cli_does(tpus, cocompiled, images):
    import edgeapp
    from edgeapp.errors import UsageError

    tpus("usb")
    with edgeapp.open_model(cocompiled["a"], "usb:0", cocompiled_check="off") as model:
        assert model.device == "edgetpu"
    with pytest.raises(InvalidModel, match="co-compiled with b_edgetpu.tflite"):
        edgeapp.open_model(cocompiled["a"], "usb:0", cocompiled_check="strict")
    with pytest.raises(UsageError, match="cocompiled_check='loud'"):
        edgeapp.open_model(cocompiled["a"], "usb:0", cocompiled_check="loud")
