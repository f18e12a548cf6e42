"""`edgeapp doctor`'s plan: the commands that give each platform a working Edge TPU runtime pair.

Each platform is a fake system tree: its real /etc/os-release and a dpkg status database
(dpkg's own architecture, and what is installed), read through doctor's injectable root. The
Python version and, where there is no dpkg, the machine are what that platform runs.
"""

from __future__ import annotations

import json
import sys

import pytest
from fake_roots import fake_system

from edgeapp.core.install.pairing import UNKNOWN, WORKS
from edgeapp.core.install.plan import DISABLE_CORAL_SOURCES
from edgeapp.flows.doctor.install import install_plan
from edgeapp.hw.osinfo import read_platform

RELEASES = "https://github.com/feranick/libedgetpu/releases/download"


def commands(plan) -> list:
    return [c for step in plan.steps for c in step.commands]


def test_mendel_5_3_keeps_what_mendel_installed(tmp_path):
    root = fake_system(tmp_path, "mendel-5.3", "arm64", [("libedgetpu1-std", "arm64", "16.0"),
                                                          ("python3-tflite-runtime", "arm64", "2.5.0.post1")])
    plan = install_plan(root, machine="aarch64", python=(3, 7))
    assert plan.platform.describe() == "Mendel GNU/Linux 5 (Eagle), arm64, Python 3.7"
    assert (plan.route, plan.verdict) == ("mendel", WORKS)
    assert commands(plan) == [DISABLE_CORAL_SOURCES, "python3 -m pip uninstall -y tflite-runtime",
                              "sudo usermod -aG plugdev $USER"]
    assert "fail `apt-get update`" in plan.steps[0].what
    assert "tflite-runtime 2.5.0.post1" in plan.runtime and "--system-site-packages" in " ".join(plan.notes)
    assert "google-coral/edgetpu#660" in plan.headline()


def test_python_3_9_on_debian_bullseye_pairs_a_community_deb_with_pypis_tflite_runtime(tmp_path):
    plan = install_plan(fake_system(tmp_path, "bullseye", "arm64"), machine="aarch64", python=(3, 9))
    deb = "libedgetpu1-std_16.0tf2.15.1-1.bullseye_arm64.deb"
    assert (plan.route, plan.verdict, plan.platform.arch) == ("community-deb", UNKNOWN, "arm64")
    assert commands(plan) == ["sudo apt-get update", "sudo apt-get install -y libusb-1.0-0 wget",
                              f"wget {RELEASES}/v16.0TF2.15.1-1/{deb}", f"sudo apt-get install -y ./{deb}",
                              "python3 -m pip install 'tflite-runtime==2.13.0' 'numpy<2'",
                              "sudo usermod -aG plugdev $USER"]
    assert "edgeapp probes it on first Edge TPU use" in plan.headline()
    armhf = install_plan(fake_system(tmp_path / "b", "bullseye", "armhf"), python=(3, 9))
    assert armhf.route == "none" and "bullseye/armhf" in armhf.notes[0]
    assert any(f"{RELEASES[:-len('/download')]}" in n for n in armhf.notes)


@pytest.mark.parametrize("release, dpkg_arch, machine, python, deb, runtime_cmd, verdict", [
    ("bookworm", "arm64", "aarch64", (3, 11), "16.0TF2.19.1-1/libedgetpu1-std_16.0tf2.19.1-1.bookworm_arm64.deb",
     "python3 -m pip install ai-edge-litert", WORKS),
    # 32-bit Raspberry Pi OS on a Pi 4 boots a 64-bit kernel: the machine says aarch64, dpkg says armhf
    ("raspbian-bookworm", "armhf", "aarch64", (3, 11),
     "16.0TF2.17.1-1/libedgetpu1-std_16.0tf2.17.1-1.bookworm_armhf.deb",
     "python3 -m pip install 'tflite-runtime==2.14.0' 'numpy<2'", UNKNOWN),
    ("trixie", "arm64", "aarch64", (3, 13), "16.0TF2.19.1-1/libedgetpu1-std_16.0tf2.19.1-1.trixie_arm64.deb",
     "python3 -m pip install ai-edge-litert", WORKS),
    ("jammy", None, "x86_64", (3, 10), "16.0TF2.17.1-1/libedgetpu1-std_16.0tf2.17.1-1.ubuntu22.04_amd64.deb",
     "python3 -m pip install ai-edge-litert", UNKNOWN),
    ("noble", None, "x86_64", (3, 12), "16.0TF2.19.1-1/libedgetpu1-std_16.0tf2.19.1-1.ubuntu24.04_amd64.deb",
     "python3 -m pip install ai-edge-litert", WORKS),
])
def test_community_deb_and_runtime_per_platform(tmp_path, release, dpkg_arch, machine, python, deb,
                                                runtime_cmd, verdict):
    plan = install_plan(fake_system(tmp_path, release, dpkg_arch), machine=machine, python=python)
    file = deb.split("/")[1]
    assert commands(plan) == ["sudo apt-get update", "sudo apt-get install -y libusb-1.0-0 wget",
                              f"wget {RELEASES}/{deb}", f"sudo apt-get install -y ./{file}",
                              runtime_cmd, "sudo usermod -aG plugdev $USER"]
    assert (plan.route, plan.verdict) == ("community-deb", verdict)
    assert plan.fix == f"wget {RELEASES}/{deb} && sudo apt-get install -y ./{file}"
    assert any("plugdev" in n and "replug" in n for n in plan.notes)
    if verdict == UNKNOWN:
        assert "edgeapp probes it on first Edge TPU use" in plan.headline()


def test_macos_says_there_is_no_published_pair(tmp_path):
    plan = install_plan(tmp_path, machine="arm64", python=(3, 12), system="Darwin")
    assert plan.platform.describe() == "macOS, arm64, Python 3.12"
    assert (plan.route, commands(plan)) == ("none", ["brew install libusb"])
    assert "known to crash with ai-edge-litert" in plan.notes[0]
    assert any("CPU" in n for n in plan.notes) and "runs on the CPU" in plan.fix
    assert plan.headline().endswith("no published Edge TPU runtime pair")


def test_unknown_codename_or_distribution_gives_no_made_up_url(tmp_path):
    trixie_x86 = install_plan(fake_system(tmp_path / "a", "trixie", "amd64"), python=(3, 13))
    assert trixie_x86.route == "none" and "trixie/amd64" in trixie_x86.notes[0]
    assert not any("wget" in c for c in commands(trixie_x86))
    (tmp_path / "b/etc").mkdir(parents=True)
    (tmp_path / "b/etc/os-release").write_text('ID=fedora\nPRETTY_NAME="Fedora Linux 40"\nVERSION_ID=40\n')
    fedora = install_plan(tmp_path / "b", machine="x86_64", python=(3, 12), system="Linux")
    assert fedora.route == "none" and "Fedora Linux 40" in fedora.notes[0]


def test_read_platform_prefers_dpkgs_architecture(tmp_path):
    root = fake_system(tmp_path, "raspbian-bookworm", "armhf")
    p = read_platform(root, machine="aarch64", python=(3, 11))
    assert (p.os_id, p.codename, p.arch, p.suite) == ("raspbian", "bookworm", "armhf", "bookworm")
    assert read_platform(fake_system(tmp_path / "u", "noble", None), machine="x86_64").suite == "ubuntu24.04"


def test_doctor_prints_the_plan_for_its_root(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EDGEAPP_EDGETPU_LIB", str(tmp_path / "absent" / "libedgetpu.so.1"))
    root = fake_system(tmp_path / "root", "bookworm", "arm64")
    table = cli("doctor", "--root", root)
    lines = table.stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("plan for "))
    assert lines[start].startswith("plan for Debian GNU/Linux 12 (bookworm), arm64, Python ")
    if sys.version_info < (3, 10):  # the plan is for the Python doctor runs on: <= 3.9 takes tflite-runtime
        assert "  python3 -m pip install 'tflite-runtime==2.13.0' 'numpy<2'" in " ".join(lines[start:]) or \
            any("tflite-runtime==2.13.0" in ln for ln in lines[start:])
        return
    deb = "libedgetpu1-std_16.0tf2.19.1-1.bookworm_arm64.deb"
    assert f"  wget {RELEASES}/16.0TF2.19.1-1/{deb}" in lines[start:]
    assert f"  sudo apt-get install -y ./{deb}" in lines[start:]
    lib = next(ln for ln in lines if " libedgetpu " in f" {ln} ")
    assert lib.startswith("warn") and lib.endswith(f"-> wget {RELEASES}/16.0TF2.19.1-1/{deb} && "
                                                   f"sudo apt-get install -y ./{deb}")
    report = json.loads(cli("doctor", "--root", root, "--format", "json").stdout)
    assert report["plan"]["route"] == "community-deb" and report["plan"]["platform"]["arch"] == "arm64"
    assert [s["commands"] for s in report["plan"]["steps"]][1] == [
        f"wget {RELEASES}/16.0TF2.19.1-1/{deb}", f"sudo apt-get install -y ./{deb}"]
