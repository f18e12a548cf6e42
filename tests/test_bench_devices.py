"""`bench --device` reads device lists as every command does (`...,auto`: those TPUs, then the
CPU twin when none is left; `all`: bench also measures the CPU), and a benchmark that measured
nothing is never a success. No Edge TPU library here (bench_env), or the stand-in's TPUs."""

import json
import shutil

import pytest
from standin import write_segments

from edgeapp.errors import ExitCode


def _doc(result) -> dict:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _rows(doc: dict) -> list:
    return [(r.get("device_name") or r["device"], r["available"]) for r in doc["results"]]


@pytest.mark.parametrize("device", ["all,auto", "ALL, auto", "usb:0,auto", "pci:0,usb:1,auto"])
def test_a_list_ending_in_auto_measures_the_cpu_twin_without_a_tpu(cli, compiled_pair, bench_env, device):
    doc = _doc(cli("bench", compiled_pair[0], "--device", device, "--runs", "3", "--warmup", "0",
                   "-f", "json"))
    cpu = [r for r in doc["results"] if r["available"]]
    assert [r["device"] for r in cpu] == ["cpu"] and cpu[0]["model"] == str(compiled_pair[1])
    missing = [r for r in doc["results"] if not r["available"]]
    assert missing and all("libedgetpu" in r["reason"] for r in missing)
    assert all(r["device"] == "edgetpu" for r in missing)


def test_the_global_device_list_reaches_bench_as_it_reaches_classify(cli, tiny_model, bench_env,
                                                                      monkeypatch):
    monkeypatch.setenv("EDGEAPP_DEVICE", "all,auto")
    doc = _doc(cli("bench", tiny_model, "--runs", "3", "--warmup", "0", "-f", "json"))
    assert _rows(doc) == [("cpu", True), ("edgetpu", False)]  # as plain --device all gives
    table = cli("bench", tiny_model, "--runs", "3", "--warmup", "0")
    assert table.exit_code == 0, table.stderr
    assert "edgetpu  unavailable: " in table.stdout


def test_a_named_tpu_without_auto_is_still_an_error(cli, compiled_pair, bench_env):
    r = cli("bench", compiled_pair[0], "--device", "usb:0", "--runs", "3")
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE and "libedgetpu" in r.stderr
    r = cli("bench", compiled_pair[0], "--device", "usb:0,usb:1", "--runs", "3")
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE and "libedgetpu" in r.stderr


def test_auto_in_a_list_leaves_the_cpu_out_while_a_tpu_runs(tpus, cli, compiled_pair):
    tpus("usb")
    doc = _doc(cli("bench", compiled_pair[0], "-d", "usb:0,auto", "--runs", "3", "--warmup", "0",
                   "-f", "json"))
    assert _rows(doc) == [("usb:0", True)]
    tpus("none")
    doc = _doc(cli("bench", compiled_pair[0], "-d", "usb:0,auto", "--runs", "3", "--warmup", "0",
                   "-f", "json"))
    assert _rows(doc) == [("usb:0", False), ("cpu", True)]


@pytest.fixture()
def segments(tmp_path, tiny_model):
    folder = tmp_path / "segs"
    write_segments(folder)
    shutil.copy(tiny_model, folder / "colors.tflite")  # the whole model, the segments' CPU twin
    return folder / "colors"


@pytest.mark.parametrize("device", ["all", "all,auto", "auto", "cpu", "usb:0,usb:1,pci:0,auto"])
def test_a_segment_set_without_enough_tpus_measures_the_whole_model(tpus, cli, segments, device):
    tpus("usb")
    doc = _doc(cli("bench", segments, "-d", device, "--runs", "3", "--warmup", "0", "-f", "json"))
    assert _rows(doc) == [("cpu", True)]
    assert doc["results"][0]["model"].endswith("colors.tflite")
    assert not doc["pipeline"]["available"] and doc["pipeline"]["reason"]


def test_a_segment_set_on_named_tpus_that_cannot_run_it_is_an_error(tpus, cli, segments):
    tpus("usb,usb")
    r = cli("bench", segments, "-d", "usb:0,usb:1", "--runs", "3", "-f", "json")
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE, r.stdout + r.stderr
    assert "nothing could be measured" in r.stderr and "3 segments need 3 Edge TPUs" in r.stderr
    assert r.stdout == ""
    r = cli("bench", segments, "-d", "usb:0", "--runs", "3")
    assert r.exit_code == ExitCode.USAGE and "use --device all" in r.stderr


def test_no_edge_tpu_anywhere_is_not_an_empty_success(tpus, cli, segments, tmp_path):
    tpus("none")
    (segments.parent / "colors.tflite").unlink()  # no whole model to fall back to either
    r = cli("bench", segments, "-d", "all,auto", "--runs", "3", "-f", "json")
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE, r.stdout
    assert "CPU twin" in r.stderr and r.stdout == ""


def test_all_on_an_uncompiled_model_says_to_compile_it_in_the_users_words(cli, tiny_model, bench_env):
    """`--device all` on a CPU model: the Edge TPU row says to compile it, not "--device edgetpu
    cannot run it" (the user typed all); one thread is "1 thread"."""
    r = cli("bench", tiny_model, "--device", "all", "--threads", "1", "--runs", "3", "--warmup", "0")
    assert r.exit_code == 0, r.stderr
    (row,) = [ln for ln in r.stdout.splitlines() if ln.startswith("edgetpu")]
    assert f"is not compiled for the Edge TPU: run `edgeapp compile {tiny_model}` first" in row, row
    assert "--device edgetpu" not in row
    assert "edgeapp: cpu (1 thread): median" in r.stderr, r.stderr
