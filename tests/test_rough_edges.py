"""The rough edges a new user hit (issue 11, item 3, and the full-disk runs of item 4), each
through the CLI as the user met it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from conftest import ROOT
from edgeapp.errors import ExitCode

COMMANDS = ("convert", "check", "compile", "classify", "detect", "camera", "bench", "devices", "doctor")


def edgeapp(*args, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeapp", *map(str, args)], capture_output=True,
                          text=True, cwd=kw.pop("cwd", ROOT), env={**os.environ, **(env or {})}, **kw)


def flat(text: str) -> str:
    return " ".join(text.split())


# --- help texts ----------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ("",) + COMMANDS)
def test_help_keeps_every_word_and_shows_no_bool_metavar(cli, command):
    r = cli(*filter(None, [command]), "--help")
    assert r.exit_code == 0, r.stderr
    assert "<bool>" not in r.stdout and "Usage:" in r.stdout
    text = flat(r.stdout)
    if command == "convert":
        assert "pip install 'edgeapp[convert]'" in text
    if command == "detect":
        assert "[xmin, ymin, xmax, ymax]" in text
    if command == "camera":
        assert "--display / --no-display" in text or "--display/--no-display" in text


# --- --runtime tensorflow ------------------------------------------------------------------------

def test_runtime_tensorflow_classifies(tiny_model, color_images):
    r = edgeapp("classify", "--runtime", "tensorflow", tiny_model, color_images["red"], "-f", "jsonl",
                "-k", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["classes"][0]["label"] == "red"
    assert "Warning" not in r.stderr and "internal error" not in r.stderr


def test_doctor_checks_the_tensorflow_runtime_before_calling_its_pair_ok(fake_libs, tmp_path):
    env = {"EDGEAPP_EDGETPU_LIB": str(fake_libs["LOADS"]), "EDGEAPP_CACHE_DIR": str(tmp_path)}
    r = edgeapp("doctor", "--format", "json", env=env)
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["runtime tensorflow"]["status"] == "ok", checks["runtime tensorflow"]
    assert checks["pair tensorflow"]["status"] == "ok"


def test_a_pair_whose_runtime_does_not_import_is_not_ok(fake_libs, tmp_path):
    from edgeapp.flows.doctor import FAIL, Check, library_checks

    env = {"EDGEAPP_EDGETPU_LIB": str(fake_libs["LOADS"]), "EDGEAPP_CACHE_DIR": str(tmp_path),
           "PATH": os.environ.get("PATH", "")}
    broken = Check("runtime tensorflow", FAIL, "2.21 does not import: ImportError", "pip install ...")
    lib, pair = library_checks(env, {"tensorflow": "2.21"}, imports={"tensorflow": broken})
    assert lib.status == "ok" and pair.status == FAIL and "does not import" in pair.detail


# --- one compiler lookup for compile and doctor ----------------------------------------------------

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
        assert checks["edgetpu_compiler"]["detail"] == f"16.0.384591198 at {fake_compiler.path}"
        monkeypatch.setenv("EDGETPU_COMPILER", "./nope")
        checks = {c["name"]: c for c in json.loads(cli("doctor", "-f", "json").stdout)["checks"]}
        assert checks["edgetpu_compiler"]["status"] == "fail"
        assert "$EDGETPU_COMPILER ./nope" in checks["edgetpu_compiler"]["detail"]


from test_compiler import fake_compiler, model_copy  # noqa: E402,F401
from test_probe import fake_libs  # noqa: E402,F401  (the stand-in Edge TPU libraries)
