"""Fixtures of the compile tests: a stand-in `edgetpu_compiler` on PATH that replays Google's
compiler's recorded outputs (tests/fixtures/compiler/), and a model to compile."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).resolve().parent / "fixtures" / "compiler"
DIGITS = ROOT / "models" / "digits_int8.tflite"


FAKE = r'''#!{python}
"""Stand-in edgetpu_compiler for edgeapp's tests: replays recorded outputs."""
import argparse, json, os, shutil, sys, time
from pathlib import Path

FIX = Path({fix!r})
p = argparse.ArgumentParser()
p.add_argument("-o", "--out_dir", default=".")
p.add_argument("-m", "--min_runtime_version")
p.add_argument("-n", "--num_segments", type=int, default=1)
p.add_argument("-s", "--show_operations", action="store_true")
p.add_argument("-i", "--intermediate_tensors")
p.add_argument("-d", "--search_delegate", action="store_true")
p.add_argument("-k", "--delegate_search_step")
p.add_argument("-a", "--enable_multiple_subgraphs", action="store_true")
p.add_argument("-t", "--timeout_sec", type=int, default=180)
p.add_argument("-v", "--version", action="store_true")
p.add_argument("model", nargs="*")
a = p.parse_args()
models, a.model = a.model, (a.model[0] if a.model else None)
if os.environ.get("FAKE_EDGETPU_ARGV"):
    Path(os.environ["FAKE_EDGETPU_ARGV"]).write_text(json.dumps(sys.argv))
if a.version:
    print("Edge TPU Compiler version 16.0.384591198"); sys.exit(0)
mode = os.environ.get("FAKE_EDGETPU_MODE", "full")
stem = Path(a.model).stem
def show(name):
    text = (FIX / name).read_text().replace("efficientdet_coral_v2", stem)
    return text.replace("timer of 180 seconds", f"timer of {{a.timeout_sec}} seconds")
if mode == "hang":
    Path(os.environ["FAKE_EDGETPU_ARGV"]).with_name("hanging.pid").write_text(str(os.getpid()))
    print("Edge TPU Compiler version 16.0.384591198", flush=True)
    time.sleep(600)
failures = {{"not_quantized": "not_quantized_stdout.txt", "op_version": "op_version_stdout.txt",
             "internal_error": "internal_error_stdout.txt", "timeout": "timeout_stdout.txt",
             "dynamic": "dynamic_stdout.txt"}}
if mode in failures:
    sys.stdout.write(show(failures[mode]))
    sys.exit(int(os.environ.get("FAKE_EDGETPU_EXIT", "1")))
out = Path(a.out_dir)
if len(models) > 1:  # co-compiled, as compiler 16 prints it: one block per model, in order
    left = 7 * 1024 * 1024
    print("Edge TPU Compiler version 16.0.384591198")
    print(f"Started a compilation timeout timer of {{a.timeout_sec}} seconds.\n")
    print("Models compiled successfully in 524 ms.")
    for m in models:
        st, size = Path(m).stem, Path(m).stat().st_size
        cached = min(size, left)
        left -= cached
        (out / f"{{st}}_edgetpu.tflite").write_bytes(Path(m).read_bytes())
        (out / f"{{st}}_edgetpu.log").write_text(show("fully_mapped_edgetpu.log").replace(stem, st, 2))
        print(f"\nInput model: {{m}}\nInput size: {{size / 1024:.2f}}KiB\n"
              f"Output model: {{out}}/{{st}}_edgetpu.tflite\nOutput size: {{size / 1024:.2f}}KiB\n"
              f"On-chip memory used for caching model parameters: {{cached / 1024:.2f}}KiB\n"
              f"On-chip memory remaining for caching model parameters: {{left / 1024:.2f}}KiB\n"
              f"Off-chip memory used for streaming uncached model parameters: {{(size - cached) / 1024:.2f}}KiB\n"
              f"Number of Edge TPU subgraphs: 1\nTotal number of operations: 31\n"
              f"Operation log: {{out}}/{{st}}_edgetpu.log\n"
              "See the operation log file for individual operation details.")
    print("Compilation child process completed within timeout period.\nCompilation succeeded!")
    sys.exit(0)
n = a.num_segments
names = [f"{{stem}}_segment_{{i}}_of_{{n}}" for i in range(n)] if n > 1 else [stem]
stdout_name, log_name = {{"full": ("fully_mapped_stdout.txt", "fully_mapped_edgetpu.log"),
                          "partial": ("partial_stdout.txt", "partial_edgetpu.log"),
                          "zero": ("zero_subgraphs_stdout.txt", "mnist4_edgetpu.log"),
                          "streamed": ("streamed_stdout.txt", "streamed_edgetpu.log"),
                          "nooutput": ("fully_mapped_stdout.txt", None)}}[mode]
if n > 1:
    stdout_name = "segments_stdout.txt"
text = show(stdout_name)
if a.out_dir != ".":
    text = text.replace(f"Output model: {{stem}}", f"Output model: {{a.out_dir}}/{{stem}}")
    text = text.replace(f"Operation log: {{stem}}", f"Operation log: {{a.out_dir}}/{{stem}}")
if a.show_operations and log_name:
    text += "\n" + show(log_name).split("\n", 3)[3]
if log_name:
    for name in names:
        if n > 1:
            (out / f"{{name}}.tflite").write_bytes(Path(a.model).read_bytes())
        (out / f"{{name}}_edgetpu.tflite").write_bytes(Path(a.model).read_bytes())
        (out / f"{{name}}_edgetpu.log").write_text(show(log_name).replace(stem, name, 2))
sys.stdout.write(text)
sys.exit(0)
'''


@pytest.fixture()
def fake_compiler(tmp_path, monkeypatch):
    """The stand-in on PATH (and nothing else named edgetpu_compiler): returns a setter for its
    mode and the path of the file where it records its argv."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "edgetpu_compiler"
    exe.write_text(FAKE.format(python=sys.executable, fix=str(FIX)))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    argv_file = tmp_path / "argv.json"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("EDGETPU_COMPILER", raising=False)
    monkeypatch.setenv("FAKE_EDGETPU_ARGV", str(argv_file))

    class Fake:
        path = exe
        argv = argv_file

        @staticmethod
        def mode(name: str, exit_code: int | None = None) -> None:
            monkeypatch.setenv("FAKE_EDGETPU_MODE", name)
            if exit_code is not None:
                monkeypatch.setenv("FAKE_EDGETPU_EXIT", str(exit_code))

        @staticmethod
        def recorded() -> list[str]:
            return json.loads(argv_file.read_text())

    Fake.mode("full")
    return Fake


@pytest.fixture()
def model_copy(tmp_path) -> Path:
    """An int8 model with its sidecar in its own folder (the repo's bundled digits model)."""
    d = tmp_path / "models"
    d.mkdir()
    shutil.copy(DIGITS, d / "digits.tflite")
    shutil.copy(DIGITS.with_suffix(".json"), d / "digits.json")
    return d / "digits.tflite"
