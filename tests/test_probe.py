"""The crash-safe delegate probe, with real native crashes.

Each test builds (once per session) small shared libraries with the C compiler that export the
Edge TPU plugin API (`tflite_plugin_create_delegate`) and segfault, hang, return NULL, or return
a do-nothing delegate that claims no node. Each call to create appends "create <pid>" to the file
in $FAKE_EDGETPU_LOG, so a test sees which process loaded the delegate. edgeapp is pointed at
them with EDGEAPP_EDGETPU_LIB, runs as a user runs it (a subprocess), and must survive.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import default_runtime
from fake_roots import add_apex, add_usb

from edgeapp.flows.doctor.install import library_checks
from edgeapp.hw.devices import list_edge_tpus
from edgeapp.hw.runtime import find_runtime
from edgeapp.hw.verdicts import Pair, Verdict, VerdictCache

ROOT = Path(__file__).resolve().parent.parent
RUNTIME, RUNTIME_VERSION = default_runtime()  # ai-edge-litert, or tflite-runtime on Python <= 3.9
LITERT = f"{RUNTIME} {RUNTIME_VERSION}"
BUILD_FIX = "known build mismatch; install a matching pair (`edgeapp doctor` prints one; docs/install.md)"


class Run:
    """`edgeapp classify` in a subprocess, with the stand-in library and its own cache."""

    def __init__(self, tmp_path: Path, library: Path, model: Path, image: Path, **env: str) -> None:
        self.log, self.cache = tmp_path / "calls.log", tmp_path / "cache"
        self.env = {**os.environ, "EDGEAPP_EDGETPU_LIB": str(library), "FAKE_EDGETPU_LOG": str(self.log),
                    "EDGEAPP_CACHE_DIR": str(self.cache), **env}
        self.model, self.image = model, image

    def __call__(self, *args: str) -> tuple[int, list[dict], str, int]:
        """(exit code, JSON records, stderr, pid of the edgeapp process)."""
        proc = subprocess.Popen([sys.executable, "-m", "edgeapp", "classify", str(self.model),
                                 str(self.image), "--format", "jsonl", "-k", "1", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                env=self.env)
        out, err = proc.communicate(timeout=300)
        return proc.returncode, [json.loads(ln) for ln in out.splitlines()], err, proc.pid

    def calls(self) -> list[tuple[str, int]]:
        text = self.log.read_text() if self.log.exists() else ""
        return [(w, int(pid)) for w, pid in (ln.split() for ln in text.splitlines())]

    def verdicts(self) -> dict[str, dict]:
        return VerdictCache(self.cache).entries()


def ran_on_cpu_as_red(records: list[dict]) -> bool:
    return len(records) == 1 and records[0]["device"] == "cpu" and \
        records[0]["classes"][0]["label"] == "red"


@pytest.fixture()
def run_with(tmp_path, fake_libs, compiled_pair, color_images):
    def make(kind: str, **env: str) -> Run:
        return Run(tmp_path, fake_libs[kind], compiled_pair[0], color_images["red"], **env)
    return make


def test_segfault_is_survived_explained_cached_and_not_probed_again(tmp_path, fake_libs, compiled_pair,
                                                                     color_images):
    library = tmp_path / "libedgetpu.so.1"  # a copy: this test rebuilds it
    shutil.copy2(fake_libs["CRASH"], library)
    run = Run(tmp_path, library, compiled_pair[0], color_images["red"])

    code, records, err, pid = run()
    assert code == 0, err
    assert ran_on_cpu_as_red(records), records
    assert f"crashed under {LITERT}: {BUILD_FIX}" in err and "RuntimeVersion(14)" in err
    assert "killed by SIGSEGV" in err and "on CPU" in err
    # in children only (a crash seen in a fork is confirmed by a fresh process)
    assert {w for w, p in run.calls()} == {"create"} and all(p != pid for _, p in run.calls())
    creates = len(run.calls())
    (entry,) = run.verdicts().values()
    assert (entry["status"], entry["library"], entry["runtime"]) == ("crash", str(library), RUNTIME)
    cached = run.cache.joinpath("probe.json").read_bytes()

    code, records, err, _ = run()  # second run: the cached verdict, no probe
    assert code == 0 and ran_on_cpu_as_red(records)
    assert "crashed under" in err and "verdict cached" in err
    assert len(run.calls()) == creates
    assert run.cache.joinpath("probe.json").read_bytes() == cached

    code, records, err, _ = run("--device", "edgetpu")  # explicit: no fallback
    assert code == 5 and records == []
    assert "crashed under" in err and len(run.calls()) == creates

    stat = library.stat()  # touched, same content: the verdict is keyed by content
    os.utime(library, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    code, records, err, _ = run()
    assert "verdict cached" in err and len(run.calls()) == creates

    with open(library, "ab") as f:  # a new build of the library (same path) is probed again
        f.write(b"rebuilt")
    code, records, err, _ = run()
    assert code == 0 and ran_on_cpu_as_red(records) and "verdict cached" not in err
    assert len(run.calls()) > creates and len(run.verdicts()) == 2


def test_explicit_edgetpu_exits_5_when_the_probe_crashes(run_with):
    run = run_with("CRASH")
    code, records, err, pid = run("--device", "usb:0")
    assert code == 5 and records == []
    assert f"error: Edge TPU runtime RuntimeVersion(14) crashed under {LITERT}: {BUILD_FIX}" in err
    assert all(p != pid for _, p in run.calls())
    assert [e["status"] for e in run.verdicts().values()] == ["crash"]


def test_hanging_delegate_is_killed_after_the_timeout(run_with):
    run = run_with("HANG", EDGEAPP_PROBE_TIMEOUT="2")
    code, records, err, _ = run()
    assert code == 0 and ran_on_cpu_as_red(records), err
    assert f"crashed under {LITERT}" in err and "hung: no answer in 2 s" in err
    assert [e["status"] for e in run.verdicts().values()] == ["hang"]


def test_null_delegate_is_no_edge_tpu_and_is_not_cached(run_with):
    run = run_with("NULL_DELEGATE")
    code, records, err, pid = run()
    assert code == 0 and ran_on_cpu_as_red(records), err
    assert "no Edge TPU found (Failed to load delegate from" in err and "fake: no Edge TPU here" in err
    assert "crashed" not in err
    code, records, err, pid = run("--device", "edgetpu")
    assert code == 5 and "no Edge TPU found" in err
    assert len(run.calls()) == 2 and all(p != pid for _, p in run.calls())
    assert run.verdicts() == {}  # plugging a TPU in later must not need a cache reset


def test_delegate_that_loads_but_cannot_run_the_model_is_a_failed_probe_not_a_crash(run_with):
    """Without a delegate claiming it, allocate_tensors fails on `edgetpu-custom-op`."""
    run = run_with("LOADS")
    code, records, err, pid = run()
    assert code == 0 and ran_on_cpu_as_red(records), err
    assert f"Edge TPU rejected {run.model}: Encountered unresolved custom op: edgetpu-custom-op" in err
    assert "crashed" not in err
    assert [w for w, _ in run.calls()] == ["create"] and run.calls()[0][1] != pid
    assert run.verdicts() == {}
    code, _, err, _ = run("--device", "edgetpu")
    assert code == 5 and "Edge TPU rejected" in err


def test_no_probe_and_a_passed_pair_with_a_trusted_model_load_in_the_main_process(run_with, fake_libs):
    run = run_with("LOADS")
    code, records, err, pid = run("--no-probe")
    assert code == 0 and ran_on_cpu_as_red(records), err
    assert run.calls() == [("create", pid)]  # no child: the main process loaded it
    runtime = find_runtime(RUNTIME)
    pair = Pair.of(runtime.name, runtime.version, str(fake_libs["LOADS"]))
    VerdictCache(run.cache).put(pair, Verdict("pass", ""))
    code, records, err, pid = run()  # the pair passed, but this model is new: tried in a child
    assert code == 0 and ran_on_cpu_as_red(records), err
    assert "Edge TPU rejected" in err and run.calls()[-1][1] != pid and len(run.calls()) == 2
    run.env["EDGEAPP_TRUST_MODEL"] = "1"  # a trusted model with a passed pair: straight in here
    code, records, err, pid = run()
    assert code == 0 and ran_on_cpu_as_red(records), err
    assert run.calls()[-1] == ("create", pid) and len(run.calls()) == 3


def test_devices_through_libedgetpu_c_api(fake_libs, tmp_path, monkeypatch):
    add_usb(tmp_path, "2-1", "18d1:9302", "5000", 2, 3)
    add_apex(tmp_path, 0, 47000)
    monkeypatch.setenv("FAKE_EDGETPU_LOG", str(tmp_path / "calls.log"))
    tpus = list_edge_tpus(tmp_path, str(fake_libs["LOADS"]))
    assert [(t.device, t.source, t.path, t.usb_id, t.speed_mbps, t.temperature_c) for t in tpus] == [
        ("usb:0", "libedgetpu", "/sys/bus/usb/devices/2-1", "18d1:9302", 5000.0, None),
        ("pci:0", "libedgetpu", "/dev/apex_0", None, None, 47.0)]
    assert (tmp_path / "calls.log").read_text().split()[0] == "free_devices"


def test_doctor_reports_the_library_and_the_cached_verdict(run_with, fake_libs, tmp_path, cli, monkeypatch):
    env = {"EDGEAPP_EDGETPU_LIB": str(fake_libs["CRASH"]), "EDGEAPP_CACHE_DIR": str(tmp_path / "cache"),
           "PATH": os.environ.get("PATH", "")}
    lib, pair = library_checks(env, {RUNTIME: RUNTIME_VERSION})
    assert lib.status == "ok" and lib.detail == f"RuntimeVersion(14) at {fake_libs['CRASH']}"
    assert pair.status == "ok" and "not probed yet" in pair.detail

    run_with("CRASH")()  # leaves a crash verdict in tmp_path/cache
    _, pair = library_checks(env, {RUNTIME: RUNTIME_VERSION})
    assert pair.status == "fail" and "crashed under" in pair.detail

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    report = cli("doctor", "--format", "json")
    assert report.exit_code == 10
    assert [v["status"] for v in json.loads(report.stdout)["probe_verdicts"]] == ["crash"]
    forgot = cli("doctor", "--forget-probes", "--format", "json")
    assert "forgot 2 cached probe verdict" in forgot.stderr  # the library's and the CPU twin's
    assert json.loads(forgot.stdout)["probe_verdicts"] == []


@pytest.mark.parametrize("package_version, status, says", [
    ("16.0", "fail", f"(Google's build for TensorFlow 2.5) is known to crash under {RUNTIME}"),
    ("16.0tf2.17.1-1.bookworm", "ok", "(community build for TensorFlow 2.17)"),  # a community rebuild
])
def test_doctor_names_the_debian_package_and_known_bad_builds(fake_libs, tmp_path, package_version,
                                                              status, says):
    """dpkg's database under doctor's root says libedgetpu1-max owns the library, as dpkg would."""
    info = tmp_path / "root/var/lib/dpkg/info"
    info.mkdir(parents=True)
    (info / "libedgetpu1-max:amd64.list").write_text(f"/.\n/usr\n{fake_libs['LOADS']}\n")
    (info.parent / "status").write_text("Package: libedgetpu1-max\nStatus: install ok installed\n"
                                        f"Architecture: amd64\nVersion: {package_version}\n")
    env = {"EDGEAPP_EDGETPU_LIB": str(fake_libs["LOADS"]), "EDGEAPP_CACHE_DIR": str(tmp_path / "cache"),
           "PATH": os.environ.get("PATH", "")}
    lib, pair = library_checks(env, {RUNTIME: RUNTIME_VERSION}, tmp_path / "root")
    assert f"{fake_libs['LOADS']}, libedgetpu1-max {package_version}; libedgetpu {package_version}" in lib.detail
    assert pair.status == status and says in pair.detail
