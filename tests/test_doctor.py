"""`edgeapp doctor` against fake system trees (root and environment injected), and on this machine."""

from __future__ import annotations

import json
import platform
import stat
import sys
from pathlib import Path

import pytest
from conftest import default_runtime
from doctor_checks import by_name, env_for
from fake_roots import add_apex, pi5, two_accelerators_and_a_mouse, write_file

from edgeapp.errors import ExitCode
from edgeapp.flows.doctor.install import FAIL, OK, WARN, exit_ok, numpy_check, pycoral_check, run_checks

# What libedgetpu1-std's package installs (/lib/udev/rules.d/60-libedgetpu1-std.rules).
USB_RULES = ('SUBSYSTEM=="usb",ATTRS{idVendor}=="1a6e",GROUP="plugdev"\n'
             'SUBSYSTEM=="usb",ATTRS{idVendor}=="18d1",GROUP="plugdev"\n')


def system(root: Path, *, user_in_plugdev: bool = True, rules: bool = True) -> Path:
    two_accelerators_and_a_mouse(root)
    add_apex(root, 0)
    (root / "proc").mkdir()
    (root / "proc/modules").write_text("apex 28672 0 - Live 0x0000000000000000 (C)\n"
                                       "gasket 98304 1 apex, Live 0x0000000000000000 (C)\n")
    if rules:
        (root / "lib/udev/rules.d").mkdir(parents=True)
        (root / "lib/udev/rules.d/60-libedgetpu1-std.rules").write_text(USB_RULES)
        (root / "lib/udev/rules.d/50-other.rules").write_text('SUBSYSTEM=="tty", GROUP="dialout"\n')
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/bash\n")
    (root / "etc/group").write_text(f"root:x:0:\nplugdev:x:46:{'bob,alice' if user_in_plugdev else 'bob'}\n"
                                    "alice:x:1000:\n")
    (root / "etc/os-release").write_text('NAME="Debian"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    return root


def stand_in_compiler(tmp_path: Path) -> None:
    """edgetpu_compiler on PATH that answers --version as the real one does."""
    tool = tmp_path / "bin" / "edgetpu_compiler"
    tool.parent.mkdir(parents=True, exist_ok=True)
    tool.write_text("#!/bin/sh\necho 'Edge TPU Compiler version 16.0.384591198'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


def test_healthy_system_with_usb_and_pcie(tmp_path):
    stand_in_compiler(tmp_path)
    checks = run_checks(system(tmp_path / "root"), env_for(tmp_path), machine="x86_64")
    usb = {c.detail.split()[0]: c for c in by_name(checks, "usb accelerator")}
    assert usb["18d1:9302"].status == OK and "5000 Mb/s" in usb["18d1:9302"].detail
    assert usb["1a6e:089a"].status == WARN and "USB 2" in usb["1a6e:089a"].detail
    assert "USB 3" in usb["1a6e:089a"].fix
    assert by_name(checks, "udev rule")[0].status == OK
    assert "/lib/udev/rules.d/60-libedgetpu1-std.rules" == by_name(checks, "udev rule")[0].detail
    access = by_name(checks, "usb access")[0]
    assert (access.status, access.detail) == (OK, "alice is in group plugdev")
    apex = by_name(checks, "pcie edge tpu")[0]
    assert (apex.status, apex.detail) == (OK, "/dev/apex_0, 52.3 °C, 500 MHz")
    assert by_name(checks, "pcie driver")[0].status == OK
    compiler = by_name(checks, "edgetpu_compiler")[0]
    assert compiler.status == OK and compiler.detail.startswith("16.0.384591198 at ")
    assert by_name(checks, "libedgetpu")[0].status == WARN  # not installed: CPU only, not a failure
    assert by_name(checks, "os")[0].detail == "Debian GNU/Linux 12 (bookworm)"
    assert exit_ok(checks), [c for c in checks if c.status == FAIL]


def test_user_outside_the_rule_group_fails_when_an_accelerator_is_plugged_in(tmp_path):
    checks = run_checks(system(tmp_path / "root", user_in_plugdev=False), env_for(tmp_path))
    access = by_name(checks, "usb access")[0]
    assert access.status == FAIL and "plugdev" in access.detail
    assert access.fix.startswith("sudo usermod -aG plugdev alice")
    assert not exit_ok(checks)


def test_primary_group_counts_as_membership(tmp_path):
    root = system(tmp_path / "root", user_in_plugdev=False)
    (root / "etc/passwd").write_text("alice:x:1000:46::/home/alice:/bin/bash\n")
    assert by_name(run_checks(root, env_for(tmp_path)), "usb access")[0].status == OK


def test_missing_udev_rule(tmp_path):
    checks = run_checks(system(tmp_path / "root", rules=False), env_for(tmp_path))
    rule = by_name(checks, "udev rule")[0]
    assert rule.status == FAIL and "libedgetpu1-std" in rule.fix
    empty = tmp_path / "empty"
    empty.mkdir()
    quiet = run_checks(empty, env_for(tmp_path))  # nothing plugged in: only a warning
    assert by_name(quiet, "udev rule")[0].status == WARN
    assert by_name(quiet, "edge tpu")[0].status == WARN
    assert exit_ok(quiet)


def test_pcie_card_without_driver_fails_and_hot_card_warns(tmp_path):
    root = tmp_path / "root"
    card = root / "sys/bus/pci/devices/0000:01:00.0"
    card.mkdir(parents=True)
    (card / "vendor").write_text("0x1ac1\n")
    (card / "device").write_text("0x089a\n")
    driver = by_name(run_checks(root, env_for(tmp_path)), "pcie driver")[0]
    assert driver.status == FAIL and "0000:01:00.0 (driver: none)" in driver.detail
    assert "gasket-dkms" in driver.fix
    (root / "sys/module/apex").mkdir(parents=True)
    (root / "sys/module/gasket").mkdir(parents=True)
    add_apex(root, 0, 91000)
    checks = run_checks(root, env_for(tmp_path))
    assert by_name(checks, "pcie driver")[0].status == OK
    hot = by_name(checks, "pcie edge tpu")[0]
    assert hot.status == WARN and "91.0 °C" in hot.detail


def test_compiler_missing_on_arm_and_on_x86_points_at_edgeapps_install(tmp_path):
    env = env_for(tmp_path, EDGEAPP_DATA_DIR=str(tmp_path / "data"))
    for machine in ("aarch64", "x86_64"):
        check = by_name(run_checks(tmp_path, env, machine=machine), "edgetpu_compiler")[0]
        assert check.status == WARN and "edgeapp check" in check.detail
        assert check.fix == "edgeapp compiler install" and "apt" not in check.detail + check.fix


@pytest.mark.parametrize("numpy, runtimes, status", [
    ("2.1.3", {"tflite-runtime": "2.14.0"}, FAIL),
    ("1.26.4", {"tflite-runtime": "2.14.0"}, OK),
    ("2.1.3", {"ai-edge-litert": "1.2.0"}, OK),
    (None, {"ai-edge-litert": "1.2.0"}, FAIL),
])
def test_numpy_against_tflite_runtime(numpy, runtimes, status):
    check = numpy_check(numpy, runtimes)
    assert check.status == status
    if status == FAIL and numpy:
        assert "numpy<2" in check.fix


def test_pycoral_real_or_the_unrelated_pypi_package(tmp_path, monkeypatch):
    fake = tmp_path / "pypi" / "pycoral"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('doctor must not import this')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "pypi"))
    unrelated = pycoral_check()
    assert unrelated.status == WARN and "unrelated" in unrelated.detail and "uninstall" in unrelated.fix
    real = tmp_path / "google" / "pycoral"
    (real / "utils").mkdir(parents=True)
    for f in (real / "__init__.py", real / "utils" / "__init__.py", real / "utils" / "edgetpu.py"):
        f.write_text("raise ImportError('doctor must not import this')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "google"))
    assert pycoral_check().status == OK


def test_doctor_on_this_machine(tmp_path, monkeypatch):
    """The real environment: no Edge TPU, no libedgetpu. Exit 0 unless a check fails.

    Run in a fresh process: a libedgetpu that another test loaded into this one would answer
    for `libedgetpu.so.1` (the dynamic loader matches loaded libraries by soname)."""
    import subprocess
    import sys
    from types import SimpleNamespace

    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EDGEAPP_EDGETPU_LIB", raising=False)

    def cli(*args):
        r = subprocess.run([sys.executable, "-m", "edgeapp", *args], capture_output=True, text=True)
        return SimpleNamespace(exit_code=r.returncode, stdout=r.stdout, stderr=r.stderr)

    table = cli("doctor")
    assert table.exit_code in (0, int(ExitCode.CHECKS_FAILED)), table.stderr
    checks, _, plan = table.stdout.partition("\n\n")  # the checks, then this platform's plan
    assert all(ln.split()[0] in (OK, WARN, FAIL) for ln in checks.splitlines())
    major, minor = platform.python_version_tuple()[:2]
    assert plan.startswith("plan for ") and f"Python {major}.{minor}" in plan.split("\n")[0]
    result = cli("doctor", "--format", "json")
    report = json.loads(result.stdout)
    checks = report["checks"]
    failed = [c for c in checks if c["status"] == FAIL]
    assert result.exit_code == (int(ExitCode.CHECKS_FAILED) if failed else 0)
    assert report["summary"]["fail"] == len(failed)
    names = {c["name"]: c for c in checks}
    assert names["python"]["detail"].startswith(platform.python_version())
    assert names["architecture"]["detail"] == platform.machine().lower()
    name, version = default_runtime()
    runtime = names[f"runtime {name}"]
    assert (runtime["status"], runtime["detail"]) == (OK, f"{version}, imports")
    import ctypes.util

    if ctypes.util.find_library("edgetpu") is None:
        assert names["libedgetpu"]["status"] == WARN and not failed
    assert report["probe_verdicts"] == []


def test_doctor_command_on_a_broken_fake_system(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path / "cache"))
    result = cli("doctor", "--root", system(tmp_path / "root", user_in_plugdev=False))
    assert result.exit_code == int(ExitCode.CHECKS_FAILED)
    assert "usb access" in result.stderr
    line = next(ln for ln in result.stdout.splitlines() if "usb access" in ln)
    assert line.startswith("fail") and "-> sudo usermod -aG plugdev alice" in line


# -- the accelerator's state, kernels, a Raspberry Pi 5, containers --------------------------------


def test_pi5_without_the_pcie_overlay_and_with_16k_pages_prints_the_lines_to_add(tmp_path):
    root = pi5(tmp_path / "root", "[all]\ndtparam=audio=on\n[pi4]\ndtoverlay=pciex1-compat-pi5,no-mip\n")
    checks = run_checks(root, env_for(tmp_path))
    pcie = by_name(checks, "pi 5 pcie")[0]
    assert pcie.status == WARN and "/boot/firmware/config.txt" in pcie.detail
    assert pcie.fix == ("add under [all] in /boot/firmware/config.txt: dtparam=pciex1 / "
                        "dtoverlay=pciex1-compat-pi5,no-mip; then reboot")
    page = by_name(checks, "page size")[0]
    assert page.status == WARN and "16K" in page.detail and "kernel=kernel8.img" in page.fix
    fixed = pi5(tmp_path / "fixed", "# Coral\n[all]\ndtparam=pciex1\ndtoverlay=pciex1-compat-pi5,no-mip\n"
                "kernel=kernel8.img\n", "6.6.51+rpt-rpi-v8")
    checks = run_checks(fixed, env_for(tmp_path))
    assert by_name(checks, "pi 5 pcie")[0].status == OK and by_name(checks, "page size")[0].status == OK


def test_the_smaps_page_size_wins_and_a_seen_card_makes_16k_a_failure(tmp_path):
    root = pi5(tmp_path / "root", "dtparam=pciex1\ndtoverlay=pciex1-compat-pi5,no-mip\n", "6.6.51+rpt-rpi-v8")
    write_file(root, "/proc/self/smaps", "Size: 4 kB\nKernelPageSize:       16 kB\n")
    card = root / "sys/bus/pci/devices/0001:01:00.0"
    write_file(root, str(card.relative_to(root) / "vendor"), "0x1ac1\n")
    write_file(root, str(card.relative_to(root) / "device"), "0x089a\n")
    page = by_name(run_checks(root, env_for(tmp_path)), "page size")[0]
    assert page.status == FAIL and "16K" in page.detail


def test_an_apex_module_built_for_another_kernel_names_the_community_build(tmp_path):
    root = tmp_path / "root"
    write_file(root, "/proc/sys/kernel/osrelease", "6.8.0-45-generic\n")
    write_file(root, "/lib/modules/6.5.0-44-generic/modules.dep",
          "updates/dkms/apex.ko.zst: updates/dkms/gasket.ko.zst\nupdates/dkms/gasket.ko.zst:\n")
    write_file(root, "/lib/modules/6.8.0-45-generic/modules.dep", "kernel/drivers/usb/core/usbcore.ko.zst:\n")
    for name, value in (("vendor", "0x1ac1"), ("device", "0x089a")):
        write_file(root, f"/sys/bus/pci/devices/0000:03:00.0/{name}", value + "\n")
    module = by_name(run_checks(root, env_for(tmp_path)), "kernel module")[0]
    assert module.status == FAIL and "6.5.0-44-generic" in module.detail and "6.8.0-45-generic" in module.detail
    assert "github.com/google/gasket-driver" in module.fix and "debuild" in module.fix
    write_file(root, "/lib/modules/6.8.0-45-generic/updates/dkms/apex.ko.zst", "")
    module = by_name(run_checks(root, env_for(tmp_path)), "kernel module")[0]
    assert module.status == WARN and "not loaded" in module.detail  # built now; modprobe it


def test_no_card_and_no_module_says_nothing_about_kernels(tmp_path):
    root = tmp_path / "root"
    write_file(root, "/proc/sys/kernel/osrelease", "6.8.0-45-generic\n")
    assert not [c for c in run_checks(root, env_for(tmp_path)) if c.name == "kernel module"]


def test_a_udev_rule_for_one_usb_id_only_loses_the_other_state(tmp_path):
    root = system(tmp_path / "root", rules=False)
    write_file(root, "/etc/udev/rules.d/99-coral.rules", 'SUBSYSTEM=="usb",ATTRS{idVendor}=="18d1",MODE="0666"\n')
    rule = by_name(run_checks(root, env_for(tmp_path)), "udev rule")[0]
    assert rule.status == FAIL and "1a6e:089a (bootloader)" in rule.detail
    assert 'ATTRS{idVendor}=="1a6e",ATTRS{idProduct}=="089a",GROUP="plugdev"' in rule.fix


@pytest.mark.parametrize("nodes, status", [(["004"], WARN), ([], FAIL), (["001", "004"], OK)])
def test_a_container_must_map_the_whole_usb_bus(tmp_path, nodes, status):
    from fake_roots import add_usb

    root = tmp_path / "root"
    add_usb(root, "2-1", "1a6e:089a", "5000", 2, 4)
    add_usb(root, "usb2", "1d6b:0003", "5000", 2, 1)  # the bus's root hub
    write_file(root, "/.dockerenv", "")
    for n in nodes:
        write_file(root, f"/dev/bus/usb/002/{n}", "")
    check = by_name(run_checks(root, env_for(tmp_path)), "container usb")[0]
    assert check.status == status, check
    if status != OK:
        assert "/dev/bus/usb" in check.fix and "docker:" in check.detail


def test_doctor_shows_heat_trip_points_and_the_sensor_fault(tmp_path):
    from fake_roots import hot_card

    root = tmp_path / "root"
    hot_card(root, 0, 91000)
    hot_card(root, 1, -87900)
    cards = {c.detail.split(",")[0]: c for c in by_name(run_checks(root, env_for(tmp_path)), "pcie edge tpu")}
    hot, broken = cards["/dev/apex_0"], cards["/dev/apex_1"]
    assert hot.status == WARN and "91.0 °C, 125 MHz (trip points 85/90/95 °C" in hot.detail
    assert "shutdown 100 °C" in hot.detail and "warning 100 °C (off)" in hot.detail
    assert broken.status == WARN and "sensor fault (reads -87.9 °C)" in broken.detail and "#843" in broken.fix


def test_doctor_names_the_clock_mode_of_the_installed_build(tmp_path, standin_lib):
    from fake_roots import dpkg_owns

    root = system(tmp_path / "root")
    dpkg_owns(root, "libedgetpu1-std", standin_lib)
    checks = run_checks(root, env_for(tmp_path, EDGEAPP_EDGETPU_LIB=str(standin_lib)))
    mode = by_name(checks, "clock mode")[0]
    assert "std build" in mode.detail and "libedgetpu1-max" in mode.fix
    usb = {c.detail.split()[0]: c for c in by_name(checks, "usb accelerator")}
    assert "(bootloader)" in usb["1a6e:089a"].detail and "(running)" in usb["18d1:9302"].detail


def test_probe_cache_line_counts_the_model_verdicts_it_acts_on(tmp_path):
    """Five crash verdicts on model files block those files: doctor says so (it used to count
    only the delegate-probe pairs and report "no verdicts")."""
    from edgeapp.flows.doctor.install import probe_cache_check
    from edgeapp.hw.verdicts import ModelKey, Verdict, VerdictCache

    cache_dir = tmp_path / "cache"
    env = {"EDGEAPP_CACHE_DIR": str(cache_dir)}
    assert probe_cache_check(env).status == OK
    cache = VerdictCache(cache_dir)
    for i in range(5):
        cache.put_model(ModelKey(f"{i:064x}", "ai-edge-litert", "2.3.0"),
                        Verdict("crash", f"m{i}.tflite crashes the runtime"), f"m{i}.tflite")
    check = probe_cache_check(env)
    assert check.status == WARN and "5 cached verdict(s)" in check.detail and "crash 5" in check.detail
    assert "--forget-probes" in check.detail + (check.fix or "")


def test_probe_cache_line_says_which_verdicts_other_environments_recorded(tmp_path):
    """The cache is the user's, shared by every venv: verdicts another venv recorded are said
    as such, with where they come from."""
    from edgeapp.flows.doctor.install import probe_cache_check
    from edgeapp.hw.verdicts import ModelKey, Verdict, VerdictCache

    cache_dir = tmp_path / "cache"
    env = {"EDGEAPP_CACHE_DIR": str(cache_dir)}
    VerdictCache(cache_dir).put_model(ModelKey("a" * 64, "ai-edge-litert", "2.3.0"),
                                      Verdict("pass", "fine"), "m.tflite")
    assert "other Python" not in probe_cache_check(env).detail
    VerdictCache(cache_dir, environment="/venvs/other").put_model(
        ModelKey("b" * 64, "tflite-runtime", "2.5.0"), Verdict("crash", "m crashes"), "m.tflite")
    detail = probe_cache_check(env).detail
    assert "1 recorded by other Python environments (/venvs/other)" in detail
    assert sys.prefix in detail


def test_bench_refuses_runs_and_duration_together(cli, tiny_model):
    r = cli("bench", tiny_model, "--runs", "5", "--duration", "0.5")
    assert r.exit_code == ExitCode.USAGE and "--runs" in r.stderr and "--duration" in r.stderr
