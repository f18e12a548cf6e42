"""`edgeapp doctor` against fake system trees (root and environment injected), and on this machine."""

from __future__ import annotations

import json
import platform
import stat
from pathlib import Path

import pytest
from conftest import default_runtime
from test_devices import add_apex, two_accelerators_and_a_mouse

from edgeapp.errors import ExitCode
from edgeapp.flows.doctor import FAIL, OK, WARN, exit_ok, numpy_check, pycoral_check, run_checks

# What libedgetpu1-std's package installs (/lib/udev/rules.d/60-libedgetpu1-std.rules).
USB_RULES = ('SUBSYSTEM=="usb",ATTRS{idVendor}=="1a6e",GROUP="plugdev"\n'
             'SUBSYSTEM=="usb",ATTRS{idVendor}=="18d1",GROUP="plugdev"\n')


def by_name(checks, name: str):
    found = [c for c in checks if c.name == name]
    assert found, f"no check {name!r} in {[c.name for c in checks]}"
    return found


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


def env_for(tmp_path: Path, **extra: str) -> dict:
    return {"USER": "alice", "PATH": str(tmp_path / "bin"), "EDGEAPP_CACHE_DIR": str(tmp_path / "cache"),
            "EDGEAPP_EDGETPU_LIB": str(tmp_path / "no" / "libedgetpu.so.1"), **extra}


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
    assert (apex.status, apex.detail) == (OK, "/dev/apex_0, 52.3 °C")
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


def test_compiler_on_arm_and_missing_on_x86(tmp_path):
    arm = by_name(run_checks(tmp_path, env_for(tmp_path), machine="aarch64"), "edgetpu_compiler")[0]
    assert arm.status == WARN and "aarch64" in arm.detail
    assert "x86-64 PC" in arm.fix and "edgeapp check" in arm.fix
    x86 = by_name(run_checks(tmp_path, env_for(tmp_path), machine="x86_64"), "edgetpu_compiler")[0]
    assert x86.status == WARN and "edgetpu-compiler" in x86.fix


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
