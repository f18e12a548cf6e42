"""Several Edge TPUs without hardware: the stand-in library (tests/standin.py) exposes N devices
and computes `edgetpu-custom-op` deterministically, so results can be compared exactly:
data-parallel against one device, a segment pipeline against its segments run one after
another. No timing assertions: the scaling is measured by scripts/bench_multitpu.py."""

from __future__ import annotations

import json
import shutil
import threading

import numpy as np
import pytest
from conftest import SHARED
from jsonl_records import records, without_device
from media import CLASSES
from standin import write_segments

from edgeapp.core.edgetpu.pipeline_segments import check_chain, find_segment_files
from edgeapp.core.tflite.model import load_model
from edgeapp.errors import DeviceUnavailable, ExitCode, InvalidModel, UsageError
from edgeapp.execution.parallel import DevicePool
from edgeapp.execution.placement import open_runner
from edgeapp.hw.device_choice import find_tpus, parse_devices, resolve_tpus
from edgeapp.hw.runtime import open_engine

THREE = "usb,usb,pci"  # usb:0, usb:1, pci:0


# -- --device lists ----------------------------------------------------------------------------

@pytest.mark.parametrize("text, tpus_, every, fallback", [
    ("usb:0,usb:1", ("usb:0", "usb:1"), False, False),
    ("pci:0, usb:0", ("pci:0", "usb:0"), False, False),
    ("all", (), True, False),
    ("ALL,auto", (), True, True),
    ("usb:1,:3,auto", ("usb:1", ":3"), False, True)])
def test_parse_device_lists(text, tpus_, every, fallback):
    c = parse_devices(text)
    assert c.several and (c.tpus, c.every, c.fallback) == (tpus_, every, fallback)


@pytest.mark.parametrize("text, message", [
    ("usb:0,cpu", "CPU is never mixed"), ("usb:0,usb:0", "named twice"), ("usb,pci", "name each"),
    ("usb:0,,usb:1", "empty"), ("all,usb:0", "all already"), ("usb:0,gpu:1", "invalid device"),
    ("auto,auto", "no Edge TPU named")])
def test_bad_device_lists(text, message):
    with pytest.raises(UsageError, match=message):
        parse_devices(text)


def test_single_devices_parse_as_before():
    assert parse_devices("usb:1").single.option == "usb:1"
    assert parse_devices(None).single.kind == "auto"


def test_all_enumerates_the_tpus_through_the_library(tpus, cli):
    tpus(THREE)
    assert find_tpus() == ["usb:0", "usb:1", "pci:0"]
    assert resolve_tpus(parse_devices("all")) == ["usb:0", "usb:1", "pci:0"]
    tpus("none")
    with pytest.raises(DeviceUnavailable, match="no Edge TPU found"):
        resolve_tpus(parse_devices("all"))
    assert resolve_tpus(parse_devices("all,auto")) == []


# The runners' own failover, when a failed TPU is not brought back: with a worker (the default on
# an Edge TPU) a new worker reopens the stand-in, whose failure counter starts again, so these
# tests run in-process (the worker's recovery: tests/test_worker.py).
RUNNER_FAILOVER = ("--no-isolate",)


# -- data parallel -----------------------------------------------------------------------------

def test_all_tpus_give_the_single_tpu_results_in_order(tpus, cli, compiled_pair, images):
    tpus(THREE, delay_ms=1)
    one = cli("classify", compiled_pair[0], *images, "-f", "jsonl", "--device", "usb:0")
    many = cli("classify", compiled_pair[0], *images, "-f", "jsonl", "--device", "all")
    assert one.exit_code == many.exit_code == 0, many.stderr
    a, b = records(one), records(many)
    assert [r["path"] for r in b] == [str(p) for p in images]
    assert without_device(a) == without_device(b)
    assert {r["device"] for r in a} == {"usb:0"}
    assert {r["device"] for r in b} <= {"usb:0", "usb:1", "pci:0"}
    assert {r["model"] for r in b} == {str(compiled_pair[0])}
    assert "on usb:0, usb:1, pci:0" in many.stderr


def test_a_tpu_failing_mid_batch_loses_and_duplicates_nothing(tpus, cli, compiled_pair, images):
    tpus(THREE, delay_ms=10)
    reference = records(cli("classify", compiled_pair[0], *images, "-f", "jsonl", "-d", "usb:0"))
    tpus(THREE, delay_ms=10, fail="usb:1@1")  # usb:1 works once, then is "unplugged"
    r = cli("classify", compiled_pair[0], *images, "-f", "jsonl", "-d", "usb:0,usb:1,pci:0", *RUNNER_FAILOVER)
    assert r.exit_code == 0, r.stderr
    got = records(r)
    assert without_device(got) == without_device(reference)  # same order, none lost, none twice
    assert sum(rec["device"] == "usb:1" for rec in got) <= 1
    assert r.stderr.count("Edge TPU usb:1 failed") == 1  # reported once
    assert "failed mid-run: usb:1 (no image lost)" in r.stderr


def test_every_tpu_failing_stops_in_order_and_resume_finishes(tpus, cli, compiled_pair, images, tmp_path):
    out = tmp_path / "results.jsonl"
    tpus("usb,usb", delay_ms=2, fail="usb:0@3,usb:1@3")
    r = cli("classify", compiled_pair[0], *images, "-f", "jsonl", "-o", out, "-d", "all", *RUNNER_FAILOVER)
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE
    assert "every Edge TPU failed (" in r.stderr and "Traceback" not in r.stderr
    first = [json.loads(line)["path"] for line in out.read_text().splitlines()]
    assert first == [str(p) for p in images[:len(first)]] and len(first) <= 6
    tpus("usb,usb")
    r = cli("classify", compiled_pair[0], *images, "-f", "jsonl", "-o", out, "-d", "all", "--resume")
    assert r.exit_code == 0, r.stderr
    done = [json.loads(line)["path"] for line in out.read_text().splitlines()]
    assert done == [str(p) for p in images]


def test_auto_in_the_list_lets_the_cpu_twin_finish(tpus, cli, compiled_pair, images):
    compiled, twin = compiled_pair
    tpus("usb,usb", fail="usb:0@2,usb:1@2")
    r = cli("classify", compiled, *images, "-f", "jsonl", "-k", "1", "-d", "all,auto", *RUNNER_FAILOVER)
    assert r.exit_code == 0, r.stderr
    got = records(r)
    assert [x["path"] for x in got] == [str(p) for p in images]
    on_cpu = [x for x in got if x["device"] == "cpu"]
    assert len(on_cpu) >= len(images) - 4 and {x["model"] for x in on_cpu} == {str(twin)}
    assert "no Edge TPU left: running colors.tflite (CPU twin) on CPU for the rest" in r.stderr
    direct = {x["path"]: x["classes"] for x in records(cli("classify", twin, *images, "-f", "jsonl", "-k", "1"))}
    assert all(x["classes"] == direct[x["path"]] for x in on_cpu)  # the real model's answers
    assert all(x["classes"][0]["label"] in x["path"] for x in on_cpu)


def test_auto_single_tpu_failing_hands_over_to_the_twin(tpus, cli, compiled_pair, images):
    tpus("usb", fail="usb:0@5")
    r = cli("classify", compiled_pair[0], *images[:10], "-f", "jsonl", "-k", "1", *RUNNER_FAILOVER)
    assert r.exit_code == 0, r.stderr
    devices = [x["device"] for x in records(r)]
    assert devices == ["edgetpu"] * 5 + ["cpu"] * 5


def test_explicit_single_tpu_failing_is_exit_5(tpus, cli, compiled_pair, images):
    tpus("usb", fail="usb:0@2")
    r = cli("classify", compiled_pair[0], *images[:5], "-f", "jsonl", "-d", "usb:0", *RUNNER_FAILOVER)
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE and len(records(r)) == 2
    assert "Edge TPU usb:0 failed" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("device, code, message", [
    ("usb:0,usb:5", ExitCode.DEVICE_UNAVAILABLE, "no Edge TPU found at usb:5"),
    ("usb:0,cpu", ExitCode.USAGE, "never mixed"),
])
def test_device_list_errors(tpus, cli, compiled_pair, images, device, code, message):
    tpus("usb,usb")
    r = cli("classify", compiled_pair[0], images[0], "-d", device)
    assert r.exit_code == code and message in r.stderr, r.stderr


def test_all_with_no_tpu(tpus, cli, compiled_pair, images):
    tpus("none")
    r = cli("classify", compiled_pair[0], images[0], "-d", "all")
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE and "no Edge TPU found" in r.stderr
    r = cli("classify", compiled_pair[0], images[0], "-d", "all,auto", "-f", "jsonl")
    assert r.exit_code == 0 and records(r)[0]["device"] == "cpu"


def test_camera_frames_on_several_tpus_stay_in_order(tpus, cli, compiled_pair, color_video):
    path, expected = color_video
    tpus(THREE, delay_ms=2)
    runs = {}
    for device in ("usb:0", "all"):
        r = cli("camera", compiled_pair[0], "--source", path, "--no-display", "-f", "jsonl",
                "--summary", "json", "--device", device)
        assert r.exit_code == 0, r.stderr
        runs[device] = [json.loads(line) for line in r.stdout.splitlines()]
        summary = json.loads(r.stderr.strip().splitlines()[-1])
        assert summary["frames_processed"] == len(expected) and summary["frames_dropped"] == 0
    one, many = runs["usb:0"], runs["all"]
    assert [x["frame"] for x in many] == list(range(len(expected)))
    assert [x["classes"] for x in many] == [x["classes"] for x in one]
    assert {x["device"] for x in many} <= {"usb:0", "usb:1", "pci:0"}
    assert summary["device"] == "usb:0, usb:1, pci:0"


def test_cpu_default_split_gives_the_one_interpreter_records(cli, tiny_model, images):
    """On the CPU, without --threads, one one-thread interpreter per core runs side by side:
    same records, same order, as one interpreter."""
    from edgeapp.execution.placement import open_runner as opened

    runner = opened(tiny_model, "cpu", cpu_replicas=2)
    assert isinstance(runner, DevicePool) and runner.label == "cpu"
    runner.close()
    split = cli("classify", tiny_model, *images, "-f", "jsonl", "-d", "cpu")
    one = cli("classify", tiny_model, *images, "-f", "jsonl", "-d", "cpu", "--threads", "1")
    assert split.exit_code == one.exit_code == 0, split.stderr
    assert [(r["path"], r["device"], r["classes"]) for r in records(split)] == \
        [(r["path"], r["device"], r["classes"]) for r in records(one)]
    assert ") on cpu;" in split.stderr


def test_a_command_failing_after_opening_leaves_no_thread(tpus, cli, compiled_pair, images):
    tpus(THREE)
    before = set(threading.enumerate())
    r = cli("classify", compiled_pair[0], images[0], "-d", "all", "--labels", "/nonexistent/labels")
    assert r.exit_code != 0
    assert not [t for t in set(threading.enumerate()) - before if t.name.startswith("edgeapp-")]


def test_pool_threads_end_when_the_consumer_stops(tpus, compiled_pair):
    tpus(THREE, delay_ms=1)
    before = set(threading.enumerate())
    engine = open_engine(compiled_pair[0], "usb:0", probe=False)
    x = np.zeros(engine.input_shape, engine.input_dtype)
    pool = DevicePool([engine] + [open_engine(compiled_pair[0], d, probe=False) for d in ("usb:1", "pci:0")])
    with pool:
        for i, (key, done) in enumerate(pool.imap((k, x) for k in range(1000))):
            if i == 5:
                break  # like Ctrl-C or an error in the caller
    assert not [t for t in set(threading.enumerate()) - before if t.name.startswith("edgeapp-")]


# -- segments ----------------------------------------------------------------------------------

def test_segment_set_found_from_any_segment_or_the_base(tmp_path):
    paths = write_segments(tmp_path)
    for name in ("colors", "colors_edgetpu.tflite", "colors.tflite", paths[1].name):
        assert find_segment_files(tmp_path / name) == paths
    (tmp_path / "colors.tflite").write_bytes(b"")  # the whole model is there: it is meant
    assert find_segment_files(tmp_path / "colors.tflite") is None
    assert find_segment_files(tmp_path / "other") is None
    paths[2].unlink()
    with pytest.raises(InvalidModel, match="incomplete"):
        find_segment_files(paths[0])


def test_chain_check_follows_tensors_by_name(tmp_path):
    models = [load_model(p) for p in write_segments(tmp_path)]
    chain = check_chain(models)
    assert [h.sources for h in chain.hops] == [(-1,), (0,), (1, 0)]
    assert chain.passed_through(1) == ["skip_b"]  # made by segment 0, read by segment 2
    with pytest.raises(InvalidModel, match="'stage_c' of segment 1 .* not produced"):
        check_chain([models[0], models[2], models[1]])
    from standin import SCORES, A, write_model

    reads_a_only = write_model(tmp_path / "reads_a.tflite", [A], [SCORES])
    with pytest.raises(InvalidModel, match="output 'skip_b' of segment 0 .* read by no later segment"):
        check_chain([models[0], load_model(reads_a_only)])


def test_chain_check_refuses_a_shape_or_quantization_mismatch(tmp_path):
    from standin import IMAGE, A, B, C, write_model

    seg0 = write_model(tmp_path / "s0.tflite", [IMAGE], [A, B])
    wrong_shape = write_model(tmp_path / "s1.tflite", [("stage_a", (1, 4, 4, 4), "uint8", 0.05, 3)], [C])
    wrong_scale = write_model(tmp_path / "s2.tflite", [("stage_a", (1, 8, 8, 4), "uint8", 0.5, 3)], [C])
    for bad in (wrong_shape, wrong_scale):
        with pytest.raises(InvalidModel, match="broken segment chain: 'stage_a' is uint8"):
            check_chain([load_model(seg0), load_model(bad)])


def _reference(paths, tensors, device="usb:0") -> list[list[np.ndarray]]:
    """The segments run one after another on one TPU, tensors passed by name."""
    engines = [open_engine(p, device, probe=False) for p in paths]
    hops = check_chain([e.model for e in engines]).hops
    out = []
    for x in tensors:
        env = {hops[0].inputs[0]: x}
        for engine, hop in zip(engines, hops):
            env.update(zip(hop.outputs, engine.run_all([env[n] for n in hop.inputs])))
        out.append([env[n] for n in hops[-1].outputs])
    return out


@pytest.mark.parametrize("tail", [False, True])
def test_pipeline_equals_the_segments_one_after_another(tpus, tmp_path, tail):
    tpus(THREE, delay_ms=1)
    paths = write_segments(tmp_path, dequantize_tail=tail)
    rng = np.random.default_rng(3)
    tensors = [rng.integers(0, 256, (1, 16, 16, 3), dtype=np.uint8) for _ in range(12)]
    expected = _reference(paths, tensors)
    items = [(i, None if i == 4 else t) for i, t in enumerate(tensors)]  # 4: an input that failed
    with open_runner(tmp_path / "colors", "all") as runner:
        got = list(runner.imap(items))
        stats = runner.segment_stats()
    assert [k for k, _ in got] == list(range(12))  # in order, the failed input in its place
    assert got[4][1] is None
    for (i, done), want in zip(got, expected):
        if done is not None:
            assert done.device == "usb:0+usb:1+pci:0"
            assert len(done.outputs) == len(want)
            assert all(np.array_equal(a, b) for a, b in zip(done.outputs, want))
    assert [s["invokes"] for s in stats] == [11, 11, 11]
    assert [s["device"] for s in stats] == ["usb:0", "usb:1", "pci:0"]
    if tail:
        assert got[0][1].outputs[0].dtype == np.float32  # the CPU op after the TPU op ran


def test_pipeline_threads_end_on_early_stop(tpus, tmp_path):
    tpus(THREE, delay_ms=1)
    write_segments(tmp_path)
    before = set(threading.enumerate())
    x = np.zeros((1, 16, 16, 3), np.uint8)
    with open_runner(tmp_path / "colors", "all") as runner:
        for i, _ in enumerate(runner.imap((k, x) for k in range(1000))):
            if i == 3:
                break
    assert not [t for t in set(threading.enumerate()) - before if t.name.startswith("edgeapp-segment")]


@pytest.fixture()
def segment_folder(tmp_path, tiny_model):
    """A segment set with its CPU twin (the tiny model, same input and output) and sidecar."""
    folder = tmp_path / "segs"
    write_segments(folder)
    shutil.copy(tiny_model, folder / "colors.tflite")
    shutil.copy(tiny_model.with_suffix(".json"), folder / "colors.json")
    return folder


def test_classify_over_a_pipeline(tpus, cli, segment_folder, images):
    tpus(THREE)
    seg1 = segment_folder / "colors_segment_1_of_3_edgetpu.tflite"
    r = cli("classify", seg1, *images, "-f", "jsonl", "-d", "all")
    assert r.exit_code == 0, r.stderr
    got = records(r)
    assert [x["path"] for x in got] == [str(p) for p in images]
    assert {x["device"] for x in got} == {"usb:0+usb:1+pci:0"}
    assert {c["label"] for x in got for c in x["classes"]} <= set(CLASSES)  # the twin's sidecar
    assert "3-segment pipeline on usb:0, usb:1, pci:0" in r.stderr
    again = cli("classify", segment_folder / "colors", *images, "-f", "jsonl")  # auto: all 3 found
    assert without_device(records(again)) == without_device(got)


def test_too_few_tpus_for_the_segments(tpus, cli, segment_folder, images):
    tpus("usb,usb")
    base = segment_folder / "colors"
    r = cli("classify", base, images[0], "-d", "usb:0,usb:1")
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE and "3 segments need 3 Edge TPUs, 2 usable" in r.stderr
    r = cli("classify", base, images[0], "-d", "usb:0")
    assert r.exit_code == ExitCode.USAGE and "use --device all" in r.stderr
    r = cli("classify", base, *images[:3], "-f", "jsonl", "-k", "1")  # auto: the whole model on CPU
    assert r.exit_code == 0, r.stderr
    assert "running colors.tflite (the whole model) on CPU" in r.stderr
    assert all(x["device"] == "cpu" and x["classes"][0]["label"] in x["path"] for x in records(r))


def test_a_segment_failing_stops_the_pipeline_or_hands_over(tpus, cli, segment_folder, images):
    base = segment_folder / "colors"
    tpus(THREE, fail="pci:0@4")  # segment 2's TPU
    r = cli("classify", base, *images, "-f", "jsonl", "-d", "all", *RUNNER_FAILOVER)
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE
    assert "segment 2 on pci:0 failed, pipeline stopped" in r.stderr
    assert [x["path"] for x in records(r)] == [str(p) for p in images[:4]]
    r = cli("classify", base, *images, "-f", "jsonl", "-d", "all,auto", *RUNNER_FAILOVER)
    assert r.exit_code == 0, r.stderr
    got = records(r)
    assert [x["path"] for x in got] == [str(p) for p in images]
    assert [x["device"] for x in got][4:] == ["cpu"] * (len(images) - 4)


# -- Coral's real segments ---------------------------------------------------------------------

CORAL_SEGMENTS = SHARED / "pipeline" / "ssd_mobilenet_v2_coco_quant_postprocess"


@pytest.mark.shared
def test_chain_check_on_corals_four_segments(tmp_path):
    paths = find_segment_files(CORAL_SEGMENTS)
    assert [p.name[-27:] for p in paths] == [f"_segment_{i}_of_4_edgetpu.tflite"[-27:] for i in range(4)]
    chain = check_chain([load_model(p) for p in paths])
    assert [h.sources for h in chain.hops] == [(-1,), (0,), (1,), (2, 0, 1, 2)]
    assert chain.hops[-1].cpu_ops == ("DEQUANTIZE", "DEQUANTIZE", "TFLite_Detection_PostProcess")
    assert all(not h.cpu_ops for h in chain.hops[:-1])
    assert len(chain.passed_through(1)) == 1 and len(chain.passed_through(2)) == 2
    # a broken chain: segments 1 and 2 swapped on disk
    for i, src in enumerate([paths[0], paths[2], paths[1], paths[3]]):
        shutil.copy(src, tmp_path / f"ssd_segment_{i}_of_4_edgetpu.tflite")
    broken = find_segment_files(tmp_path / "ssd")
    with pytest.raises(InvalidModel, match="broken segment chain: input 'FeatureExtractor/MobilenetV2/"
                                           "layer_19_1_Conv2d_2_1x1_256/Relu6' of segment 1"):
        check_chain([load_model(p) for p in broken])


@pytest.mark.shared
def test_corals_segments_through_the_stand_in_pipeline(tpus, cli):
    tpus("usb,usb,pci,pci")
    paths = find_segment_files(CORAL_SEGMENTS)
    rng = np.random.default_rng(5)
    tensors = [rng.integers(0, 256, (1, 300, 300, 3), dtype=np.uint8) for _ in range(4)]
    expected = _reference(paths, tensors)
    with open_runner(CORAL_SEGMENTS, "all") as runner:
        got = [done.outputs for _, done in runner.imap(enumerate(tensors))]
    for outs, want in zip(got, expected):
        assert [o.shape for o in outs] == [(1, 20, 4), (1, 20), (1, 20), (1,)]
        assert all(np.array_equal(a, b) for a, b in zip(outs, want))
    r = cli("detect", CORAL_SEGMENTS, SHARED / "cat.bmp", SHARED / "grace_hopper.bmp",
            "--labels", SHARED / "coco_labels.txt", "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    assert [json.loads(x)["device"] for x in r.stdout.splitlines()] == ["usb:0+usb:1+pci:0+pci:1"] * 2


# -- bench -------------------------------------------------------------------------------------

def test_scaling_efficiency_and_bottleneck_exact():
    from edgeapp.core.stats import bottleneck, scaling_efficiency

    assert scaling_efficiency(300.0, 3, 100.0) == 1.0
    assert scaling_efficiency(150.0, 2, 100.0) == 0.75
    assert scaling_efficiency(10.0, 0, 5.0) is None and scaling_efficiency(10.0, 2, 0.0) is None
    assert bottleneck([2.0, 5.5, 5.5, 1.0]) == 1 and bottleneck([None, 3.0]) == 1
    assert bottleneck([]) is None


def _has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def test_bench_several_tpus_reports_each_and_together(tpus, cli, compiled_pair, tmp_path):
    tpus(THREE, delay_ms=1)
    plot = tmp_path / "bench.png"
    args = ["bench", compiled_pair[0], "--device", "all", "--runs", "15", "--warmup", "2", "-f", "json",
            "-o", tmp_path / "runs.jsonl"] + (["--plot", plot] if _has_matplotlib() else [])
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["device_name"] for x in doc["results"]] == ["cpu", "usb:0", "usb:1", "pci:0"]
    assert doc["results"][0]["model"] == str(compiled_pair[1])  # the CPU runs the twin
    par = doc["parallel"]
    assert par["available"] and par["devices"] == ["usb:0", "usb:1", "pci:0"]
    assert [p["tpus"] for p in par["scaling"]] == [1, 2, 3]
    assert [p["runs"] for p in par["scaling"]] == [15, 30, 45] and par["runs"] == 45
    assert par["scaling"][0]["efficiency"] == 1.0
    assert par["scaling_efficiency"] == par["scaling"][-1]["efficiency"] > 0
    assert sum(d["runs"] for d in par["per_device"].values()) == 45
    assert set(par["per_device"]) <= {"usb:0", "usb:1", "pci:0"}
    table = cli("bench", compiled_pair[0], "-d", "usb:0,pci:0", "--runs", "5", "--warmup", "1")
    assert table.exit_code == 0, table.stderr
    assert "together on usb:0, pci:0" in table.stdout and "scaling efficiency" in table.stdout
    if _has_matplotlib():
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_segment_pipeline_names_the_bottleneck(tpus, cli, segment_folder):
    tpus(THREE, delay_ms=1)
    r = cli("bench", segment_folder / "colors", "--device", "all", "--runs", "12", "--warmup", "1",
            "-f", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {x["device"] for x in doc["results"]} == {"cpu"}  # the whole model, on the CPU
    pipe = doc["pipeline"]
    assert pipe["available"] and pipe["segments"] == 3 and pipe["runs"] == 12
    assert [s["invokes"] for s in pipe["per_segment"]] == [12, 12, 12]
    means = [s["mean_ms"] for s in pipe["per_segment"]]
    assert pipe["bottleneck_segment"] == means.index(max(means))
    assert [s["bottleneck"] for s in pipe["per_segment"]].count(True) == 1
    assert pipe["bound_ips"] == pytest.approx(1000 / max(means), rel=1e-3)
    tpus("usb,usb")
    r = cli("bench", segment_folder / "colors", "--runs", "3", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["pipeline"]["reason"] == "3 segments need 3 Edge TPUs, 2 found"


def test_bench_report_shows_and_plots_multi_tpu_runs(tpus, cli, compiled_pair, tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    tpus("usb,usb", delay_ms=1)
    runs = tmp_path / "runs.jsonl"
    for _ in range(2):
        r = cli("bench", compiled_pair[0], "-d", "all", "--runs", "5", "--warmup", "1", "-o", runs)
        assert r.exit_code == 0, r.stderr
    args = [sys.executable, str(ROOT / "scripts" / "bench_report.py"), str(runs)]
    if _has_matplotlib():
        args += ["--plot", str(tmp_path / "runs.png")]
    out = subprocess.run(args, capture_output=True, text=True, cwd=ROOT,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("usb:0+usb:1 (efficiency") == 2
    if _has_matplotlib():
        assert (tmp_path / "runs.png").read_bytes()[:4] == b"\x89PNG"
