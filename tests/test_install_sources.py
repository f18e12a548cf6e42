"""Where doctor sends people: sources that exist today, never Coral's dead apt repository.

Fake system trees (Debian bullseye with Python 3.9, a Raspberry Pi 5 with a PCIe card and no
driver, a Coral Dev Board's Mendel with Coral's apt sources still listed) read through doctor's
--root, and PyPI's packages named like Google's pycoral planted on the Python path.
"""

from __future__ import annotations

import json
import re

import pytest
from doctor_checks import by_name, env_for
from fake_roots import fake_system, pi5, write_file

from edgeapp.core.install.plan import DISABLE_CORAL_SOURCES
from edgeapp.flows.doctor.install import OK, WARN, install_plan, pycoral_check, run_checks

DEAD = re.compile(r"packages\.cloud\.google\.com|coral-edgetpu-stable|apt repositor|apt-key|"
                  r"edgetpu-compiler \(|Colab", re.I)


def _all_text(checks, plan) -> str:
    return "\n".join([f"{c.detail} {c.fix}" for c in checks] + plan.lines())


def test_bullseye_with_python_3_9_names_no_coral_source(tmp_path):
    root = fake_system(tmp_path / "root", "bullseye", "arm64")
    plan = install_plan(root, machine="aarch64", python=(3, 9))
    checks = run_checks(root, env_for(tmp_path, EDGEAPP_DATA_DIR=str(tmp_path / "data")), plan=plan)
    text = _all_text(checks, plan)
    assert not DEAD.search(text), DEAD.search(text)
    assert "github.com/feranick/libedgetpu/releases/download/v16.0TF2.15.1-1/" in text
    assert by_name(checks, "edgetpu_compiler")[0].fix == "edgeapp compiler install"


def test_pi5_with_a_pcie_card_gets_the_driver_from_source(tmp_path):
    root = pi5(tmp_path / "root", "dtparam=pciex1\ndtoverlay=pciex1-compat-pi5,no-mip\nkernel=kernel8.img\n",
               "6.6.51+rpt-rpi-v8")
    fake_system(root, "bookworm", "arm64")
    for name, value in (("vendor", "0x1ac1"), ("device", "0x089a")):
        write_file(root, f"/sys/bus/pci/devices/0001:01:00.0/{name}", value + "\n")
    plan = install_plan(root, machine="aarch64", python=(3, 11))
    checks = run_checks(root, env_for(tmp_path), plan=plan)
    driver = by_name(checks, "pcie driver")[0]
    assert "github.com/google/gasket-driver" in driver.fix and "dkms" in driver.fix
    assert not DEAD.search(_all_text(checks, plan))
    newer = pi5(tmp_path / "newer", "dtparam=pciex1\n", "6.12.25+rpt-rpi-v8")
    for name, value in (("vendor", "0x1ac1"), ("device", "0x089a")):
        write_file(newer, f"/sys/bus/pci/devices/0001:01:00.0/{name}", value + "\n")
    fix = by_name(run_checks(newer, env_for(tmp_path)), "pcie driver")[0].fix
    assert ("github.com/feranick/gasket-driver/releases/download/1.0-18.4/gasket-dkms_1.0-18.4_all.deb"
            in fix)


def test_mendel_keeps_its_pair_and_disables_corals_sources(tmp_path, cli, monkeypatch):
    root = fake_system(tmp_path / "root", "mendel-5.3", "arm64",
                       [("libedgetpu1-std", "arm64", "16.0"), ("python3-tflite-runtime", "arm64", "2.5.0.post1")])
    listed = "deb https://packages.cloud.google.com/apt coral-edgetpu-stable main\n"  # as Mendel has it
    write_file(root, "/etc/apt/sources.list.d/coral-edgetpu.list", listed)
    write_file(root, "/etc/apt/sources.list.d/multistrap-main.list",
               "deb https://mendel-linux.org/apt/eagle eagle main\n")
    plan = install_plan(root, machine="aarch64", python=(3, 7))
    checks = run_checks(root, env_for(tmp_path), plan=plan)
    apt = by_name(checks, "apt sources")[0]
    assert apt.status == WARN and apt.detail.startswith("/etc/apt/sources.list.d/coral-edgetpu.list ")
    assert apt.fix == DISABLE_CORAL_SOURCES
    assert plan.route == "mendel" and DISABLE_CORAL_SOURCES in plan.lines()[2]
    text = "\n".join(f"{c.detail} {c.fix}" for c in checks if c.name != "apt sources") + "\n".join(plan.lines())
    assert not DEAD.search(text)
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path / "cache"))
    out = cli("doctor", "--root", root)
    assert "apt-get install -y libedgetpu1-std" not in out.stdout and "coral-edgetpu.list" in out.stdout


def test_the_sed_line_disables_exactly_corals_lines(tmp_path):
    """The printed command, run on a copy of Mendel's sources with GNU sed."""
    import shutil
    import subprocess

    if shutil.which("sed") is None:
        pytest.skip("needs sed: apt-get install sed")
    etc = tmp_path / "etc/apt/sources.list.d"
    etc.mkdir(parents=True)
    (tmp_path / "etc/apt/sources.list").write_text("deb http://deb.debian.org/debian buster main\n")
    (etc / "coral-edgetpu.list").write_text("deb https://packages.cloud.google.com/apt coral-edgetpu-stable main\n")
    command = DISABLE_CORAL_SOURCES.replace("sudo ", "").replace("/etc/apt", str(tmp_path / "etc/apt"))
    subprocess.run(["sh", "-c", command], check=True)
    assert (etc / "coral-edgetpu.list").read_text().startswith("# deb https://")
    assert (tmp_path / "etc/apt/sources.list").read_text().startswith("deb http://deb.debian.org")
    from edgeapp.hw.osinfo import coral_apt_sources

    assert coral_apt_sources(tmp_path) == []


@pytest.mark.parametrize("dist, words", [("pycoral", "Allen Coral Atlas"), ("pycoral-pi5", "_pywrap_coral.so")])
def test_pypis_pycoral_lookalikes_are_named_and_not_needed(tmp_path, monkeypatch, dist, words):
    site = tmp_path / "site"
    pkg = site / "pycoral"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('doctor must not import this')\n")
    info = site / f"{dist.replace('-', '_')}-0.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.2.0\n")
    monkeypatch.syspath_prepend(str(site))
    check = pycoral_check()
    assert check.status == WARN and words in check.detail and "does not need" in check.detail
    assert check.fix == f"pip uninstall -y {dist}"


def test_no_pycoral_is_fine_and_says_it_is_not_needed():
    check = pycoral_check()
    if check.status == OK:
        assert "not need" in check.detail


def test_doctor_json_plan_on_bookworm_has_exact_file_names(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path / "cache"))
    root = fake_system(tmp_path / "root", "bookworm", "arm64")
    report = json.loads(cli("doctor", "--root", root, "--format", "json").stdout)
    commands = [c for s in report["plan"]["steps"] for c in s["commands"]]
    assert any(re.search(r"libedgetpu1-std_16\.0tf[\d.]+-1\.bookworm_arm64\.deb$", c) for c in commands)
    assert not DEAD.search(json.dumps(report))
