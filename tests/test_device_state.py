"""The accelerator's real state: clock mode, heat and the clock it costs, USB link and
firmware state, `--performance` reaching the delegate, and a USB Accelerator that vanishes
mid-batch and comes back. Fake sysfs trees under EDGEAPP_SYSROOT (the one root every read goes
through) and the stand-in Edge TPU library (tests/standin.py); no timing assertions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fake_roots import add_usb, dpkg_owns, hot_card
from jsonl_records import records, without_device

from edgeapp.core.edgetpu import clock, thermal
from edgeapp.core.stats import median
from edgeapp.errors import ExitCode
from edgeapp.hw.sysroot import sysroot
from edgeapp.hw.tpu_state import tpu_states

# -- pure: clock levels, builds, trip points, drift ------------------------------------------------

def test_performance_levels_halve_the_clock():
    assert [clock.clock_at(level) for level in clock.PERFORMANCE_LEVELS] == [62.5, 125.0, 250.0, 500.0]
    assert clock.delegate_options("medium", 8) == {"Performance": "Medium", "Usb.MaxBulkInQueueLength": "8"}
    assert clock.delegate_options() == {}


@pytest.mark.parametrize("package, path, label, mode", [
    ("libedgetpu1-max", "/usr/lib/x86_64-linux-gnu/libedgetpu.so.1.0", None, "max"),
    ("libedgetpu1-std", "/usr/lib/x86_64-linux-gnu/libedgetpu.so.1.0", None, "std"),
    ("libedgetpu1-legacy-max", "/usr/lib/libedgetpu.so.1", None, "max"),
    (None, "/opt/edgetpu_runtime/libedgetpu/throttled/k8/libedgetpu.so.1.0", None, "std"),
    (None, "/site-packages/pycoral/libedgetpu_bin/direct/k8/libedgetpu.so.1", None, "max"),
    (None, "/usr/lib/libedgetpu.so.1", "BuildLabel(COMPILER=6.3.0 20170516)", None),
])
def test_build_mode_from_package_folder_or_label(package, path, label, mode):
    assert clock.build_mode(package, path, label)[0] == mode


def test_std_builds_cap_usb_at_high_and_max_is_refused_naming_the_max_package():
    assert clock.usb_level("std") == "high" and clock.usb_level("max") == "max"
    assert clock.usb_level("std", "max") == "high" and clock.usb_level("std", "low") == "low"
    assert clock.usb_level(None) is None
    line = clock.refusal("std", "max", "Debian package libedgetpu1-std")
    assert "libedgetpu1-max" in line and "\n" not in line
    assert clock.refusal("max", "max", "") is None and clock.refusal("std", "high", "") is None


@pytest.mark.parametrize("temp, reached, mhz", [(52.3, 0, 500.0), (85.0, 1, 250.0), (91.5, 2, 125.0),
                                                (97.0, 3, 62.5)])
def test_the_driver_halves_the_clock_at_each_trip_point(temp, reached, mhz):
    assert thermal.trips_reached(temp, (85.0, 90.0, 95.0)) == reached
    assert thermal.clock_from_temperature(temp) == mhz


def test_the_sentinel_reading_is_a_sensor_fault_not_a_temperature():
    state = thermal.pcie_state({"temp": -87.9, "trip_point0_temp": 85.0})
    assert state["sensor_fault"] and state["temperature_c"] is None and state["clock_mhz"] is None
    assert state["reading_c"] == -87.9 and state["throttling"] is None
    assert "sensor fault" in thermal.thermal_summary(state)


def test_drift_and_trip_point_make_throttling():
    starts = [i * 0.1 for i in range(100)]
    windows = thermal.split_windows(starts, [10.0 + i * 0.05 for i in range(100)])
    assert len(windows) == thermal.WINDOWS and sum(map(len, windows)) == 100
    d = thermal.drift(median(windows[0]), median(windows[-1]))
    assert d > thermal.DRIFT_LIMIT and thermal.throttling(d)
    assert thermal.throttling(0.05) == [] and thermal.throttling(None, 60.0, 85.0) == []
    assert "trip point 0" in thermal.throttling(0.0, 86.0, 85.0)[0]
    assert thermal.throttling(0.0, -87.9, 85.0) == []  # a broken sensor is not heat
    assert len(thermal.split_windows([0.0, 1.0], [1.0, 2.0])) == 1  # too short to split


# -- devices on fake trees ---------------------------------------------------------------------

@pytest.fixture()
def no_library(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEAPP_EDGETPU_LIB", str(tmp_path / "absent" / "libedgetpu.so.1"))
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setenv("EDGEAPP_SYSROOT", str(root))
    return root


@pytest.mark.parametrize("millidegrees, mhz, warned", [(52300, 500.0, False), (85500, 250.0, True),
                                                       (90000, 125.0, True), (96000, 62.5, True)])
def test_devices_reports_a_hot_card_at_each_trip_point(cli, no_library, millidegrees, mhz, warned):
    hot_card(no_library, 0, millidegrees)
    [state] = tpu_states()  # the sysroot from the environment
    assert state["clock_mhz"] == mhz and state["throttling"] == (mhz < 500)
    assert state["thermal"]["trip_points_c"] == [85.0, 90.0, 95.0]
    assert (state["thermal"]["warn_c"], state["thermal"]["warn_enabled"]) == (100.0, False)
    assert (state["thermal"]["shutdown_c"], state["thermal"]["shutdown_enabled"]) == (100.0, True)
    listed = json.loads(cli("devices", "--format", "json").stdout)["devices"]
    assert listed[0]["clock_mhz"] == mhz and listed[0]["temperature_c"] == millidegrees / 1000
    table = cli("devices").stdout
    assert f"{millidegrees / 1000:.1f} °C, {mhz:g} MHz (trip points 85/90/95 °C" in table
    assert ("warning: hot:" in table) == warned


def test_devices_reports_the_sentinel_as_a_sensor_fault(cli, no_library):
    hot_card(no_library, 0, -87900)
    listed = json.loads(cli("devices", "--format", "json").stdout)["devices"]
    assert listed[0]["temperature_c"] is None and listed[0]["thermal"]["sensor_fault"]
    table = cli("devices").stdout
    assert "sensor fault (reads -87.9 °C)" in table and "°C, 500 MHz" not in table


def test_devices_reports_usb_link_and_firmware_state(cli, no_library):
    add_usb(no_library, "1-3", "1a6e:089a", "480", 1, 7)
    add_usb(no_library, "2-1", "18d1:9302", "5000", 2, 4)
    by_id = {s["usb_id"]: s for s in json.loads(cli("devices", "-f", "json").stdout)["devices"]}
    assert by_id["1a6e:089a"]["usb_state"] == "bootloader" and by_id["18d1:9302"]["usb_state"] == "running"
    assert by_id["1a6e:089a"]["link"] == "USB 2 (480 Mb/s)" and by_id["18d1:9302"]["link"] == "USB 3 (5 Gb/s)"
    assert any("USB 2 link" in w for w in by_id["1a6e:089a"]["warnings"])
    lines = cli("devices").stdout.splitlines()
    assert "1a6e:089a (bootloader), 480 Mb/s (USB 2" in lines[0]


def test_clock_mode_comes_from_the_package_under_the_sysroot(tpus, cli, standin_lib, tmp_path, monkeypatch):
    tpus("usb")
    root = tmp_path / "root"
    dpkg_owns(root, "libedgetpu1-std", standin_lib)
    monkeypatch.setenv("EDGEAPP_SYSROOT", str(root))
    [state] = json.loads(cli("devices", "-f", "json").stdout)["devices"]
    assert (state["clock_mode"], state["performance"], state["clock_mhz"]) == ("std", "high", 250.0)
    assert "libedgetpu1-std" in state["clock_mode_source"]
    assert "std build, 250 MHz" in cli("devices").stdout


def test_the_old_power_root_variable_still_moves_the_root(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGEAPP_SYSROOT", raising=False)
    monkeypatch.setenv("EDGEAPP_SYSFS_ROOT", str(tmp_path))
    assert sysroot() == tmp_path
    monkeypatch.setenv("EDGEAPP_SYSROOT", str(tmp_path / "new"))
    assert sysroot() == tmp_path / "new" and sysroot("/x") == Path("/x")


# -- --performance reaching the delegate ---------------------------------------------------------

def _options(log: Path) -> list:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("device, opened", [("usb", "usb:0"), ("auto", "usb:0"), ("pci", "pci:0"),
                                            ("usb:1", "usb:1")])
def test_performance_reaches_the_delegate_with_an_indexed_device(tpus, cli, compiled_pair, images,
                                                                 tmp_path, device, opened):
    log = tmp_path / "options.log"
    tpus("usb,usb,pci", options_log=log)
    r = cli("classify", compiled_pair[0], *images[:3], "-f", "jsonl", "-d", device, "--performance", "medium")
    assert r.exit_code == 0, r.stderr
    assert _options(log) == [[opened, f"device={opened}", "Performance=Medium"]]
    assert {rec["device"] for rec in records(r)} == {opened}


def test_no_performance_sends_no_option(tpus, cli, compiled_pair, images, tmp_path):
    log = tmp_path / "options.log"
    tpus("usb", options_log=log)
    assert cli("classify", compiled_pair[0], images[0], "-d", "usb").exit_code == 0
    assert _options(log) == [["usb:0", "device=usb"]]


@pytest.mark.parametrize("command", ["detect", "pose", "segment", "camera", "bench", "retrain"])
def test_every_command_that_opens_the_edge_tpu_takes_performance(cli, command):
    assert "--performance" in cli(command, "--help").stdout


def test_max_on_a_std_build_is_refused_in_one_line(tpus, cli, compiled_pair, images, standin_lib,
                                                   tmp_path, monkeypatch):
    log = tmp_path / "options.log"
    tpus("usb", options_log=log)
    root = tmp_path / "root"
    dpkg_owns(root, "libedgetpu1-std", standin_lib)
    monkeypatch.setenv("EDGEAPP_SYSROOT", str(root))
    r = cli("classify", compiled_pair[0], images[0], "--performance", "max")
    assert r.exit_code == ExitCode.USAGE and "libedgetpu1-max" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not _options(log)
    dpkg_owns(root, "libedgetpu1-max", standin_lib)
    r = cli("classify", compiled_pair[0], images[0], "--performance", "max", "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    assert _options(log) == [["usb:0", "device=usb:0", "Performance=Max"]]


def test_bench_passes_performance_and_the_usb_queue(tpus, cli, compiled_pair, tmp_path, monkeypatch):
    log = tmp_path / "options.log"
    tpus("usb", options_log=log)
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path / "cache"))
    r = cli("bench", compiled_pair[0], "-d", "usb", "--runs", "3", "--warmup", "0", "--performance", "low",
            "--usb-queue", "16", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert _options(log)[-1] == ["usb:0", "device=usb:0", "Performance=Low", "Usb.MaxBulkInQueueLength=16"]
    tpu = json.loads(r.stdout)["results"][0]["edgetpu"]
    assert tpu["performance"] == "low" and tpu["clock_mhz"] == 62.5
    bad = cli("bench", compiled_pair[0], "-d", "usb", "--usb-queue", "300")
    assert bad.exit_code == ExitCode.USAGE


# -- a USB Accelerator that vanishes mid-batch -----------------------------------------------------
# The runners' --reconnect: in-process, as a worker (the default on an Edge TPU) first climbs its
# own recovery ladder (tests/test_worker.py).
RUNNER_RECONNECT = ("--no-isolate",)

def test_a_vanished_accelerator_is_waited_for_and_nothing_is_lost_or_doubled(tpus, cli, compiled_pair,
                                                                             images):
    tpus("usb", delay_ms=1)
    reference = records(cli("classify", compiled_pair[0], *images, "-f", "jsonl", "-d", "usb:0"))
    tpus("usb", delay_ms=1, unplug="usb:0@5/2")  # gone after 5 images, back on the 3rd attempt
    r = cli("classify", compiled_pair[0], *images, "-f", "jsonl", "-d", "usb:0", "--reconnect", "30", *RUNNER_RECONNECT)
    assert r.exit_code == 0, r.stderr
    got = records(r)
    assert without_device(got) == without_device(reference)  # same order, none lost, none twice
    assert {rec["device"] for rec in got} == {"usb:0"}
    assert "waiting up to" in r.stderr and "usb:0 is back after" in r.stderr


def test_an_accelerator_that_stays_away_hands_over_to_the_cpu_twin(tpus, cli, compiled_pair, images):
    compiled, twin = compiled_pair
    tpus("usb", unplug="usb:0@4/-1")
    r = cli("classify", compiled, *images, "-f", "jsonl", "-k", "1", "--reconnect", "1", *RUNNER_RECONNECT)
    assert r.exit_code == 0, r.stderr
    got = records(r)
    assert [x["path"] for x in got] == [str(p) for p in images]  # none lost, none doubled
    assert [x["device"] for x in got] == ["edgetpu"] * 4 + ["cpu"] * (len(images) - 4)
    assert "did not come back within 1 s" in r.stderr
    assert "no Edge TPU left: running colors.tflite (CPU twin) on CPU for the rest" in r.stderr


def test_a_pool_waits_for_its_lost_tpu_while_the_other_works(tpus, cli, compiled_pair, images):
    tpus("usb,usb", delay_ms=10)
    reference = records(cli("classify", compiled_pair[0], *images, "-f", "jsonl", "-d", "usb:0"))
    tpus("usb,usb", delay_ms=10, unplug="usb:1@2/0")  # back at the first attempt to open it
    r = cli("classify", compiled_pair[0], *images, "-f", "jsonl", "-d", "usb:0,usb:1", "--reconnect", "30",
            *RUNNER_RECONNECT)
    assert r.exit_code == 0, r.stderr
    got = records(r)
    assert without_device(got) == without_device(reference)
    assert "usb:1 is back after" in r.stderr and "failed mid-run" not in r.stderr


def test_without_reconnect_the_failure_path_is_unchanged(tpus, cli, compiled_pair, images):
    tpus("usb", unplug="usb:0@3/1")
    r = cli("classify", compiled_pair[0], *images[:6], "-f", "jsonl", "-d", "usb:0", *RUNNER_RECONNECT)
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE and len(records(r)) == 3
    assert "waiting up to" not in r.stderr


def test_stand_in_environment_is_clean_between_tests():
    assert not any(k.startswith("FAKE_EDGETPU_UNPLUG") for k in os.environ)


# -- bench: clock, heat and throttling -------------------------------------------------------------

@pytest.fixture()
def bench_root(tmp_path, monkeypatch):
    """An empty system tree (no power sensors), a private cache, no compiler."""
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setenv("EDGEAPP_SYSROOT", str(root))
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path / "cache"))
    return root


def test_a_long_bench_whose_latency_grows_is_flagged_throttling(tpus, cli, compiled_pair, bench_root,
                                                                  tmp_path):
    tpus("usb", delay_ms=1, delay_step_ms=0.2)  # each invoke 0.2 ms slower than the one before
    plot = tmp_path / "bench.png"
    r = cli("bench", compiled_pair[0], "-d", "usb", "--duration", "1.5", "--warmup", "0", "-f", "json")
    assert r.exit_code == 0, r.stderr
    [res] = json.loads(r.stdout)["results"]
    assert len(res["windows"]) >= 2 and res["drift"] > thermal.DRIFT_LIMIT
    assert res["throttling"] and "rose" in res["throttling_reasons"][0]
    first, last = res["windows"][0], res["windows"][-1]
    # the drift flagged is the one the windows show, and the windows cover the run in order
    assert res["drift"] == pytest.approx(last["p50_ms"] / first["p50_ms"] - 1, abs=1e-3)
    starts = [w["start_s"] for w in res["windows"]]
    assert starts == sorted(starts) and sum(w["runs"] for w in res["windows"]) == res["runs"]
    table = cli("bench", compiled_pair[0], "-d", "usb", "--duration", "1", "--warmup", "0",
                "--plot", plot)
    assert table.exit_code == 0, table.stderr
    assert "usb: THROTTLING: warm latency rose" in table.stdout and plot.stat().st_size > 0


def test_bench_on_a_card_past_trip_point_0_reports_heat_and_throttling(tpus, cli, compiled_pair, bench_root):
    tpus("pci")
    hot_card(bench_root, 0, 87000)
    r = cli("bench", compiled_pair[0], "-d", "pci:0", "--runs", "5", "--warmup", "0", "-f", "json")
    assert r.exit_code == 0, r.stderr
    [res] = json.loads(r.stdout)["results"]
    tpu = res["edgetpu"]
    assert (tpu["temperature_before_c"], tpu["temperature_after_c"], tpu["trip_point0_c"]) == (87.0, 87.0, 85.0)
    assert tpu["clock_mhz"] == 250.0 and res["throttling"] and "windows" not in res
    assert any("past trip point 0" in why for why in res["throttling_reasons"])
    table = cli("bench", compiled_pair[0], "-d", "pci:0", "--runs", "5", "--warmup", "0").stdout
    assert "pci:0: libedgetpu build unknown, 250 MHz, 87.0 °C -> 87.0 °C" in table
    assert "pci:0: THROTTLING:" in table


def test_a_cool_card_and_no_duration_is_not_throttling(tpus, cli, compiled_pair, bench_root):
    tpus("pci")
    hot_card(bench_root, 0, 45000)
    res = json.loads(cli("bench", compiled_pair[0], "-d", "pci:0", "--runs", "5", "--warmup", "0",
                         "-f", "json").stdout)["results"][0]
    assert res["throttling"] is False and res["edgetpu"]["clock_mhz"] == 500.0


# -- camera: the live view and MQTT carry the temperature and the throttling flag ------------------

def test_health_summary_flags_drift_and_heat():
    from edgeapp.flows.camera.tpu_health import WINDOW, summarize_health

    cool = {"usb:0": {"temperature_c": None, "clock_mhz": 500.0, "throttling": None, "thermal": None}}
    steady = summarize_health(cool, [10.0] * WINDOW, [10.5] * WINDOW)
    assert steady["throttling"] is False and steady["temperature_c"] is None
    slower = summarize_health(cool, [10.0] * WINDOW, [12.0] * WINDOW)
    assert slower["throttling"] and slower["latency_drift"] == 0.2
    hot = {"pci:0": {"temperature_c": 91.0, "clock_mhz": 125.0, "throttling": True,
                     "thermal": {"sensor_fault": False}}}
    assert summarize_health(hot, [], [])["throttling"] and summarize_health(hot, [], [])["temperature_c"] == 91.0


def test_home_assistant_discovery_has_a_temperature_sensor_only_where_there_is_one():
    from edgeapp.sinks.mqtt import health_discovery

    usb = dict(health_discovery("garage/cam", temperature=False))
    assert list(usb) == ["homeassistant/binary_sensor/garage_cam/edgetpu_throttling/config"]
    pcie = dict(health_discovery("garage/cam", temperature=True))
    sensor = pcie["homeassistant/sensor/garage_cam/edgetpu_temperature/config"]
    assert sensor["state_topic"] == "garage/cam/edgetpu" and sensor["unit_of_measurement"] == "°C"
    assert sensor["device_class"] == "temperature" and sensor["availability_topic"] == "garage/cam/status"


@pytest.fixture()
def camera_video(tmp_path):
    """90 frames, 10 of each colour in turn."""
    from media import CLASSES, make_video

    return make_video(tmp_path / "cam.avi", [CLASSES[(i // 10) % 3] for i in range(90)], seed=3, marked=True)


def test_the_live_view_stats_carry_the_temperature_and_throttling(standin_lib, compiled_pair, camera_video,
                                                                 tmp_path):
    from camera_proc import CameraProc
    from live_view_client import stats, wait_for
    from standin import standin_env

    root = tmp_path / "root"
    hot_card(root, 0, 91000)
    env = {**standin_env(standin_lib, "pci", delay_ms=5), "EDGEAPP_SYSROOT": str(root),
           "EDGEAPP_CACHE_DIR": str(tmp_path / "cache")}
    with CameraProc(compiled_pair[0], "--source", camera_video, "--drop-frames", "--serve", "127.0.0.1:0",
                    "--duration", "30", "--summary", "json", env=env) as cam:
        base = cam.url()
        got = wait_for(lambda: stats(base).get("edgetpu"), what="the Edge TPU's health in /stats")
        assert got["temperature_c"] == 91.0 and got["clock_mhz"] == 125.0 and got["throttling"]
        [device] = got["devices"].values()  # the one card ("edgetpu": --device auto)
        assert device["clock_mode"] is None and device["temperature_c"] == 91.0  # no package database
        assert any("trip point 0" in why for why in got["throttling_reasons"])
        cam.stop()


def test_mqtt_publishes_the_health_and_home_assistant_discovery(tpus, cli, compiled_pair, camera_video,
                                                                tmp_path, monkeypatch):
    from mqtt_broker import Broker, Subscriber, retained

    tpus("pci", delay_ms=2)
    root = tmp_path / "root"
    hot_card(root, 0, 86500)
    monkeypatch.setenv("EDGEAPP_SYSROOT", str(root))
    broker = Broker(tmp_path).start()
    try:
        sub = Subscriber(broker.port, "#")
        try:
            r = cli("camera", compiled_pair[0], "--source", camera_video, "--mqtt", broker.url("cam9"),
                    "--output", tmp_path / "records.jsonl")
            assert r.exit_code == 0, r.stderr
            config = "homeassistant/sensor/cam9/edgetpu_temperature/config"
            sub.wait(lambda: sub.on(config) and sub.on("cam9/edgetpu"), what="health and discovery")
            health = sub.json_on("cam9/edgetpu")[0]
            assert health["temperature_c"] == 86.5 and health["throttling"] is True
            assert sub.json_on(config)[0]["value_template"] == "{{ value_json.temperature_c }}"
            assert sub.on("homeassistant/binary_sensor/cam9/edgetpu_throttling/config")
        finally:
            sub.close()
        payload, flag = retained(broker.port, "cam9/edgetpu")
        assert flag and json.loads(payload)["temperature_c"] == 86.5
    finally:
        broker.kill()


def test_the_python_api_passes_performance_too(tpus, compiled_pair, images, tmp_path):
    import edgeapp

    log = tmp_path / "options.log"
    tpus("usb,usb", options_log=log)
    with edgeapp.open_model(compiled_pair[0], "all", performance="high") as model:
        assert len(list(model.batch([str(p) for p in images[:4]]))) == 4
    # (the delegate probe, in a child, also opens usb:0 once with the same options)
    assert {tuple(o) for o in _options(log)} == {("usb:0", "device=usb:0", "Performance=High"),
                                                 ("usb:1", "device=usb:1", "Performance=High")}


def test_performance_reaches_every_segment_of_a_pipeline(tpus, tmp_path):
    import numpy as np
    from standin import write_segments

    from edgeapp.execution.placement import open_runner
    from edgeapp.hw.runtime import EngineOptions

    log = tmp_path / "options.log"
    tpus("usb,usb,pci", options_log=log)
    write_segments(tmp_path / "seg")
    with open_runner(tmp_path / "seg" / "colors", "all", EngineOptions(performance="low")) as runner:
        list(runner.imap([(0, np.zeros((1, 16, 16, 3), np.uint8))]))
    opened = {o[0]: o[1:] for o in _options(log)}
    assert opened == {"usb:0": ["device=usb:0", "Performance=Low"],
                      "usb:1": ["device=usb:1", "Performance=Low"],
                      "pci:0": ["device=pci:0", "Performance=Low"]}
