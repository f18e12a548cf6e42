"""`bench MODEL --plan 4x1080p@10`: the plan's arithmetic (core/capacity.py), and the command
measuring the frame costs here with the shipped detector on the CPU."""

import json

import pytest
from conftest import ROOT

from edgeapp.core.capacity import FrameCosts, StreamGroup, max_fps, parse_plan, predict_plan

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


def test_the_busiest_part_bounds_the_plan_and_streams_share_fairly():
    fits = predict_plan(parse_plan("2x1080p@10"), COSTS, cores=4)
    assert fits.fits and fits.bound == "device" and fits.load == pytest.approx(0.24)  # 20 frames x 12 ms
    assert fits.fps == (10.0,)
    over = predict_plan(parse_plan("4x1080p@30,2x720p@30"), COSTS, cores=4)
    # decode 4*30*20 + 2*30*8 = 2880 ms/s over 4 cores = 0.72; device 120*12 + 60*11 = 2100 ms/s = 2.1
    assert not over.fits and over.bound == "device" and over.load == pytest.approx(2.1)
    assert over.fps == pytest.approx((30 / 2.1, 30 / 2.1))  # every stream the same share
    decode_bound = predict_plan(parse_plan("8x1080p@5"), COSTS, cores=1, devices=4)
    assert decode_bound.bound in ("decode", "cpu") and decode_bound.loads["decode"] == pytest.approx(0.8)


def test_on_the_cpu_the_inferences_are_cpu_work_too():
    tpu = predict_plan(parse_plan("2x720p@20"), COSTS, cores=2)
    cpu = predict_plan(parse_plan("2x720p@20"), COSTS, cores=2, on_cpu=True)
    assert cpu.loads["cpu"] == pytest.approx(tpu.loads["cpu"] + 40 * 10 / 1000 / 2)
    assert max_fps(COSTS[(1280, 720)], cores=2) == pytest.approx(1000 / 11)


def test_bench_plan_measures_each_resolution_and_predicts(cli):
    r = cli("bench", DETECTOR, "--device", "cpu", "--plan", "2x720p@5,1x480p@10", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc["costs"]) == {"1280x720", "640x480"} and doc["device"] == "cpu" and doc["task"] == "detect"
    for c in doc["costs"].values():
        assert c["decode_ms"] > 0 and c["infer_ms"] > 0 and c["host_ms"] >= 0
    # the prediction is the arithmetic of what was measured
    costs = {tuple(int(v) for v in k.split("x")): FrameCosts(c["decode_ms"], c["host_ms"], c["infer_ms"])
             for k, c in doc["costs"].items()}
    again = predict_plan(parse_plan("2x720p@5,1x480p@10"), costs, doc["cores"], on_cpu=True)
    assert doc["prediction"]["bound"] == again.bound
    assert doc["prediction"]["load"] == pytest.approx(again.load, abs=1e-3)
    assert [g["predicted_fps"] <= g["fps"] for g in doc["plan"]] == [True, True]
    table = cli("bench", DETECTOR, "--device", "cpu", "--plan", "1x720p@5").stdout
    assert "plan on cpu" in table and "1 x 1280x720" in table


@pytest.mark.parametrize("plan, says", [("4x1080p", "--plan"), ("2x720p@5", "one device")])
def test_bench_plan_refuses_what_it_cannot_measure(cli, plan, says):
    device = "cpu" if plan == "4x1080p" else "usb:0,usb:1"
    r = cli("bench", DETECTOR, "--device", device, "--plan", plan)
    assert r.exit_code == 2 and says in r.stderr, r.stderr
