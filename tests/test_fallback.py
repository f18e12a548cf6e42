"""Edge TPU → CPU fallback, for real: this machine has no Edge TPU and no libedgetpu."""

import json

import pytest
from conftest import ROOT

from edgeapp.core.naming import cpu_twin_path
from edgeapp.core.tflite.model import load_model
from edgeapp.errors import ExitCode
from edgeapp.hw.device_choice import parse_device
from edgeapp.hw.runtime import open_engine


def classes(stdout: str) -> list:
    return [(r["path"], r["device"], r["classes"]) for r in map(json.loads, stdout.splitlines())]


def test_stand_in_is_a_compiled_model_that_the_cpu_cannot_run(compiled_pair):
    compiled, twin = compiled_pair
    assert load_model(compiled).is_edgetpu_compiled
    assert not load_model(twin).is_edgetpu_compiled
    assert cpu_twin_path(compiled) == twin


def test_auto_runs_the_twin_on_cpu_and_says_why(cli, compiled_pair, color_images):
    compiled, twin = compiled_pair
    images = [color_images[c] for c in ("red", "green", "blue")]
    r = cli("classify", compiled, *images, "-f", "jsonl", "-k", "1")
    assert r.exit_code == 0, r.stderr
    assert "Edge TPU unavailable (no libedgetpu.so.1" in r.stderr
    assert f"running {twin.name} on CPU" in r.stderr
    got = classes(r.stdout)
    assert [c[0]["label"] for _, _, c in got] == ["red", "green", "blue"]
    assert {d for _, d, _ in got} == {"cpu"}
    direct = cli("classify", twin, *images, "-f", "jsonl", "-k", "1")
    assert [c for _, _, c in classes(direct.stdout)] == [c for _, _, c in got]


def test_missing_twin_is_a_clear_error(cli, compiled_pair, tmp_path, color_images):
    lonely = tmp_path / "lonely_edgetpu.tflite"
    lonely.write_bytes(compiled_pair[0].read_bytes())
    r = cli("classify", lonely, color_images["red"])
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE
    assert "lonely.tflite was not found" in r.stderr and "--cpu-model" in r.stderr
    assert r.stderr.count("\n") <= 2 and "Traceback" not in r.stderr


def test_cpu_model_option_names_the_twin(cli, compiled_pair, tmp_path, color_images):
    lonely = tmp_path / "other_edgetpu.tflite"
    lonely.write_bytes(compiled_pair[0].read_bytes())
    r = cli("classify", lonely, color_images["blue"], "--cpu-model", compiled_pair[1], "-k", "1")
    assert r.exit_code == 0, r.stderr
    assert "blue" in r.stdout


@pytest.mark.parametrize("device", ["edgetpu", "usb", "usb:0", "pci:1", ":0"])
def test_explicit_tpu_never_falls_back(cli, compiled_pair, color_images, device):
    r = cli("classify", compiled_pair[0], color_images["red"], "--device", device)
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE
    assert "libedgetpu" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_global_device_option_applies(cli, compiled_pair, color_images):
    r = cli("--device", "usb", "classify", compiled_pair[0], color_images["red"])
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE


def test_device_cpu_with_compiled_model_uses_twin(cli, compiled_pair, color_images):
    r = cli("classify", compiled_pair[0], color_images["green"], "--device", "cpu", "-k", "1", "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    assert classes(r.stdout)[0][2][0]["label"] == "green"


def test_uncompiled_model_on_explicit_tpu_says_compile_first(cli, tiny_model, color_images):
    r = cli("classify", tiny_model, color_images["red"], "--device", "edgetpu")
    assert r.exit_code == ExitCode.USAGE
    assert "edgeapp compile" in r.stderr


def test_bad_device_string(cli, tiny_model, color_images):
    r = cli("classify", tiny_model, color_images["red"], "--device", "gpu:0")
    assert r.exit_code == ExitCode.USAGE
    assert "invalid device 'gpu:0'" in r.stderr


@pytest.mark.parametrize("text,kind,option", [
    ("auto", "auto", None), ("CPU", "cpu", None), ("edgetpu", "edgetpu", None),
    ("usb", "edgetpu", "usb"), ("usb:1", "edgetpu", "usb:1"), ("pci:0", "edgetpu", "pci:0"),
    (":2", "edgetpu", ":2")])
def test_parse_device(text, kind, option):
    spec = parse_device(text)
    assert (spec.kind, spec.option) == (kind, option)


def test_open_model_reports_device_and_model(compiled_pair):
    engine = open_engine(compiled_pair[0], "auto")
    assert engine.device == "cpu"
    assert engine.model_path == str(compiled_pair[1])
    assert "Edge TPU unavailable" in engine.notice


@pytest.mark.shared
def test_coral_compiled_model_falls_back_to_its_twin(cli):
    from conftest import SHARED

    images = [SHARED / "cat.bmp", SHARED / "grace_hopper.bmp"]
    labels = SHARED / "imagenet_labels.txt"
    fallback = cli("classify", SHARED / "mobilenet_v1_0.25_128_quant_edgetpu.tflite", *images,
                   "--labels", labels, "-f", "jsonl")
    twin = cli("classify", SHARED / "mobilenet_v1_0.25_128_quant.tflite", *images,
               "--labels", labels, "-f", "jsonl")
    assert fallback.exit_code == twin.exit_code == 0
    assert "running mobilenet_v1_0.25_128_quant.tflite on CPU" in fallback.stderr
    assert [c for _, _, c in classes(fallback.stdout)] == [c for _, _, c in classes(twin.stdout)]


def test_a_twin_that_does_not_match_is_refused(cli, compiled_pair, tmp_path, color_images):
    """Running some other model as the twin would give confident nonsense: refuse it."""
    wrong = tmp_path / "wrong.tflite"
    wrong.write_bytes((ROOT / "models" / "digits_int8.tflite").read_bytes())
    r = cli("classify", compiled_pair[0], color_images["red"], "--cpu-model", wrong)
    assert r.exit_code == ExitCode.MODEL_INVALID and "does not match" in r.stderr
    r = cli("classify", compiled_pair[0], color_images["red"], "--cpu-model", compiled_pair[0])
    assert r.exit_code == ExitCode.USAGE and "compiled model itself" in r.stderr
