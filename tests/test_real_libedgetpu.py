"""Google's real Edge TPU runtime, libedgetpu 16.0 for x86-64 (../shared/libedgetpu/k8), with no
Edge TPU attached: its C API answers for real, its delegate fails for real.

It needs libusb-1.0 (`sudo apt-get install libusb-1.0-0`; .ci/run installs it). The one test
about a missing libusb makes the loader fail on the real library honestly: when libusb is
installed, it loads a copy whose dependency entry names a libusb soname that does not exist
(`libusb-1.0.so.9`, same length, patched in the dynamic string table), so the dynamic loader
itself reports the missing library, in its own words, as it would without the package.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from conftest import ROOT, default_runtime

from edgeapp.core.install.pairing import CRASH, GOOGLE, GOOGLE_16_LABEL, WORKS, decide, identify
from edgeapp.core.install.plan import plan_for
from edgeapp.hw import libedgetpu
from edgeapp.hw.osinfo import read_platform
from edgeapp.hw.verdicts import VerdictCache

pytestmark = pytest.mark.shared

REAL = (ROOT.parent / "shared" / "libedgetpu" / "k8" / "libedgetpu.so.1.0").resolve()  # as the loader names it
LIBUSB_SONAME = b"libusb-1.0.so.0\x00"
try:
    LITERT_VERSION = metadata.version("ai-edge-litert")
except metadata.PackageNotFoundError:  # Python <= 3.9: tflite-runtime instead; the table still knows it
    LITERT_VERSION = "2.3.0"
RUNTIME, RUNTIME_VERSION = default_runtime()  # what edgeapp runs here (doctor, classify)
INSTALL_LIBUSB = "needs libusb-1.0 for Google's libedgetpu: sudo apt-get install -y libusb-1.0-0"


def _loads() -> bool:
    try:
        libedgetpu.open_library(str(REAL))
        return True
    except OSError as e:
        if "libusb" in str(e):
            return False
        raise


@pytest.fixture(scope="module")
def real_lib() -> Path:
    if not REAL.exists() or sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip(f"needs {REAL} (x86-64 Linux)")
    if not _loads():
        pytest.skip(INSTALL_LIBUSB)
    return REAL


@pytest.fixture(scope="module")
def without_libusb(tmp_path_factory) -> Path:
    """The real library as the loader sees it on a system without libusb-1.0."""
    if not REAL.exists() or sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip(f"needs {REAL} (x86-64 Linux)")
    if not _loads():
        return REAL  # libusb really is absent here
    data = REAL.read_bytes()
    assert data.count(LIBUSB_SONAME) >= 1, "libedgetpu no longer names libusb-1.0.so.0"
    copy = tmp_path_factory.mktemp("no_libusb") / "libedgetpu.so.1"
    copy.write_bytes(data.replace(LIBUSB_SONAME, b"libusb-1.0.so.9\x00"))
    return copy


def test_build_label_and_identity(real_lib):
    lib, path = libedgetpu.open_library(str(real_lib))
    assert path == str(real_lib)
    label = libedgetpu.build_label(lib)
    assert label == GOOGLE_16_LABEL
    assert libedgetpu.short_version(label) == "RuntimeVersion(14)"
    assert libedgetpu.dpkg_owner(path) is None  # not installed by a package: the label decides
    build = identify(None, label)
    assert (build.builder, build.version, build.tf) == (GOOGLE, "16.0", (2, 5))


def test_lists_no_devices_through_its_c_api(real_lib, cli, monkeypatch, tmp_path):
    lib, _ = libedgetpu.open_library(str(real_lib))
    assert libedgetpu.list_devices(lib) == []  # answered (None would mean no such API)
    monkeypatch.setenv("EDGEAPP_EDGETPU_LIB", str(real_lib))
    result = cli("devices", "--format", "json", "--root", tmp_path)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"devices": []}
    assert "no Edge TPU found" in result.stderr


def test_pairing_verdict_for_this_build(real_lib):
    lib, path = libedgetpu.open_library(str(real_lib))
    build = libedgetpu.identify_build(lib, path)
    assert decide(build, "ai-edge-litert", LITERT_VERSION).verdict == CRASH
    assert decide(build, "tflite-runtime", "2.5.0.post1").verdict == WORKS
    refusal = libedgetpu.known_crash(lib, path, "ai-edge-litert", LITERT_VERSION)
    assert refusal == (f"libedgetpu 16.0 (Google's build for TensorFlow 2.5) is known to crash under "
                       f"ai-edge-litert {LITERT_VERSION} (google-coral/edgetpu#812: runtimes newer than TF 2.11 "
                       f"segfault with it); fix: {plan_for(read_platform('/')).fix}")
    assert libedgetpu.known_crash(lib, path, "tflite-runtime", "2.5.0.post1") is None


def test_doctor_on_the_real_library(real_lib, cli, monkeypatch, tmp_path):
    monkeypatch.setenv("EDGEAPP_EDGETPU_LIB", str(real_lib))
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path))
    result = cli("doctor", "--format", "json")
    assert result.exit_code == 10, result.stderr  # the installed pair cannot work
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    lib = checks["libedgetpu"]
    assert (lib["status"], lib["detail"]) == (
        "ok", f"RuntimeVersion(14) at {real_lib}; libedgetpu 16.0 (Google's build for TensorFlow 2.5)")
    pair = checks[f"pair {RUNTIME}"]
    assert pair["status"] == "fail" and f"known to crash under {RUNTIME}" in pair["detail"]
    assert pair["fix"] == plan_for(read_platform("/")).fix
    assert f"pair {RUNTIME}" in result.stderr  # "1 check(s) failed: pair ai-edge-litert"


def _classify(model: Path, image: Path, env: dict, *args: str):
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "classify", str(model), str(image), "-f", "jsonl",
                           "-k", "1", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    return proc.returncode, [json.loads(ln) for ln in proc.stdout.splitlines()], proc.stderr


def test_cpu_fallback_refuses_the_pair_without_a_probe(real_lib, compiled_pair, color_images, tmp_path):
    env = {**os.environ, "EDGEAPP_EDGETPU_LIB": str(real_lib), "EDGEAPP_CACHE_DIR": str(tmp_path)}
    code, records, err = _classify(compiled_pair[0], color_images["blue"], env)
    assert code == 0, err
    assert [(r["device"], r["classes"][0]["label"]) for r in records] == [("cpu", "blue")]
    assert (f"edgeapp: Edge TPU unavailable (libedgetpu 16.0 (Google's build for TensorFlow 2.5) is known to "
            f"crash under {RUNTIME} {RUNTIME_VERSION}") in err
    assert err.splitlines()[0].endswith(f"fix: {plan_for(read_platform('/')).fix}); running colors.tflite on CPU")
    assert VerdictCache(tmp_path).entries() == {}  # the pair was never probed


def test_cpu_fallback_when_the_real_delegate_finds_no_device(real_lib, compiled_pair, color_images, tmp_path):
    """--no-probe loads Google's delegate in edgeapp itself: with no Edge TPU it returns none."""
    env = {**os.environ, "EDGEAPP_EDGETPU_LIB": str(real_lib), "EDGEAPP_CACHE_DIR": str(tmp_path)}
    code, records, err = _classify(compiled_pair[0], color_images["green"], env, "--no-probe")
    assert code == 0, err
    assert [(r["device"], r["classes"][0]["label"]) for r in records] == [("cpu", "green")]
    assert (f"Edge TPU unavailable (no Edge TPU found (Failed to load delegate from {real_lib}); plug it in, "
            "check `edgeapp devices`") in err
    code, records, err = _classify(compiled_pair[0], color_images["green"], env, "--no-probe", "--device", "usb")
    assert code == 5 and records == [] and "no Edge TPU found at usb (Failed to load delegate" in err


def test_without_libusb_the_message_says_to_install_it(without_libusb, compiled_pair, color_images, tmp_path,
                                                       cli, monkeypatch):
    with pytest.raises(OSError) as loader:
        libedgetpu.open_library(str(without_libusb))
    assert "libusb-1.0.so" in str(loader.value) and "cannot open shared object file" in str(loader.value)
    assert libedgetpu.explain_load_error(str(loader.value), str(without_libusb)) == \
        "libusb-1.0 is missing (sudo apt-get install libusb-1.0-0)"

    env = {**os.environ, "EDGEAPP_EDGETPU_LIB": str(without_libusb), "EDGEAPP_CACHE_DIR": str(tmp_path)}
    code, records, err = _classify(compiled_pair[0], color_images["red"], env)
    assert code == 0 and records[0]["device"] == "cpu", err
    assert ("edgeapp: Edge TPU unavailable (libusb-1.0 is missing (sudo apt-get install libusb-1.0-0)); "
            "running colors.tflite on CPU") in err

    monkeypatch.setenv("EDGEAPP_EDGETPU_LIB", str(without_libusb))
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path))
    lib = {c["name"]: c for c in json.loads(cli("doctor", "--format", "json").stdout)["checks"]}["libedgetpu"]
    assert lib["status"] == "fail" and "libusb-1.0 is missing" in lib["detail"]
    assert lib["fix"] == "sudo apt-get install libusb-1.0-0"
