"""classify/detect --cluster on a real Dask scheduler and worker processes, on 127.0.0.1 only.

The fleet is started the way docs/fleet.md tells users to: `dask scheduler` and `dask worker`
processes (one declaring an `edgetpu` resource), as `python -m dask ...` of the Python running
the tests (a venv's, activated or not: its `dask` may not be on PATH, or another's may be).
Workers run without a nanny so that a SIGKILL really loses the worker, as a Pi pulled off the
shelf would.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed", reason="pip install 'edgeapp[cluster]'")


from edgeapp.errors import ExitCode  # noqa: E402


class Fleet:
    """A scheduler and worker processes; killed and waited for at the end."""

    def __init__(self, tmp: Path, worker_resources=("edgetpu=1", None), tpu_env=None) -> None:
        self.tmp = tmp
        self.procs = []
        self.tpu_env = tpu_env  # the environment of workers declaring a resource (stand-in TPUs)
        sched_file = tmp / "scheduler.json"
        self.scheduler = self._start([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1",
                                      "--port", "0", "--no-dashboard", "--scheduler-file",
                                      str(sched_file)], "scheduler")
        deadline = time.monotonic() + 60
        while not sched_file.exists() or not sched_file.read_text().strip():
            assert time.monotonic() < deadline, "dask scheduler did not start"
            time.sleep(0.1)
        time.sleep(0.2)
        self.address = json.loads(sched_file.read_text())["address"]
        self.workers = [self.add_worker(r) for r in worker_resources]
        self.wait_for_workers(len(self.workers))

    def _start(self, argv, name, env=None):
        log = open(self.tmp / f"{name}-{len(self.procs)}.log", "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, **(env or {})})
        self.procs.append(p)
        return p

    def add_worker(self, resources=None):
        argv = [sys.executable, "-m", "dask", "worker", self.address, "--nworkers", "1",
                "--nthreads", "1", "--no-nanny", "--no-dashboard", "--host", "127.0.0.1"]
        if resources:
            argv += ["--resources", resources]
        return self._start(argv, "worker", self.tpu_env if resources else None)

    def wait_for_workers(self, n: int) -> None:
        with distributed.Client(self.address, timeout="20s") as c:
            c.wait_for_workers(n, timeout=60)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("fleet"))
    yield f
    f.close()


@pytest.fixture(scope="module")
def many_images(tmp_path_factory):
    """120 small colour images (and one corrupt file) in a folder."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("many")
    rng = np.random.default_rng(3)
    for i in range(120):
        Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(folder / f"im{i:03d}.png")
    (folder / "zz_corrupt.png").write_bytes(b"\x89PNG but not really")
    return folder


def records(text: str) -> list:
    out = [json.loads(line) for line in text.splitlines() if line.strip()]
    for r in out:
        r.pop("latency_ms")
    return out


def edgeapp(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeapp", *map(str, args)], capture_output=True,
                          text=True, timeout=300, **kw)


def test_cluster_records_equal_the_local_run(cli, fleet, tiny_model, many_images):
    local = cli("classify", tiny_model, many_images, "-f", "jsonl", "-k", "2")
    remote = cli("classify", tiny_model, many_images, "-f", "jsonl", "-k", "2", "--cluster",
                 fleet.address, "--chunk-size", "7")
    assert local.exit_code == remote.exit_code == int(ExitCode.INPUTS_FAILED)  # the corrupt file
    assert records(remote.stdout) == records(local.stdout)
    assert len(records(remote.stdout)) == 121
    assert "per worker:" in remote.stderr and "on the cluster" in remote.stderr


def test_detect_with_shipped_bytes_equals_local(cli, fleet, det_models, tmp_path):
    from PIL import Image

    for i in range(6):
        a = np.zeros((64, 64, 3), np.uint8)
        a[16:32, 8 * i:8 * i + 16, i % 3] = 255
        Image.fromarray(a).save(tmp_path / f"d{i}.png")
    args = ["detect", det_models["det_tf1"], tmp_path, "-f", "jsonl", "--labels", det_models["labels"]]
    local = cli(*args)
    remote = cli(*args, "--cluster", fleet.address, "--ship-bytes", "--chunk-size", "4")
    assert local.exit_code == remote.exit_code == 0, remote.stderr
    assert records(remote.stdout) == records(local.stdout)
    assert any(r["objects"] for r in records(remote.stdout))


def test_an_explicit_edge_tpu_runs_only_where_one_is_declared(cli, fleet, compiled_pair, many_images):
    """`--device edgetpu` goes to the worker declaring edgetpu=1, which has no usable TPU here:
    the worker's one-line device error comes back with exit 5, not a retry storm. With `auto`
    every worker may run the CPU twin, exactly as a local run does."""
    compiled, _twin = compiled_pair
    r = cli("classify", compiled, many_images, "--device", "edgetpu", "--cluster", fleet.address)
    assert r.exit_code == int(ExitCode.DEVICE_UNAVAILABLE), r.stderr
    assert "on worker tcp://127.0.0.1:" in r.stderr and "Traceback" not in r.stderr
    local = cli("classify", compiled, many_images, "-f", "jsonl")
    remote = cli("classify", compiled, many_images, "-f", "jsonl", "--cluster", fleet.address)
    shipped = cli("classify", compiled, many_images, "-f", "jsonl", "--cluster", fleet.address,
                  "--ship-bytes")
    assert records(remote.stdout) == records(local.stdout) == records(shipped.stdout)
    assert {r["device"] for r in records(remote.stdout) if not r["error"]} == {"cpu"}


def test_all_on_a_worker_uses_every_edge_tpu_it_has(tmp_path, tpus, cli, compiled_pair, many_images):
    """`--device all`: the worker declaring edgetpu=2 (two stand-in TPUs) takes every chunk and
    runs it data-parallel on both; the records equal a local run on one TPU, image for image."""
    env = tpus("usb,usb", delay_ms=5)  # this process (the local reference) and the TPU worker
    fleet = Fleet(tmp_path, worker_resources=("edgetpu=2", None), tpu_env=env)
    try:
        local = cli("classify", compiled_pair[0], many_images, "-f", "jsonl", "--device", "usb:0")
        remote = cli("classify", compiled_pair[0], many_images, "-f", "jsonl", "--device", "all",
                     "--cluster", fleet.address, "--chunk-size", "16")
    finally:
        fleet.close()
    assert local.exit_code == remote.exit_code == int(ExitCode.INPUTS_FAILED), remote.stderr
    a, b = records(local.stdout), records(remote.stdout)
    assert [(r["path"], r["classes"], r["error"]) for r in a] == \
        [(r["path"], r["classes"], r["error"]) for r in b]
    assert {r["device"] for r in b if not r["error"]} == {"usb:0", "usb:1"}
    per_worker = remote.stderr.split("per worker:")[1].splitlines()[0]
    assert per_worker.count("/s") == 1  # only the worker with the TPUs took chunks


def test_a_worker_killed_mid_batch_loses_and_doubles_nothing(tmp_path, tiny_model, many_images):
    fleet = Fleet(tmp_path, worker_resources=(None, None))
    try:
        out = tmp_path / "out.jsonl"
        proc = subprocess.Popen([sys.executable, "-m", "edgeapp", "classify", str(tiny_model),
                                 str(many_images), "-f", "jsonl", "-o", str(out), "--cluster",
                                 fleet.address, "--chunk-size", "1", "--workers", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not (out.exists() and len(out.read_text().splitlines()) >= 3):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        fleet.workers[0].send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == int(ExitCode.INPUTS_FAILED), err  # only the corrupt image failed
        paths = [r["path"] for r in records(out.read_text())]
        assert len(paths) == len(set(paths)) == 121
        assert sorted(paths) == sorted(str(p) for p in many_images.iterdir())
    finally:
        fleet.close()


def test_resume_after_the_client_is_killed(tmp_path, fleet, tiny_model, many_images):
    out = tmp_path / "out.jsonl"
    argv = [sys.executable, "-m", "edgeapp", "classify", str(tiny_model), str(many_images), "-f",
            "jsonl", "-o", str(out), "--cluster", fleet.address, "--chunk-size", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out.exists() and len(out.read_text().splitlines()) >= 5):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    before = len(records(out.read_text()))
    r = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=240)
    assert r.returncode == int(ExitCode.INPUTS_FAILED), r.stderr
    paths = [rec["path"] for rec in records(out.read_text())]
    assert len(paths) == len(set(paths)) == 121
    assert f"{before} already done" in r.stderr or before >= 121


def test_losing_the_scheduler_is_one_line_and_the_output_resumes(tmp_path, tiny_model, many_images):
    fleet = Fleet(tmp_path, worker_resources=(None,))
    out = tmp_path / "out.jsonl"
    try:
        argv = [sys.executable, "-m", "edgeapp", "classify", str(tiny_model), str(many_images), "-f",
                "jsonl", "-o", str(out), "--chunk-size", "1", "--workers", "0"]
        proc = subprocess.Popen(argv + ["--cluster", fleet.address], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not (out.exists() and len(out.read_text().splitlines()) >= 3):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        fleet.scheduler.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        fleet.close()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == int(ExitCode.CLUSTER_LOST), err
    assert "Traceback" not in err and "--resume" in lines[-1]
    done = records(out.read_text())  # every line whole
    r = subprocess.run(argv + ["--cluster", "local:1", "--resume"], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == int(ExitCode.INPUTS_FAILED), r.stderr
    paths = [rec["path"] for rec in records(out.read_text())]
    assert len(paths) == len(set(paths)) == 121 and len(done) < 121


def test_without_dask_cluster_says_what_to_install(tmp_path, tiny_model, many_images):
    fake = tmp_path / "nodask"
    fake.mkdir()
    (fake / "distributed.py").write_text("raise ImportError('No module named distributed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])}
    r = edgeapp("classify", tiny_model, many_images, "--cluster", "local:1", env=env)
    assert r.returncode == int(ExitCode.MISSING_DEPENDENCY)
    assert "pip install 'edgeapp[cluster]'" in r.stderr and "Traceback" not in r.stderr
