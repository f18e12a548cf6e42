"""Ctrl-C on `--cluster local:N`, delivered as a terminal does: to every process of the
foreground group (the client and Dask's worker processes alike). Only edgeapp's own line may
reach the terminal, and no worker process may be left behind."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("distributed", reason="pip install 'edgeapp[cluster]'")


@pytest.fixture(scope="module")
def slow_images(tmp_path_factory):
    """JPEGs large enough that a chunk of one is still running when Ctrl-C comes."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("slow")
    rng = np.random.default_rng(5)
    base = rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)
    for i in range(400):
        Image.fromarray(np.roll(base, i, axis=1)).save(folder / f"im{i:03d}.jpg", quality=90)
    return folder


def _terminal_sigint() -> None:
    """The child as a terminal starts it: SIGINT delivered (not ignored as in a background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _group_gone(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def _ctrl_c(argv: list, out, when) -> tuple:
    """Run, press Ctrl-C (SIGINT to the whole group) once `when()` holds; (exit code, stderr)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_terminal_sigint)
    try:
        deadline = time.monotonic() + 120
        while not when():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the batch did not start"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=90)
        assert _group_gone(proc.pid, 30), "worker processes were left running"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode, err


@pytest.mark.parametrize("moment", ["mid-batch", "while the cluster starts"])
def test_ctrl_c_on_a_local_cluster_prints_only_edgeapps_line(tiny_model, slow_images, tmp_path, moment):
    out = tmp_path / "out.csv"
    argv = [sys.executable, "-m", "edgeapp", "classify", str(tiny_model), str(slow_images), "-f",
            "csv", "-o", str(out), "--cluster", "local:2", "--chunk-size", "1"]
    if moment == "mid-batch":
        code, err = _ctrl_c(argv, out, lambda: out.exists() and out.read_text().count("\n") >= 8)
    else:  # the CSV header is written before the cluster is started
        code, err = _ctrl_c(argv, out, out.exists)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 130, err
    assert lines and all(line.startswith("edgeapp: ") for line in lines), err
    assert lines[-1].startswith("edgeapp: interrupted: "), err
