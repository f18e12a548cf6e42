"""`edgeapp bench`: statistics with exact values, and the command end to end on the CPU with the
converted tiny model (schema, cold vs warm, ordering; no timing assertions)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import SHARED
from media import SIZE

from edgeapp.core import stats
from edgeapp.errors import UsageError
from edgeapp.flows.bench.run import random_input, thread_counts, time_invocations
from edgeapp.flows.bench.synthetic import DEFAULT_SPEC
from edgeapp.hw.hostinfo import usable_cores

TINY_MACS = SIZE * SIZE * 8 * 27 + (SIZE // 2) ** 2 * 8 * 72 + 8 * 3  # conv, conv, dense
RESULT_KEYS = {"device", "runtime", "threads", "load_ms", "first_ms", "latency_ms",
               "throughput_ips", "ops_per_inference", "tops", "peak_tops", "power_w",
               "power_source", "tops_per_watt", "mj_per_inference"}
LATENCY_KEYS = {"mean", "std", "min", "p50", "p90", "p99", "max"}


# -- statistics --------------------------------------------------------------------------------

def test_latency_stats_exact():
    s = stats.latency_stats([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s.count, s.mean, s.min, s.max) == (5, 3.0, 1.0, 5.0)
    assert s.std == pytest.approx(math.sqrt(2.0))  # population std
    assert s.p50 == 3.0
    assert s.p90 == pytest.approx(4.6)  # rank 0.9·4 = 3.6 → 4 + 0.6·(5 − 4)
    assert s.p99 == pytest.approx(4.96)
    one = stats.latency_stats([7.5])
    assert (one.mean, one.std, one.p50, one.p99) == (7.5, 0.0, 7.5, 7.5)
    assert set(s.to_dict()) == LATENCY_KEYS
    with pytest.raises(ValueError):
        stats.latency_stats([])
    with pytest.raises(ValueError):
        stats.latency_stats([1.0, float("nan")])


def test_percentile_matches_hand_interpolation():
    data = np.arange(1, 101, dtype=float)  # 1..100
    assert stats.percentile(data, 50) == 50.5
    assert stats.percentile(data, 90) == pytest.approx(90.1)
    assert stats.percentile(data, 99) == pytest.approx(99.01)


def test_throughput_tops_and_energy():
    assert stats.throughput(50, 2.0) == 25.0
    with pytest.raises(ValueError):
        stats.throughput(1, 0.0)
    tops = stats.achieved_tops(600_000_000, 400.0)
    assert tops == pytest.approx(0.24)
    assert stats.achieved_tops(None, 400.0) is None
    e = stats.energy_figures(0.5, 100.0, 2.0)
    assert e == {"tops_per_watt": 0.25, "inferences_per_joule": 50.0, "mj_per_inference": 20.0}
    assert stats.energy_figures(0.5, 100.0, None)["tops_per_watt"] is None
    assert stats.speedup(10.0, 2.5) == 4.0 and stats.speedup(None, 2.0) is None


def test_timing_loop_counts_runs_and_duration():
    calls = []
    lat, window = time_invocations(lambda: calls.append(1), runs=7, duration=None)
    assert len(lat) == len(calls) == 7 and window >= lat.sum() / 1000
    lat, _ = time_invocations(lambda: None, runs=1, duration=0.02)
    assert len(lat) >= 1


def test_random_input_types():
    assert random_input((2, 3), np.dtype("int8")).dtype == np.int8
    u = random_input((1000,), np.dtype("uint8"))
    assert u.min() >= 0 and u.max() <= 255 and len(np.unique(u)) > 100
    assert random_input((4,), np.dtype("float32")).dtype == np.float32


def test_thread_counts():
    assert thread_counts(None) == [None]
    assert thread_counts("3") == [3]
    assert thread_counts("auto") == list(range(1, usable_cores() + 1))
    for bad in ("0", "many"):
        with pytest.raises(UsageError):
            thread_counts(bad)


# -- end to end --------------------------------------------------------------------------------


def _json(result) -> dict:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _check_result(r: dict) -> None:
    assert RESULT_KEYS <= set(r)
    lat = r["latency_ms"]
    assert set(lat) == LATENCY_KEYS
    assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert lat["min"] <= lat["mean"] <= lat["max"]
    assert r["first_ms"] > 0 and r["load_ms"] > 0 and r["throughput_ips"] > 0


def test_bench_cpu_json(cli, tiny_model, bench_env):
    doc = _json(cli("bench", tiny_model, "--device", "cpu", "--runs", "30", "--warmup", "3",
                    "--format", "json"))
    assert doc["schema"] == "edgeapp.bench/1"
    assert {"cpu", "cores", "governor", "runtimes"} <= set(doc["host"])
    [r] = doc["results"]
    _check_result(r)
    assert r["device"] == "cpu" and r["available"] and r["runs"] == 30 and r["warmup"] == 3
    assert r["runtime"] in ("ai-edge-litert", "tflite-runtime", "tensorflow")
    assert r["macs_per_inference"] == TINY_MACS
    assert r["ops_per_inference"] == 2 * TINY_MACS
    assert r["tops"] == pytest.approx(2 * TINY_MACS * r["throughput_ips"] / 1e12, rel=1e-3)
    assert "MAX_POOL_2D" in r["other_ops"] and "CONV_2D" not in r["other_ops"]
    # No sensor in the empty sysfs tree: no power figure, and the notes say what was tried.
    assert r["power_source"] == "none" and r["power_w"] is None and r["tops_per_watt"] is None
    assert any(n.startswith("rapl:") for n in r["notes"])
    assert r["peak_tops"] is None  # no --synthetic run yet on this "machine"


def test_bench_user_watts_gives_energy_figures(cli, tiny_model, bench_env):
    doc = _json(cli("bench", tiny_model, "-d", "cpu", "--runs", "10", "--watts", "5",
                    "--format", "json"))
    r = doc["results"][0]
    assert (r["power_source"], r["power_w"]) == ("user", 5.0)
    assert r["tops_per_watt"] == pytest.approx(r["tops"] / 5, rel=1e-3)
    assert r["mj_per_inference"] == pytest.approx(5000 / r["throughput_ips"], rel=1e-3)
    assert r["inferences_per_joule"] == pytest.approx(r["throughput_ips"] / 5, rel=1e-3)


def test_bench_hwmon_from_fake_sysfs(cli, tiny_model, bench_env):
    chip = bench_env / "sysfs/sys/class/hwmon/hwmon0"
    chip.mkdir(parents=True)
    (chip / "name").write_text("ina219\n")
    (chip / "power1_input").write_text("6250000\n")
    r = _json(cli("bench", tiny_model, "-d", "cpu", "--duration", "0.2", "--format", "json"))["results"][0]
    assert r["runs"] >= 1 and r["window_s"] >= 0.2
    assert (r["power_source"], r["power_w"]) == ("hwmon", 6.25)
    assert "ina219" in r["power_detail"]


def test_bench_device_all_and_thread_sweep(cli, tiny_model, bench_env):
    doc = _json(cli("bench", tiny_model, "--device", "all", "--threads", "auto", "--runs", "10",
                    "--warmup", "1", "--format", "json"))
    cpus = [r for r in doc["results"] if r["device"] == "cpu"]
    assert [r["threads"] for r in cpus] == list(range(1, usable_cores() + 1))
    for r in cpus:
        _check_result(r)
    if len(cpus) > 1:
        assert sum(r["best"] for r in cpus) == 1
    [tpu] = [r for r in doc["results"] if r["device"] == "edgetpu"]
    assert tpu["available"] is False and tpu["reason"]
    assert "comparison" not in doc  # nothing to compare the CPU with


def test_bench_table_and_output_appends(cli, tiny_model, bench_env):
    out = bench_env / "runs.jsonl"
    first = cli("bench", tiny_model, "-d", "all", "--runs", "5", "--output", out)
    assert first.exit_code == 0, first.stderr
    assert "p99" in first.stdout and "edgetpu  unavailable" in first.stdout
    second = cli("bench", tiny_model, "-d", "cpu", "--runs", "5", "--output", out, "-f", "json")
    assert second.exit_code == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 2
    docs = [json.loads(line) for line in lines]
    assert [len(d["results"]) for d in docs] == [2, 1]
    assert docs[1] == json.loads(second.stdout)


def test_synthetic_sets_the_cpu_peak(cli, tiny_model, bench_env):
    syn = _json(cli("bench", "--synthetic", "--runs", "3", "--warmup", "1", "--format", "json"))
    assert syn["model"]["synthetic"] and syn["model"]["macs"] == DEFAULT_SPEC.macs
    cpu = [r for r in syn["results"] if r["device"] == "cpu"]
    [tpu] = [r for r in syn["results"] if r["device"] == "edgetpu"]  # --synthetic defaults to all
    assert "edgetpu_compiler" in tpu["reason"]
    _check_result(cpu[0])
    assert cpu[0]["ops_per_inference"] == 2 * DEFAULT_SPEC.macs
    assert (bench_env / "cache/peaks.json").exists()

    r = _json(cli("bench", tiny_model, "-d", "cpu", "--runs", "5", "-f", "json"))["results"][0]
    assert r["peak_source"] == "synthetic"
    assert r["peak_tops"] == pytest.approx(cpu[0]["tops"], rel=1e-4)
    assert r["share_of_peak"] == pytest.approx(r["tops"] / r["peak_tops"], abs=1e-3)


@pytest.mark.parametrize("args, code", [
    ((), 2),  # no model, no --synthetic
    (("missing.tflite",), 4),
    (("{model}", "--device", "tpu9"), 2),
    (("{model}", "--device", "edgetpu"), 2),  # not compiled for the Edge TPU
    (("{model}", "--threads", "lots"), 2),
    (("--synthetic", "{model}"), 2),
    (("--synthetic", "--device", "edgetpu"), 7),  # no edgetpu_compiler here
])
def test_bench_errors(cli, tiny_model, bench_env, args, code):
    result = cli("bench", *[a.format(model=tiny_model) for a in args], "--runs", "2")
    assert result.exit_code == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "error:" in result.stderr


@pytest.mark.shared
def test_compiled_model_on_auto_runs_its_cpu_twin(cli, bench_env):
    model = SHARED / "mobilenet_v1_0.25_128_quant_edgetpu.tflite"
    r = _json(cli("bench", model, "--runs", "5", "--warmup", "1", "-f", "json"))["results"][0]
    assert r["device"] == "cpu" and r["model"].endswith("mobilenet_v1_0.25_128_quant.tflite")
    assert r["macs_per_inference"] == pytest.approx(14e6, rel=0.04)
    assert any("CPU" in n for n in r["notes"])
