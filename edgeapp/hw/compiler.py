"""Google's `edgetpu_compiler`: the thin wrapper that finds and runs it.

Finds the compiler (--compiler, $EDGETPU_COMPILER, PATH, then the one `edgeapp compiler
install` put in the user's data folder), runs it with an argv list (never a shell) under a
timeout, kills its process group when it hangs, and reads the `.log` files it writes. A
compiler laid out as Google's (edgetpu_compiler_bin/ with its loader) is run through that
loader, natively, under QEMU or in Docker (hw/compiler_host.py). What the compiler printed is
parsed and judged by the pure `compiler_output`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from typing_extensions import TypedDict

from edgeapp.core.edgetpu.compiler_files import parse_version, runtime_needed
from edgeapp.core.edgetpu.compiler_output import (
    CompileJson,
    CompileResult,
    Judgement,
    apply_log,
    judge,
    parse_stdout,
    timeout_failure,
)
from edgeapp.core.edgetpu.package import parameter_use
from edgeapp.core.naming import compiler_outputs
from edgeapp.core.tflite.model import map_model_file
from edgeapp.errors import InvalidModel, MissingDependency, UsageError
from edgeapp.hw.compiler_host import (
    EMULATION_TIMEOUT_FACTOR,
    Bundle,
    CompilerRunner,
    bundle_at,
    choose_runner,
    compiler_argv,
)
from edgeapp.hw.proc import log_command

COMPILER_NAME = "edgetpu_compiler"
ENV_VAR = "EDGETPU_COMPILER"
DEFAULT_TIMEOUT_S = 180  # the compiler's own default (-t)


# ----------------------------------------------------------------------------- finding


def install_help() -> str:
    """How to get the compiler on this machine: edgeapp installs Google's own files."""
    return (f"`edgeapp compiler install` fetches Google's compiler and verifies it (or `edgeapp "
            f"compiler install --from edgetpu-compiler_16.0_amd64.deb` if you have Coral's package); "
            f"or point --compiler / ${ENV_VAR} at one. Without it, `edgeapp check MODEL` predicts "
            "what would run on the Edge TPU")


@dataclass(frozen=True)
class Compiler:
    """The compiler `compile` runs: where it was found and, for Google's folder layout, the
    bundle run through its own loader (natively, under QEMU or in Docker)."""

    path: str  # the executable, wrapper or folder, as found
    source: str  # --compiler, $EDGETPU_COMPILER, PATH, installed
    bundle: Optional[Bundle] = None
    version: Optional[str] = None  # recorded when edgeapp installed it
    record: Optional[dict] = None  # the installed one's install.json

    def runner(self, env: Optional[Mapping[str, str]] = None, machine: Optional[str] = None) -> CompilerRunner:
        """How it runs on this machine (`machine`: another architecture's view, for doctor)."""
        if self.bundle is None:
            return CompilerRunner("native")
        return choose_runner(env, machine=machine)

    def argv(self, args: list[str], env: Optional[Mapping[str, str]] = None,
             folders: tuple = ()) -> list[str]:
        """The argv running it with `args` (no shell); a bundle through its own loader."""
        if self.bundle is None:
            return [self.path, *args]
        return compiler_argv(self.runner(env), self.bundle, args, env, folders)


def find_compiler(explicit: Optional[str | Path] = None, env: Optional[Mapping[str, str]] = None,
                  installed: bool = True) -> Compiler:
    """The compiler: `explicit`, else $EDGETPU_COMPILER, else PATH, else the newest one
    `edgeapp compiler install` put in the user's data folder. The one lookup of `compile`,
    `convert --compile`, `bench --synthetic` and `doctor`.

    A value with a directory part (`./c.sh`, `bin/c`, `~/c`) is that file, relative to the
    current directory, and is returned absolute (a bare `c.sh` handed to the OS would be looked
    up on PATH); a bare name is looked up on PATH, then in the current directory. A folder laid
    out as Google's (edgetpu_compiler_bin/ inside) is that compiler.
    """
    env = os.environ if env is None else env
    for source, value in (("--compiler", explicit), (f"${ENV_VAR}", env.get(ENV_VAR))):
        if value:
            return _named(source, str(value), env)
    found = shutil.which(COMPILER_NAME, path=env.get("PATH"))
    if found:
        return Compiler(found, "PATH", bundle_at(Path(found)))
    if installed:
        from edgeapp.hw.compiler_install import newest_installed

        record = newest_installed(env)
        if record is not None:
            folder = Path(record["path"])
            return Compiler(str(folder), "installed", bundle_at(folder), record.get("version"), record)
    raise MissingDependency(f"{COMPILER_NAME} not found (looked at --compiler, ${ENV_VAR}, PATH and "
                            f"edgeapp's own install); {install_help()}")


def _named(source: str, value: str, env: Mapping[str, str]) -> Compiler:
    text = os.path.expanduser(value)
    if os.path.isdir(text):
        bundle = bundle_at(Path(text).resolve())
        if bundle is None:
            raise MissingDependency(f"{source} {value}: a folder without edgetpu_compiler_bin/"
                                    f"{COMPILER_NAME} and its loader; {install_help()}")
        return Compiler(os.path.abspath(text), source, bundle)
    candidates = [] if os.path.dirname(text) else [shutil.which(text, path=env.get("PATH"))]
    candidates.append(os.path.abspath(text))
    for found in candidates:
        if found and os.path.isfile(found) and os.access(found, os.X_OK):
            return Compiler(os.path.abspath(found), source, bundle_at(Path(found).resolve()))
    why = "not executable" if os.path.isfile(text) else "no such file"
    raise MissingDependency(f"{source} {value}: {why}; {install_help()}")


def read_version(compiler: Compiler, env: Optional[Mapping[str, str]] = None,
                 timeout: float = 60.0) -> str:
    """The version the compiler prints for --version (by running it); MissingDependency when
    it cannot run here, CompileError-free: an unreadable answer is that answer's first line."""
    argv = compiler.argv(["--version"], env)
    log_command(argv)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        raise MissingDependency(f"{compiler.path} does not run: {getattr(e, 'strerror', None) or e}") from None
    text = proc.stdout + proc.stderr
    version = parse_version(text)
    if version is None:
        first = next((ln for ln in text.splitlines() if ln.strip()), f"exit {proc.returncode}")
        raise MissingDependency(f"{compiler.path} --version did not print a version: {first.strip()}")
    return version


# ----------------------------------------------------------------------------- running


def build_argv(compiler: str, model: str | Path, out_dir: str | Path, *,
               segments: Optional[int] = None, min_runtime: Optional[int] = None,
               timeout: Optional[float] = None, search_delegate: bool = False,
               search_step: Optional[int] = None, show_operations: bool = True,
               cocompile: Sequence[str | Path] = ()) -> list[str]:
    """The compiler's command line, as a list (it is never run through a shell); `cocompile`:
    models compiled in the same call after `model`, so their parameters are cached together."""
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
    argv += [str(m) for m in (model, *cocompile)]
    return argv


@dataclass
class RunOutput:
    argv: list[str]
    returncode: Optional[int]  # None when killed on timeout
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False


def run_compiler(argv: list[str], timeout: float, grace: Optional[float] = None) -> RunOutput:
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


class CompiledFile(TypedDict):
    model: str
    log: str
    exists: bool


class CoCompiled(TypedDict):
    """A model compiled together with others: where its parameters go, as its compiled file
    records them (`parameters` "read") or as the compiler printed them ("printed")."""
    model: str
    output: str
    on_chip_bytes: Optional[int]
    off_chip_bytes: Optional[int]
    caching_token: Optional[str]
    parameters: Optional[str]


class CompileReportJson(TypedDict, total=False):
    """`compile --format json`: how the compiler ran, what it wrote, the verdict, its output
    parsed (`result`); `models` for models compiled together."""
    model: str
    compiler: str
    compiler_source: str
    compiler_version: Optional[str]
    runs: str
    runtime_needed: Optional[int]
    command: List[str]
    returncode: Optional[int]
    seconds: float
    timed_out: bool
    out_dir: str
    outputs: List[CompiledFile]
    cpu_model: Optional[str]
    verdict: str
    exit_code: int
    errors: List[str]
    warnings: List[str]
    result: CompileJson
    stdout: str
    stderr: str
    logs: Dict[str, str]  # log path -> text
    models: List[CoCompiled]


@dataclass
class CompileReport:
    model: str
    compiler: str
    command: list[str]
    returncode: Optional[int]
    seconds: float
    timed_out: bool
    out_dir: str
    outputs: List[CompiledFile]  # per compiled file (one per segment)
    cpu_model: Optional[str]  # the CPU twin beside the compiled model
    result: CompileResult
    judgement: Judgement
    stdout: str = ""
    stderr: str = ""
    logs: dict = field(default_factory=dict)  # log path -> text
    runs: str = "native"  # native, qemu, binfmt or docker
    source: str = ""  # where the compiler was found: --compiler, $EDGETPU_COMPILER, PATH, installed
    min_runtime: Optional[int] = None

    recorded_version: Optional[str] = None  # what `compiler install` read, if it installed it
    models: List[CoCompiled] = field(default_factory=list)  # co-compiled

    @property
    def compiler_version(self) -> Optional[str]:
        """The version the compiler printed when it ran (else the one recorded at install)."""
        return self.result.compiler_version or self.recorded_version

    @property
    def runtime_needed(self) -> Optional[int]:
        """The Edge TPU runtime version the output needs (what this compiler version emits)."""
        return runtime_needed(self.compiler_version, self.min_runtime)

    def to_json(self) -> CompileReportJson:
        return {"model": self.model, "compiler": self.compiler, "compiler_source": self.source,
                "compiler_version": self.compiler_version, "runs": self.runs,
                "runtime_needed": self.runtime_needed, "command": self.command,
                "returncode": self.returncode, "seconds": round(self.seconds, 3),
                "timed_out": self.timed_out, "out_dir": self.out_dir, "outputs": self.outputs,
                "cpu_model": self.cpu_model, "verdict": self.judgement.verdict,
                "exit_code": self.judgement.exit_code, "errors": self.judgement.errors,
                "warnings": self.judgement.warnings, "result": self.result.to_json(),
                "stdout": self.stdout, "stderr": self.stderr, "logs": self.logs,
                **({"models": self.models} if self.models else {})}


def default_timeout(runner: CompilerRunner) -> float:
    """The compiler's own 180 s, scaled for emulation (QEMU, Docker on another CPU)."""
    return DEFAULT_TIMEOUT_S * (EMULATION_TIMEOUT_FACTOR if runner.emulated else 1)


def compile_model(model: str | Path, compiler: Compiler | str, out_dir: Optional[str | Path] = None, *,
                  segments: Optional[int] = None, min_runtime: Optional[int] = None,
                  timeout: Optional[float] = None, search_delegate: bool = False,
                  search_step: Optional[int] = None, cocompile: Sequence[str | Path] = (),
                  log: Optional[Callable[[str], None]] = None) -> CompileReport:
    """Run the compiler on `model` (already validated), parse and judge what it did; with
    `cocompile`, on `model` and those in one call, so their parameters are cached together.

    Writes X_edgetpu.tflite and X_edgetpu.log into `out_dir` (default: beside the model) and
    keeps the CPU twin X.tflite beside them (copied, with its sidecar .json, when `out_dir` is
    elsewhere), which is what `classify` falls back to without an Edge TPU. `timeout` None: the
    compiler's default, scaled when it runs emulated.
    """
    if isinstance(compiler, str):
        compiler = Compiler(compiler, "given", bundle_at(Path(compiler)))
    runner = compiler.runner()
    timeout = default_timeout(runner) if timeout is None else timeout
    model = Path(model)
    together = [Path(m) for m in cocompile]
    out = Path(out_dir) if out_dir is not None else model.parent
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out} is a file; pass a folder for the compiled model")
    out.mkdir(parents=True, exist_ok=True)
    args = build_argv(compiler.path, model, out, segments=segments, min_runtime=min_runtime,
                      timeout=timeout, search_delegate=search_delegate, search_step=search_step,
                      cocompile=together)[1:]
    paths = {str(m) for m in (model, *together)} | {str(out)}
    if runner.mode == "docker":  # the container sees the same absolute paths
        args = [os.path.abspath(a) if a in paths else a for a in args]
    folders = tuple(dict.fromkeys([str(m.parent) for m in (model, *together)] + [str(out)]))
    argv = compiler_argv(runner, compiler.bundle, args, folders=folders) \
        if compiler.bundle is not None else [compiler.path, *args]
    if log is not None:
        log("running: " + " ".join(shlex.quote(a) for a in argv))
    pairs = [pair for m in (model, *together) for pair in compiler_outputs(m, out, segments)]
    before = {p: _stamp(p) for pair in pairs for p in pair}  # files of an earlier run do not count
    ran = run_compiler(argv, timeout)
    text = ran.stdout + ("\n" + ran.stderr if ran.stderr else "")
    result = parse_stdout(text)
    if ran.timed_out:
        result.failures.append(timeout_failure(timeout))
        result.succeeded = False
    fresh = {p for p, stamp in before.items() if _stamp(p) not in (None, stamp)}
    logs = {}
    for _tfl, log_path in pairs:
        try:
            if log_path in fresh:
                logs[str(log_path)] = log_path.read_text(errors="replace")
        except OSError:
            continue
    for text_log in logs.values():
        apply_log(result, text_log)  # the first log with an operator table wins
    outputs = [{"model": str(t), "log": str(lp), "exists": t in fresh and t.is_file()} for t, lp in pairs]
    missing = [o["model"] for o in outputs if not o["exists"]] if result.compiled else []
    judgement = judge(result, ran.returncode, missing, printed=bool(text.strip()))
    twin = _keep_twin(model, out) if not missing and result.compiled else None
    if twin is not None:
        for other in together:
            _keep_twin(other, out)
    models = cocompiled_models([model, *together], pairs, result) if together else []
    return CompileReport(model=str(model), compiler=compiler.path, command=argv,
                         returncode=ran.returncode, seconds=ran.seconds, timed_out=ran.timed_out,
                         out_dir=str(out), outputs=outputs, cpu_model=twin, result=result,
                         judgement=judgement, stdout=ran.stdout, stderr=ran.stderr, logs=logs,
                         runs=runner.mode, source=compiler.source, min_runtime=min_runtime,
                         recorded_version=compiler.version, models=models)


def cocompiled_models(models: list, pairs: list, result: CompileResult) -> List[CoCompiled]:
    """Each co-compiled model's parameters: as its compiled file records them (its Edge TPU
    package), else as the compiler printed them (its block of stdout, in the order given)."""
    blocks = result.segments if len(result.segments) == len(models) else [None] * len(models)
    out: List[CoCompiled] = []
    for m, (compiled, _log), block in zip(models, pairs, blocks):
        entry: CoCompiled = {"model": str(m), "output": str(compiled), "on_chip_bytes": None,
                             "off_chip_bytes": None, "caching_token": None, "parameters": None}
        try:
            use = parameter_use(map_model_file(compiled), str(compiled)) if compiled.is_file() else None
        except (InvalidModel, OSError):
            use = None
        if use is not None:
            entry.update(on_chip_bytes=use.on_chip_bytes, off_chip_bytes=use.off_chip_bytes,
                         caching_token=use.to_json()["caching_tokens"][0] if use.caching_tokens else None,
                         parameters="read")
        elif block is not None:
            entry.update(on_chip_bytes=block.on_chip_used_bytes, off_chip_bytes=block.off_chip_bytes,
                         parameters="printed")
        out.append(entry)
    return out


def _stamp(path: Path) -> Optional[tuple]:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


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
