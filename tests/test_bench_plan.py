"""`bench MODEL --plan 4x1080p@10`: the plan's arithmetic (core/capacity.py), and the command
measuring the frame costs here with the shipped detector on the CPU."""

import json

import pytest
from conftest import ROOT

from edgeapp.core.capacity import CpuShare, FrameCosts, StreamGroup, max_fps, parse_plan, predict_plan

DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"


def test_a_plan_is_streams_of_a_resolution_at_a_frame_rate():
    assert parse_plan("4x1080p@10") == [StreamGroup(4, 1920, 1080, 10.0)]
    assert parse_plan("2x1280x720@15, 1x4k@2.5") == [StreamGroup(2, 1280, 720, 15.0),
                                                     StreamGroup(1, 3840, 2160, 2.5)]


@pytest.mark.parametrize("text", ["4x1080p", "0x720p@10", "2x999p@10", "2x720p@0", "x720p@5", "65x720p@1", ""])
def test_a_bad_plan_says_what_to_write(text):
    with pytest.raises(ValueError, match="--plan"):
        parse_plan(text)


COSTS = {(1920, 1080): FrameCosts(decode_ms=20.0, host_ms=2.0, infer_ms=10.0),
         (1280, 720): FrameCosts(decode_ms=8.0, host_ms=1.0, infer_ms=10.0)}
IDLE4 = CpuShare(cores=4)


def test_the_busiest_part_bounds_the_plan_and_streams_share_fairly():
    fits = predict_plan(parse_plan("2x1080p@10"), COSTS, IDLE4)
    assert fits.fits and fits.bound == "device" and fits.load == pytest.approx(0.24)  # 20 frames x 12 ms
    assert fits.fps == (10.0,) and fits.headroom == pytest.approx(0.76)
    over = predict_plan(parse_plan("4x1080p@30,2x720p@30"), COSTS, IDLE4)
    # device: 120 x 12 + 60 x 11 = 2100 ms a second; the TPU's inferences are no CPU work
    assert not over.fits and over.bound == "device" and over.load == pytest.approx(2.1)
    assert over.fps == pytest.approx((30 / 2.1, 30 / 2.1))  # round-robin: every stream the same


def test_a_stream_that_asks_less_leaves_the_rest_to_the_others():
    # device: 12 ms a 1080p frame, 11 ms a 720p one; the 720p stream asks 5 fps, which it gets
    pred = predict_plan(parse_plan("2x1080p@60,1x720p@5"), COSTS, IDLE4)
    assert pred.bound == "device" and not pred.fits
    x = (1000 - 5 * 11) / (2 * 12)  # what is left, shared by the two 1080p streams
    assert pred.fps == pytest.approx((x, 5.0), rel=1e-6)


def test_a_stream_whose_decode_is_too_slow_is_bound_by_its_capture_thread():
    # one 1080p stream at 60: its thread decodes 60 x 20 ms = 1.2 s a second; the TPU is idle
    many_tpus = predict_plan(parse_plan("1x1080p@60"), COSTS, IDLE4, devices=4)
    assert many_tpus.bound == "decode" and many_tpus.load == pytest.approx(1.2)
    assert many_tpus.fps == pytest.approx((1000 / 20,))
    # a thread that gets half a core (others' load) decodes half as many
    loaded = predict_plan(parse_plan("1x1080p@60"), COSTS, CpuShare(4, thread=0.5, total=2.0), devices=4)
    assert loaded.loads["decode"] == pytest.approx(2.4) and loaded.fps == pytest.approx((25.0,))


def test_on_the_cpu_decodes_and_inferences_share_the_cores():
    cpu_costs = {(1280, 720): FrameCosts(decode_ms=4.0, host_ms=1.0, infer_ms=5.0, infer_cpu_ms=5.0)}
    two = CpuShare(cores=2)
    # one stream: capture thread 4 ms, device thread 6 ms, all CPU work 10 ms over 2 cores = 5:
    # the device's thread is the critical path
    assert max_fps(cpu_costs[(1280, 720)], two, on_cpu=True) == pytest.approx(1000 / 6)
    # two streams at 100: 2 x 100 x 10 ms = 2 s of CPU a second over 2 cores
    pred = predict_plan(parse_plan("2x720p@100"), cpu_costs, two, on_cpu=True)
    assert pred.loads["cpu"] == pytest.approx(1.0) and pred.loads["device"] == pytest.approx(1.2)
    assert pred.bound == "device" and pred.fps == pytest.approx((1000 / 12,))  # 2 streams x 6 ms a frame
    # the same plan on an Edge TPU: its inference is no CPU work, its thread waits for it
    tpu = predict_plan(parse_plan("2x720p@100"), {(1280, 720): FrameCosts(4.0, 1.0, 5.0)}, two)
    assert tpu.loads["cpu"] == pytest.approx(0.5)
    # other programs load the machine: this process gets 0.8 of its 2 cores, 0.5 a thread
    loaded = CpuShare(cores=2, thread=0.5, total=0.8)
    assert max_fps(cpu_costs[(1280, 720)], loaded, on_cpu=True) == pytest.approx(1000 / (10 / 0.8))
    slow = predict_plan(parse_plan("2x720p@100"), cpu_costs, loaded, on_cpu=True)
    assert slow.bound == "cpu" and slow.loads["cpu"] == pytest.approx(2.5)
    # the scheduler gives the 3 busy threads (2 capture threads, the device's) 0.8 / 3 each:
    # each capture thread decodes 66.7 of its 100 frames, the dropped ones too, and the device's
    # thread runs 266.7 / 6 = 44.4 frames a second, 22.2 of each stream
    assert slow.fps == pytest.approx((800 / 3 / 6 / 2,), rel=1e-3)


def test_decoding_frames_that_are_dropped_costs_the_inference_its_cpu():
    # a camera sends 200 frames a second on one core; the device's thread cannot keep up: the
    # capture thread decodes all it can, dropped frames included, and takes its fair share
    c = {(640, 480): FrameCosts(decode_ms=6.0, host_ms=1.0, infer_ms=7.0, infer_cpu_ms=7.0)}
    one_core = CpuShare(cores=1)
    pred = predict_plan(parse_plan("1x480p@200"), c, one_core, on_cpu=True)
    # both threads busy: half a core each; the device's 500 ms / 8 ms = 62.5 frames a second
    # (not 1000 / 14 = 71.4, what it would be if only the frames processed were decoded)
    assert pred.bound == "cpu" and pred.fps == pytest.approx((62.5,), rel=1e-3)
    # the camera at 100: its decodes take 600 ms a second, more than half the core; the device's
    # thread gets its half: 62.5 frames a second again
    assert predict_plan(parse_plan("1x480p@100"), c, one_core, on_cpu=True).fps == pytest.approx((62.5,), rel=1e-3)
    # at 50: the decodes take 300 ms, the device's thread the other 700: 87.5 > 50, it keeps up
    # (a plan of 50 x 14 ms = 700 ms fits)
    fits = predict_plan(parse_plan("1x480p@50"), c, one_core, on_cpu=True)
    assert fits.fits and fits.fps == (50.0,)
    # at 80: decodes 480 ms, the device's thread 520 ms / 8 = 65 frames a second
    assert predict_plan(parse_plan("1x480p@80"), c, one_core, on_cpu=True).fps == pytest.approx((65.0,), rel=1e-3)


def test_a_multithreaded_inference_costs_more_cpu_than_its_wall_time():
    # two interpreter threads: 3 ms waited, 6 ms of CPU
    c = FrameCosts(decode_ms=2.0, host_ms=1.0, infer_ms=3.0, infer_cpu_ms=6.0)
    assert max_fps(c, CpuShare(2), on_cpu=True) == pytest.approx(1000 / 4.5)  # 9 ms over 2 cores
    assert max_fps(c, CpuShare(8), on_cpu=True) == pytest.approx(1000 / 4.0)  # the device's thread


def test_what_the_camera_loop_adds_is_work_of_the_device_thread():
    bare = FrameCosts(decode_ms=2.0, host_ms=1.0, infer_ms=3.0)
    looped = FrameCosts(decode_ms=2.0, host_ms=1.0, infer_ms=3.0, loop_ms=1.0)
    two = CpuShare(2)
    assert max_fps(bare, two) == pytest.approx(1000 / 4) and max_fps(looped, two) == pytest.approx(1000 / 5)
    assert looped.cpu_ms(on_cpu=True) == pytest.approx(7.0) and looped.cpu_ms(on_cpu=False) == pytest.approx(4.0)


def test_the_cpu_a_process_gets_is_capped_by_its_busy_threads():
    share = CpuShare(cores=4, thread=0.9, total=3.0)
    assert share.capacity(1) == pytest.approx(0.9) and share.capacity(2) == pytest.approx(1.8)
    assert share.capacity(8) == pytest.approx(3.0) and CpuShare(2).capacity(5) == pytest.approx(2.0)


def test_bench_plan_measures_each_resolution_and_predicts(cli):
    r = cli("bench", DETECTOR, "--device", "cpu", "--plan", "2x720p@5,1x480p@10", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc["costs"]) == {"1280x720", "640x480"} and doc["device"] == "cpu" and doc["task"] == "detect"
    for c in doc["costs"].values():
        assert c["decode_ms"] > 0 and c["infer_ms"] > 0 and c["host_ms"] > 0 and c["infer_cpu_ms"] >= 0
        # the camera loop run on the clip costs at least its parts; loop_ms is the difference
        parts = c["decode_ms"] + c["host_ms"] + c["infer_cpu_ms"]
        assert c["loop_ms"] == pytest.approx(max(0.0, c["run_cpu_ms"] - parts), abs=0.01)
    share = doc["cpu_share"]
    assert 0 < share["thread"] <= 1 and 0 < share["total"] <= doc["cores"]
    # the prediction is the arithmetic of what was measured
    costs = {tuple(int(v) for v in k.split("x")): FrameCosts(c["decode_ms"], c["host_ms"], c["infer_ms"],
                                                             c["infer_cpu_ms"], c["loop_ms"])
             for k, c in doc["costs"].items()}
    cpu = CpuShare(doc["cores"], share["thread"], share["total"])
    again = predict_plan(parse_plan("2x720p@5,1x480p@10"), costs, cpu, on_cpu=True)
    pred = doc["prediction"]
    assert pred["bound"] == again.bound and pred["load"] == pytest.approx(again.load, rel=0.01)
    assert pred["bound"] == max(pred["loads"], key=pred["loads"].get)
    assert pred["fits"] == (pred["load"] <= 1) and pred["headroom"] == pytest.approx(1 - pred["load"], abs=1e-3)
    got = [g["predicted_fps"] for g in doc["plan"]]
    assert got == pytest.approx(list(again.fps), rel=0.01, abs=0.02)
    if pred["fits"]:
        assert got == [5.0, 10.0]
    else:
        assert all(f < g["fps"] for f, g in zip(got, doc["plan"]))
    table = cli("bench", DETECTOR, "--device", "cpu", "--plan", "1x720p@5").stdout
    assert "plan on cpu" in table and "1 x 1280x720" in table


@pytest.mark.parametrize("plan, says", [("4x1080p", "--plan"), ("2x720p@5", "one device")])
def test_bench_plan_refuses_what_it_cannot_measure(cli, plan, says):
    device = "cpu" if plan == "4x1080p" else "usb:0,usb:1"
    r = cli("bench", DETECTOR, "--device", device, "--plan", plan)
    assert r.exit_code == 2 and says in r.stderr, r.stderr


def test_the_camera_loops_own_share_counts_when_it_got_more_than_busy_threads():
    from edgeapp.flows.bench.plan import with_camera_share

    probe = CpuShare(cores=2, thread=0.3, total=0.35)
    assert with_camera_share(probe, 0.2) == probe  # less than the probe's: the probe's stands
    more = with_camera_share(probe, 0.6)
    assert more.capacity(2) == pytest.approx(0.6) and more.thread == pytest.approx(0.3)
    assert with_camera_share(CpuShare(2), 1.5) == CpuShare(2)  # idle: all of both cores already
