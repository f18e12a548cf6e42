"""Google's `edgetpu_compiler`: the thin wrapper that finds and runs it.

Finds the compiler (--compiler, $EDGETPU_COMPILER, PATH), runs it with an argv list (never a
shell) under a timeout, kills its process group when it hangs, and reads the `.log` files it
writes. What the compiler printed is parsed and judged by the pure `compiler_output`.
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

from edgeapp.core.compiler_output import (
    CompileResult,
    Judgement,
    apply_log,
    judge,
    parse_stdout,
    timeout_failure,
)
from edgeapp.core.naming import compiler_outputs
from edgeapp.errors import MissingDependency, UsageError
from edgeapp.hw.proc import log_command

COMPILER_NAME = "edgetpu_compiler"
ENV_VAR = "EDGETPU_COMPILER"
DEFAULT_TIMEOUT_S = 180  # the compiler's own default (-t)


# ----------------------------------------------------------------------------- finding


def compiler_runs_here() -> bool:
    """Google ships edgetpu_compiler for x86-64 Linux only (not for a Dev Board or a Pi)."""
    return platform.system() == "Linux" and platform.machine().lower() in ("x86_64", "amd64")


def install_help() -> str:
    """How to get the compiler on this machine (it exists for x86-64 Linux only)."""
    machine = platform.machine().lower()
    system = platform.system()
    if compiler_runs_here():
        how = ("on Debian/Ubuntu x86-64: add Coral's apt repository (coral.ai/docs/edgetpu/"
               "compiler) and `sudo apt-get install edgetpu-compiler`")
    else:
        what = f"{system} {machine}".strip()
        how = (f"it runs only on x86-64 Linux, not on this {what}: compile on an x86-64 Linux PC "
               "(or in Coral's Colab notebook) and copy X_edgetpu.tflite here")
    return (f"{how}; or set --compiler PATH / ${ENV_VAR}. Without it, `edgeapp check MODEL` "
            "predicts what would run on the Edge TPU")


def find_compiler(explicit: Optional[str | Path] = None, env: Optional[Mapping[str, str]] = None) -> str:
    """The compiler executable: `explicit`, else $EDGETPU_COMPILER, else PATH. The one lookup
    of `compile`, `convert --compile`, `bench --synthetic` and `doctor`.

    A value with a directory part (`./c.sh`, `bin/c`, `~/c`) is that file, relative to the
    current directory, and is returned absolute (a bare `c.sh` handed to the OS would be looked
    up on PATH); a bare name is looked up on PATH, then in the current directory.
    """
    env = os.environ if env is None else env
    for source, value in (("--compiler", explicit), (f"${ENV_VAR}", env.get(ENV_VAR))):
        if not value:
            continue
        text = os.path.expanduser(str(value))
        candidates = [] if os.path.dirname(text) else [shutil.which(text, path=env.get("PATH"))]
        candidates.append(os.path.abspath(text))
        for found in candidates:
            if found and os.path.isfile(found) and os.access(found, os.X_OK):
                return os.path.abspath(found)
        why = "not executable" if os.path.isfile(text) else "no such file"
        raise MissingDependency(f"{source} {value}: {why}; {install_help()}")
    found = shutil.which(COMPILER_NAME, path=env.get("PATH"))
    if found:
        return found
    raise MissingDependency(f"{COMPILER_NAME} not found (looked at --compiler, ${ENV_VAR} and "
                            f"PATH); {install_help()}")


# ----------------------------------------------------------------------------- running


def build_argv(compiler: str, model: str | Path, out_dir: str | Path, *,
               segments: Optional[int] = None, min_runtime: Optional[int] = None,
               timeout: Optional[float] = None, search_delegate: bool = False,
               search_step: Optional[int] = None, show_operations: bool = True) -> list[str]:
    """The compiler's command line, as a list (it is never run through a shell)."""
    argv = [compiler, "--out_dir", str(out_dir)]
    if show_operations:
        argv.append("--show_operations")
    if min_runtime is not None:
        argv += ["--min_runtime_version", str(min_runtime)]
    if segments and segments > 1:
        argv += ["--num_segments", str(segments)]
    if timeout is not None:
        argv += ["--timeout_sec", str(int(max(1, round(timeout))))]
    if search_delegate:
        argv.append("--search_delegate")
        if search_step:  # Ultralytics' YOLO export passes 30
            argv += ["--delegate_search_step", str(int(search_step))]
    argv.append(str(model))
    return argv


@dataclass
class RunOutput:
    argv: list[str]
    returncode: Optional[int]  # None when killed on timeout
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False


def run(argv: list[str], timeout: float, grace: Optional[float] = None) -> RunOutput:
    """Run `argv` (no shell) in its own process group; kill the group `grace` s after
    `timeout` (the compiler's own -t timer should fire first)."""
    grace = min(5.0, timeout) if grace is None else grace
    start = time.monotonic()
    try:
        log_command(argv)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except PermissionError:
        raise MissingDependency(f"{argv[0]} is not executable; {install_help()}") from None
    except OSError as e:
        raise MissingDependency(f"cannot run {argv[0]}: {e.strerror or e}; {install_help()}") from None
    try:
        out, err = proc.communicate(timeout=timeout + grace)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        timed_out = True
    return RunOutput(argv, None if timed_out else proc.returncode,
                     out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                     time.monotonic() - start, timed_out)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


# ----------------------------------------------------------------------------- the whole step


@dataclass
class CompileReport:
    model: str
    compiler: str
    command: list[str]
    returncode: Optional[int]
    seconds: float
    timed_out: bool
    out_dir: str
    outputs: list[dict]  # {"model", "log", "exists"} per compiled file (one per segment)
    cpu_model: Optional[str]  # the CPU twin beside the compiled model
    result: CompileResult
    judgement: Judgement
    stdout: str = ""
    stderr: str = ""
    logs: dict = field(default_factory=dict)  # log path -> text

    def to_json(self) -> dict:
        return {"model": self.model, "compiler": self.compiler, "command": self.command,
                "returncode": self.returncode, "seconds": round(self.seconds, 3),
                "timed_out": self.timed_out, "out_dir": self.out_dir, "outputs": self.outputs,
                "cpu_model": self.cpu_model, "verdict": self.judgement.verdict,
                "exit_code": self.judgement.exit_code, "errors": self.judgement.errors,
                "warnings": self.judgement.warnings, "result": self.result.to_json(),
                "stdout": self.stdout, "stderr": self.stderr, "logs": self.logs}


def compile_model(model: str | Path, compiler: str, out_dir: Optional[str | Path] = None, *,
                  segments: Optional[int] = None, min_runtime: Optional[int] = None,
                  timeout: float = DEFAULT_TIMEOUT_S, search_delegate: bool = False,
                  search_step: Optional[int] = None,
                  log: Optional[Callable[[str], None]] = None) -> CompileReport:
    """Run the compiler on `model` (already validated), parse and judge what it did.

    Writes X_edgetpu.tflite and X_edgetpu.log into `out_dir` (default: beside the model) and
    keeps the CPU twin X.tflite beside them (copied, with its sidecar .json, when `out_dir` is
    elsewhere), which is what `classify` falls back to without an Edge TPU.
    """
    model = Path(model)
    out = Path(out_dir) if out_dir is not None else model.parent
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out} is a file; pass a folder for the compiled model")
    out.mkdir(parents=True, exist_ok=True)
    argv = build_argv(compiler, model, out, segments=segments, min_runtime=min_runtime,
                      timeout=timeout, search_delegate=search_delegate, search_step=search_step)
    if log is not None:
        log("running: " + " ".join(shlex.quote(a) for a in argv))
    ran = run(argv, timeout)
    text = ran.stdout + ("\n" + ran.stderr if ran.stderr else "")
    result = parse_stdout(text)
    if ran.timed_out:
        result.failures.append(timeout_failure(timeout))
        result.succeeded = False
    pairs = compiler_outputs(model, out, segments)
    logs = {}
    for _tfl, log_path in pairs:
        try:
            logs[str(log_path)] = log_path.read_text(errors="replace")
        except OSError:
            continue
    for text_log in logs.values():
        apply_log(result, text_log)  # the first log with an operator table wins
    outputs = [{"model": str(t), "log": str(lp), "exists": t.is_file()} for t, lp in pairs]
    missing = [o["model"] for o in outputs if not o["exists"]] if result.compiled else []
    judgement = judge(result, ran.returncode, missing)
    twin = _keep_twin(model, out) if not missing and result.compiled else None
    return CompileReport(model=str(model), compiler=compiler, command=argv,
                         returncode=ran.returncode, seconds=ran.seconds, timed_out=ran.timed_out,
                         out_dir=str(out), outputs=outputs, cpu_model=twin, result=result,
                         judgement=judgement, stdout=ran.stdout, stderr=ran.stderr, logs=logs)


def _keep_twin(model: Path, out: Path) -> Optional[str]:
    target = out / model.name
    try:
        if target.resolve() != model.resolve():
            shutil.copy2(model, target)
            sidecar = model.with_suffix(".json")
            if sidecar.is_file() and not target.with_suffix(".json").exists():
                shutil.copy2(sidecar, target.with_suffix(".json"))
    except OSError:
        return None
    return str(target)
