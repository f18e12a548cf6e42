"""Where edgetpu_compiler is found, and what happens without one: compile runs a relative
--compiler path, doctor honours the same EDGETPU_COMPILER, and bench --synthetic says
honestly why it cannot measure the Edge TPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cli_run import edgeapp
from conftest import ROOT

from edgeapp.errors import ExitCode


def test_compile_runs_a_relative_compiler_path_and_doctor_honours_the_same_variable(
        cli, fake_compiler, model_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # the stand-in is on no PATH
    monkeypatch.chdir(fake_compiler.path.parent)
    r = cli("compile", "--compiler", "./edgetpu_compiler", model_copy, "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["compiler"] == str(fake_compiler.path)

    monkeypatch.setenv("EDGETPU_COMPILER", "./edgetpu_compiler")
    assert cli("compile", model_copy).exit_code == 0
    if os.uname().machine in ("x86_64", "amd64"):
        checks = {c["name"]: c for c in json.loads(cli("doctor", "-f", "json").stdout)["checks"]}
        assert checks["edgetpu_compiler"]["status"] == "ok"
        assert checks["edgetpu_compiler"]["detail"] == f"16.0.384591198 at {fake_compiler.path} ($EDGETPU_COMPILER)"
        monkeypatch.setenv("EDGETPU_COMPILER", "./nope")
        checks = {c["name"]: c for c in json.loads(cli("doctor", "-f", "json").stdout)["checks"]}
        assert checks["edgetpu_compiler"]["status"] == "fail"
        assert "$EDGETPU_COMPILER ./nope" in checks["edgetpu_compiler"]["detail"]


def test_bench_synthetic_says_honestly_why_the_edge_tpu_cannot_be_measured(tmp_path):
    import shutil

    no_compiler = {"PATH": str(tmp_path), "EDGETPU_COMPILER": ""}
    r = edgeapp("bench", "--synthetic", "--device", "edgetpu", env=no_compiler)
    assert r.returncode == ExitCode.MISSING_DEPENDENCY
    assert "--synthetic needs edgetpu_compiler" in r.stderr and "`edgeapp compiler install`" \
        in r.stderr and "--compiler" not in r.stderr and "apt" not in r.stderr  # bench has no such flag
    setarch = shutil.which("setarch")
    if setarch is None or os.uname().machine != "x86_64":
        pytest.skip("needs setarch on x86-64 to run as a machine edgetpu_compiler does not exist for")
    r = subprocess.run([setarch, "i686", sys.executable, "-m", "edgeapp", "bench", "--synthetic",
                        "--device", "edgetpu"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == ExitCode.MISSING_DEPENDENCY
    last = r.stderr.strip().splitlines()[-1]
    assert "--synthetic needs edgetpu_compiler" in last and "edgeapp compiler install" in last
    assert "--compiler" not in r.stderr
