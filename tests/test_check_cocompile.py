"""Several models on one Edge TPU: `edgeapp check A B` says where each one's parameters go (on
the chip's cache or streamed every inference), predicted for CPU models compiled together in
the order given, read from compiled files (their Edge TPU package: executables and caching
token), and whether compiled files were compiled together."""

import json

import pytest
from conftest import SHARED, edgetpu_package, make_edgetpu_stand_in

from edgeapp.core.edgetpu.cocompile import compiled_together, share_cache
from edgeapp.core.edgetpu.package import EXECUTION_ONLY, PARAMETER_CACHING, STAND_ALONE, parameter_use
from edgeapp.core.edgetpu.specs import USABLE_CACHE_BYTES

MIB = 1024 * 1024


def test_the_cache_goes_to_the_models_in_the_order_given():
    first, second = share_cache([5 * MIB, 3 * MIB])
    assert (first.on_chip_bytes, first.off_chip_bytes) == (5 * MIB, 0)
    assert second.on_chip_bytes == USABLE_CACHE_BYTES - 5 * MIB
    assert second.on_chip_bytes + second.off_chip_bytes == 3 * MIB
    swapped = share_cache([3 * MIB, 5 * MIB])
    assert swapped[0].off_chip_bytes == 0 and swapped[1].off_chip_bytes == 8 * MIB - USABLE_CACHE_BYTES
    assert [s.on_chip_bytes for s in share_cache([9 * MIB, MIB])] == [USABLE_CACHE_BYTES, 0]


def test_compiled_together_means_one_caching_token():
    assert compiled_together([[7], [7]]) and not compiled_together([[7], [8]])
    assert not compiled_together([[7], []])  # a model that caches nothing shares no cache
    assert not compiled_together([[7]])


def _compiled(tiny_model, path, executables):
    return make_edgetpu_stand_in(tiny_model, path, custom_options=edgetpu_package(executables))


def test_a_compiled_file_says_what_it_caches_and_what_it_streams(tiny_model, tmp_path):
    cached = _compiled(tiny_model, tmp_path / "a_edgetpu.tflite",
                       [(EXECUTION_ONLY, 2368, 5), (PARAMETER_CACHING, 566912, 5)])
    use = parameter_use(cached.read_bytes(), str(cached))
    assert (use.on_chip_bytes, use.off_chip_bytes, use.caching_tokens) == (566912, 2368, (5,))
    alone = _compiled(tiny_model, tmp_path / "b_edgetpu.tflite", [(STAND_ALONE, 4096, 0)])
    use = parameter_use(alone.read_bytes(), str(alone))
    assert (use.on_chip_bytes, use.off_chip_bytes, use.caching_tokens) == (0, 4096, ())
    assert parameter_use(tiny_model.read_bytes(), str(tiny_model)) is None  # a CPU model


@pytest.mark.parametrize("tokens, together", [((11, 11), True), ((11, 12), False)])
def test_check_says_whether_compiled_models_share_the_cache(cli, tiny_model, tmp_path, tokens, together):
    a = _compiled(tiny_model, tmp_path / "a_edgetpu.tflite", [(EXECUTION_ONLY, 0, tokens[0]),
                                                             (PARAMETER_CACHING, 1000, tokens[0])])
    b = _compiled(tiny_model, tmp_path / "b_edgetpu.tflite", [(EXECUTION_ONLY, 0, tokens[1]),
                                                             (PARAMETER_CACHING, 3000, tokens[1])])
    r = cli("check", a, b, "--format", "json")
    report = json.loads(r.stdout)
    assert report["cache"]["compiled_together"] is together, report["cache"]
    assert [m["summary"]["on_chip_bytes"] for m in report["models"]] == [1000, 3000]
    assert report["cache"]["on_chip_bytes"] == 4000 and report["cache"]["off_chip_bytes"] == 0
    table = cli("check", a, b).stdout
    assert ("compiled together" if together else "compiled apart") in table.splitlines()[-4]


def test_cpu_models_are_predicted_in_the_order_given(cli, tiny_model):
    r = cli("check", tiny_model, tiny_model, "--format", "json")
    models = json.loads(r.stdout)["models"]
    assert [m["summary"]["parameters"] for m in models] == ["predicted", "predicted"]
    expected = share_cache([m["summary"]["parameter_bytes_tpu"] for m in models])
    assert [m["summary"]["on_chip_bytes"] for m in models] == [s.on_chip_bytes for s in expected]
    assert json.loads(cli("check", tiny_model, "--format", "json").stdout)["summary"]["on_chip_bytes"] \
        == expected[0].on_chip_bytes  # one model: the same report as before, with its cache line


def test_an_unreadable_edgetpu_package_leaves_the_check_standing(cli, tiny_model, tmp_path):
    broken = edgetpu_package([(PARAMETER_CACHING, 100, 3)])[:-7] + b"\x00\x00\x00\x00\x00\x24\x01"
    model = make_edgetpu_stand_in(tiny_model, tmp_path / "x_edgetpu.tflite", custom_options=broken)
    r = cli("check", model, "--format", "json")
    assert "Traceback" not in r.stderr and r.exception is None or isinstance(r.exception, SystemExit)
    assert json.loads(r.stdout)["summary"]["parameters"] == "unknown"


@pytest.mark.shared
def test_coral_cocompiled_models_are_recognised_as_compiled_together(cli):
    pair = sorted((SHARED / "cocompilation").glob("*_edgetpu.tflite"))
    report = json.loads(cli("check", *pair, "--format", "json").stdout)
    assert report["cache"]["compiled_together"] is True
    by_name = {m["model"].rsplit("/", 1)[1]: m["summary"] for m in report["models"]}
    assert by_name[pair[0].name]["on_chip_bytes"] == 566912  # v1 0.25/128, as the file records it
    assert by_name[pair[1].name]["on_chip_bytes"] == 1473280  # v1 0.5/160
    solo = [SHARED / "mobilenet_v1_0.25_128_quant_edgetpu.tflite", SHARED / "mobilenet_v1_0.5_160_quant_edgetpu.tflite"]
    report = json.loads(cli("check", *solo, "--format", "json").stdout)
    assert report["cache"]["compiled_together"] is False
    assert [m["summary"]["on_chip_bytes"] for m in report["models"]] == [566912, 1473280]


def _two_models(model_copy):
    other = model_copy.with_name("second.tflite")  # any full-int8 model: a second copy
    other.write_bytes(model_copy.read_bytes())
    return model_copy, other


def test_compile_cocompiles_in_one_call_and_reports_each_model(cli, fake_compiler, model_copy, tmp_path):
    first, second = _two_models(model_copy)
    out = tmp_path / "out"
    r = cli("compile", first, second, "-o", out, "--format", "json")
    assert r.exit_code == 0, r.stderr
    argv = fake_compiler.recorded()
    assert argv[-2:] == [str(first), str(second)]  # one compiler call, in the order given
    report = json.loads(r.stdout)
    assert [m["model"] for m in report["models"]] == [str(first), str(second)]
    size = first.stat().st_size
    for m in report["models"]:
        assert m["parameters"] == "printed"  # the stand-in writes CPU copies: no Edge TPU package to read
        assert abs(m["on_chip_bytes"] - size) <= 10 and m["off_chip_bytes"] == 0
        assert (out / f"{first.stem}_edgetpu.tflite").is_file() and (out / f"{second.stem}_edgetpu.tflite").is_file()
    assert (out / first.name).is_file() and (out / second.name).is_file()  # each CPU twin beside it
    table = cli("compile", first, second, "-o", out).stdout
    assert f"{second.name}" in table and "on-chip" in table


@pytest.mark.parametrize("args, says", [
    (("--segments", "2"), "--segments splits one model"),
])
def test_compile_refuses_what_cannot_be_cocompiled(cli, fake_compiler, model_copy, args, says):
    first, second = _two_models(model_copy)
    r = cli("compile", first, second, *args)
    assert r.exit_code == 2 and says in r.stderr, r.stderr


def test_two_models_of_one_name_are_refused(cli, fake_compiler, model_copy, tmp_path):
    twin = tmp_path / "elsewhere" / model_copy.name
    twin.parent.mkdir()
    twin.write_bytes(model_copy.read_bytes())
    r = cli("compile", model_copy, twin)
    assert r.exit_code == 2 and "would write the same" in r.stderr, r.stderr
