"""The model check's child process: how it is run (forked when that is safe, else a fresh
`python -I` through probe_child.py; its lines read with deadlines, a late child killed, a dead
one reaped) and what it does (build, allocate, invoke and release the model once, or load the
Edge TPU library and read its build label). What its result means is probe.py's.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Callable, List, Optional

from typing_extensions import Protocol, TypedDict

TIMEOUT_ENV = "EDGEAPP_PROBE_TIMEOUT"
SPAWN_ENV = "EDGEAPP_PROBE_SPAWN"  # "1": always a fresh interpreter, never a fork
DEFAULT_TIMEOUT_S = 30.0  # after the child is up: USB firmware upload + model upload + invoke
START_TIMEOUT_S = 120.0  # for a fresh child to import the runtime (slow on a Raspberry Pi Zero)
MARK = "EDGEAPP_PROBE "  # prefixes the child's lines (probe_child.py prints them when spawned)


class TfliteRuntime(Protocol):
    """What the child and the probe use of a runtime (hw/runtime.Runtime, which opens engines
    through this module, so it is named here by what it offers)."""

    name: str
    version: str

    def make_interpreter(self, model_path: str, delegates: Optional[List[object]] = None,
                         threads: Optional[int] = None, cpu_kernels: str = "fast") -> Any:
        """A TFLite Interpreter of the model (the runtime's own class)."""


class ChildReport(TypedDict, total=False):
    """What the child reports on its `result` line: pass, failed or invalid, and why."""
    status: str
    message: str


@dataclass
class ChildResult:
    ready: bool = False
    hung: bool = False
    returncode: Optional[int] = None
    stage: Optional[str] = None
    result: Optional[ChildReport] = None  # the child's `result` line
    edgetpu_version: Optional[str] = None
    library: Optional[str] = None
    stderr: tuple = ()
    timeout: float = 0.0
    probed_at: str = ""

    @property
    def signal_name(self) -> Optional[str]:
        rc = self.returncode
        if rc is not None and rc < 0:
            try:  # not signal.valid_signals(): Python 3.8+
                return signal.Signals(-rc).name
            except ValueError:
                return None
        return None

    @property
    def died(self) -> bool:
        """Killed by a signal (or, on Windows, an NTSTATUS exception), or a native exit()."""
        rc = self.returncode
        if rc is None or self.hung:
            return False
        return rc < 0 or rc >= 0xC0000000 or (self.ready and self.result is None and rc != 0)

    @property
    def how(self) -> str:
        if self.signal_name:
            return self.signal_name
        return f"exit status {self.returncode:#x}" if self.returncode and self.returncode >= 0xC0000000 \
            else f"exit status {self.returncode}"


def run_in_child(args: list[str], work: Callable[[Callable[[str], None]], int],
               timeout: Optional[float]) -> ChildResult:
    if timeout is None:
        timeout = _timeout_from_env()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if _can_fork():
        out = _forked(work, timeout)
        if out.hung or out.died:  # a fork carries its parent's state: a fresh child confirms
            out = _spawned(args, timeout)
    else:
        out = _spawned(args, timeout)
    out.timeout, out.probed_at = timeout, stamp
    return out


def _timeout_from_env() -> float:
    from edgeapp.errors import UsageError

    text = os.environ.get(TIMEOUT_ENV) or str(DEFAULT_TIMEOUT_S)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise UsageError(f"{TIMEOUT_ENV} must be a number of seconds > 0, not {text!r}")
    return value


def _can_fork() -> bool:
    """Fork on Linux when no other Python thread runs (idle native pools, OpenBLAS's, are fine:
    the child never calls into them); a crash or hang seen in a fork is confirmed by a spawn."""
    return sys.platform.startswith("linux") and os.environ.get(SPAWN_ENV) != "1" and \
        threading.active_count() == 1


def _forked(work: Callable[[Callable[[str], None]], int], timeout: float) -> ChildResult:
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 70
            try:
                os.close(read_fd)
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 0)
                os.dup2(null, 1)
                os.dup2(err.fileno(), 2)

                def emit(line: str) -> None:
                    os.write(write_fd, (MARK + line + "\n").encode())

                code = work(emit)
            finally:
                os._exit(code)
        os.close(write_fd)
        try:
            out = _collect(pid, read_fd, timeout, ready_timeout=START_TIMEOUT_S)
        finally:
            os.close(read_fd)
        out.stderr = _lines(err)
    return out


def _spawned(args: list[str], timeout: float) -> ChildResult:
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(child_command(args), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err)
        try:
            out = _collect(proc.pid, proc.stdout.fileno(), timeout, ready_timeout=START_TIMEOUT_S,
                           proc=proc)
        finally:
            proc.stdout.close()
        out.stderr = _lines(err)
    return out


def child_command(args: list[str]) -> list[str]:
    """`python -I` running this module's child: the working directory never shadows a module."""
    from edgeapp.hw.proc import isolated_python, log_command

    cmd = isolated_python("from edgeapp.hw.probe_child import main; main()", *args)
    log_command(cmd)
    return cmd


def _lines(err: IO[bytes]) -> tuple:
    err.seek(0)
    return tuple(ln for ln in err.read().decode("utf-8", "replace").splitlines() if ln.strip())


def _collect(pid: int, fd: int, timeout: float, ready_timeout: float,
             proc: Optional[subprocess.Popen] = None) -> ChildResult:
    """Read the child's lines until EOF or a deadline; kill it if it is late; reap it.

    A thread reads the pipe (select() does not take pipes on Windows) and ends at EOF, which the
    child's exit guarantees; it is joined before returning, so the next check may fork again.
    """
    out = ChildResult()
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for raw in complete:
                lines.put(raw.decode("utf-8", "replace"))
        lines.put(None)

    reader = threading.Thread(target=pump, name="edgeapp-probe-reader", daemon=True)
    reader.start()
    deadline = time.monotonic() + ready_timeout
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                out.hung = True
                break
            if line is None:
                break
            if _take(out, line) == "ready":
                deadline = time.monotonic() + timeout
    except BaseException:  # Ctrl-C while waiting: the child goes too
        _kill(pid, proc)
        reader.join(timeout=5)
        raise
    if out.hung:
        _kill(pid, proc)
    out.returncode = proc.wait() if proc is not None else _reap(pid)
    reader.join(timeout=5)
    return out


def _take(out: ChildResult, line: str) -> Optional[str]:
    """Record one of the child's lines in `out`; return its word (None: not the child's)."""
    if not line.startswith(MARK):
        return None
    word, _, rest = line[len(MARK):].partition(" ")
    if word == "ready":
        out.ready = True
    elif word == "stage":
        out.stage = rest
    elif word == "library":
        info = json.loads(rest)
        out.library, out.edgetpu_version = info.get("path"), info.get("version")
    elif word == "result":
        out.result = json.loads(rest)
    return word


def _kill(pid: int, proc: Optional[subprocess.Popen]) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    if proc is not None:
        proc.wait()
    else:
        _reap(pid)


def _reap(pid: int) -> Optional[int]:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


# --- in the child ------------------------------------------------------------------------------


def _child_setup() -> None:
    try:  # a crash here is expected, and no reason to leave a core file behind
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent answers Ctrl-C and kills us
    except (ValueError, OSError):
        pass



def run_child(rt: TfliteRuntime, model_path: str, library: Optional[str],
              load_delegate: Optional[Callable[[], object]],
              emit: Callable[[str], None]) -> int:
    """Everything the main process would do with the model (and the delegate), once."""
    _child_setup()
    emit("ready")
    try:
        result = _child_steps(rt, model_path, library, load_delegate, emit)
    except BaseException as e:  # noqa: BLE001 - reported, never raised in a child
        result: ChildReport = {"status": "failed", "message": f"{type(e).__name__}: {e}"}
    emit("result " + json.dumps(result))
    return 0


def label_child(library: str, emit: Callable[[str], None]) -> int:
    """Load the library and say what it is: its file and its build label."""
    _child_setup()
    emit("ready")
    try:
        result = _load_library(library, emit) or {"status": "pass"}
    except BaseException as e:  # noqa: BLE001
        result = {"status": "failed", "message": f"{type(e).__name__}: {e}"}
    emit("result " + json.dumps(result))
    return 0


def _load_library(library: str, emit: Callable[[str], None]) -> Optional[ChildReport]:
    """None when loaded (and reported), else the failed result."""
    from edgeapp.hw.libedgetpu import build_label, explain_load_error, open_library

    emit("stage loading the Edge TPU library")
    try:
        lib, path = open_library(library)
    except OSError as e:
        return {"status": "failed", "message": explain_load_error(str(e), library)}
    emit("library " + json.dumps({"path": path, "version": build_label(lib)}))
    return None


def _child_steps(rt: TfliteRuntime, model_path: str, library: Optional[str],
                 load_delegate: Optional[Callable[[], object]],
                 emit: Callable[[str], None]) -> ChildReport:
    import gc

    import numpy as np

    from edgeapp.errors import EdgeappError
    from edgeapp.hw.runtime_errors import error_chain_text, runtime_error_text

    delegates = None
    if library and load_delegate is not None:
        failed = _load_library(library, emit)
        if failed:
            return failed
        emit("stage loading the Edge TPU delegate")
        try:
            delegates = [load_delegate()]
        except EdgeappError as e:
            return {"status": "failed", "message": str(e)}
    steps = ("building the interpreter", "allocating tensors", "invoking", "releasing the interpreter")
    interpreter = None
    try:
        emit("stage " + steps[0])
        interpreter = rt.make_interpreter(model_path, delegates)
        emit("stage " + steps[1])
        interpreter.allocate_tensors()
        emit("stage " + steps[2])
        for d in interpreter.get_input_details():
            interpreter.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        interpreter.invoke()
        for d in interpreter.get_output_details():
            interpreter.get_tensor(d["index"])
    except Exception as e:  # noqa: BLE001 - the runtime's own refusal, said cleanly
        text = runtime_error_text(e) if not e.__cause__ else error_chain_text(e)
        if delegates:
            return {"status": "failed", "message": f"Edge TPU rejected {model_path}: {text}"}
        return {"status": "invalid", "message": f"{rt.name} {rt.version} cannot run {model_path}: {text}"}
    emit("stage " + steps[3])
    interpreter = delegates = None  # tear the delegate down before reporting: a crash there counts
    gc.collect()
    return {"status": "pass"}
