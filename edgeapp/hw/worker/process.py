"""One worker process seen from the main process: started, called with a deadline, ended.

A call that gets no answer before its deadline is a hang; a connection that closes (the
process was killed, or crashed inside the runtime) is a crash; an error the worker reports
from the device is an error. All three are `WorkerLost`, and the caller ends the process
(SIGKILL works on a stopped or hung process alike) before anything else.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import asdict
from multiprocessing.reduction import recv_handle
from typing import Any, Callable, Dict, List, Optional, TypeVar

import numpy as np

from edgeapp import errors
from edgeapp.errors import DeviceFailed, EdgeappError, InvalidModel
from edgeapp.hw.proc import isolated_python, log_command
from edgeapp.hw.worker.shared import Region
from edgeapp.hw.worker.wire import ARGV_MARK, DONE, QUIT, ModelDescription, run_message

# hw/runtime.EngineOptions (not imported: hw/runtime opens the worker, not the other way)
Options = Any

START_TIMEOUT_S = 120.0  # importing the runtime and opening the model (slow on a Pi Zero)
# A worker stopped (SIGSTOP, a debugger) this long is a hang, whatever its deadline: a start's is
# START_TIMEOUT_S, and a stopped process never answers until someone continues it.
STOPPED_S = 2.0
CAUSES = ("hang", "crash", "error", "gone")
# the runtime's device errors (and a device left the bus) are the device's; the rest is the model's
_MODEL_ERRORS = (InvalidModel, errors.UsageError, errors.MissingDependency)


Answer = TypeVar("Answer")  # what a wait for the worker gives back

class WorkerLost(Exception):
    """The worker stopped answering: `cause` is one of CAUSES; `waited`, the seconds since the
    call began (a hang: the deadline), part of the outage."""

    def __init__(self, cause: str, detail: str, waited: float = 0.0, *, stopped: bool = False) -> None:
        super().__init__(f"{cause}: {detail}")
        self.cause, self.detail, self.waited = cause, detail, waited
        self.stopped = stopped  # a hang because the process was stopped (SIGSTOP), not silent


def _error(message: tuple) -> EdgeappError:
    _, name, text, device = message
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, EdgeappError)):
        cls = DeviceFailed
    if issubclass(cls, DeviceFailed):
        return cls(text, device or "edgetpu")
    return cls(text)


class _Starter:
    """The one thread that starts workers when the caller is not the main thread. The worker
    asks the kernel to end it when its parent goes (main.py, PR_SET_PDEATHSIG), and on Linux
    that parent is the *thread* that started it: a worker started from a batch's decoding
    thread or a device's thread (a replacement) would be killed when that thread ends. This
    thread is a daemon, never joined, so it lasts as long as the process; a forked child (which
    inherits this object but not the thread) gets a new one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: Optional[queue.Queue] = None

    def popen(self, argv: List[str], fd: int) -> subprocess.Popen:
        if threading.current_thread() is threading.main_thread():
            return _popen(argv, fd)
        with self._lock:
            if self._queue is None:
                self._queue = queue.Queue()
                threading.Thread(target=self._serve, args=(self._queue,), daemon=True,
                                 name="edgeapp-worker-start").start()
            asked = self._queue
        answer: queue.Queue = queue.Queue(maxsize=1)
        asked.put((argv, fd, answer))
        ok, value = answer.get()
        if not ok:
            raise value
        return value

    @staticmethod
    def _serve(asked: queue.Queue) -> None:
        while True:
            argv, fd, answer = asked.get()
            try:
                answer.put((True, _popen(argv, fd)))
            except BaseException as e:  # noqa: BLE001 - raised in the asking thread
                answer.put((False, e))

    def forked(self) -> None:
        self._lock = threading.Lock()
        self._queue = None


def _popen(argv: List[str], fd: int) -> subprocess.Popen:
    return subprocess.Popen(argv, pass_fds=(fd,), stdin=subprocess.DEVNULL)


_starter = _Starter()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_starter.forked)


def is_stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (state T or t in /proc; False where there is no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] in (b"T", b"t")


class WorkerProcess:
    """A started worker owning one device; `open` puts a model in it (`describes` says what
    each opened model runs), `call` runs one."""

    def __init__(self, device: str) -> None:
        self.device = device
        parent, child = multiprocessing.Pipe(duplex=True)
        code = "from edgeapp.hw.worker.main import main; sys.exit(main(sys.argv[1:]))"
        argv = isolated_python(code, ARGV_MARK, "--fd", str(child.fileno()), "--device", device,
                               "--parent", str(os.getpid()))
        log_command(argv[:3] + ["..."] + argv[4:], once=True)
        self.proc = _starter.popen(argv, child.fileno())
        child.close()
        self.conn = parent
        self.regions: Dict[int, Region] = {}
        self.describes: Dict[int, ModelDescription] = {}

    def open(self, number: int, model: str, device: str, options: Options, *,
             trust_model: bool = False, timeout: float = START_TIMEOUT_S) -> ModelDescription:
        """Open `model` on `device` in the worker as model `number`: what it runs (its
        description). The model's or the device's error as raised in the worker; WorkerLost when
        the worker dies or does not answer within `timeout` (the first open includes the
        worker's start)."""
        fields = {k: v for k, v in asdict(options).items()}
        try:
            self.conn.send(("open", number, str(model), device, fields, trust_model))
        except (OSError, ValueError):
            raise WorkerLost("crash", f"worker {self.pid} {self._how()}") from None
        began = time.monotonic()
        try:
            message = self._in_step(lambda: self._answer(began + timeout, starting=timeout))
        except WorkerLost as lost:
            lost.waited = time.monotonic() - began
            raise
        if message[0] == "error":
            raise _error(message)
        describe = message[1]
        fd = recv_handle(self.conn)
        self.regions[number] = Region(fd, describe["layout"])
        self.describes[number] = describe
        return describe

    def release(self, number: int) -> None:
        """Model `number` is no longer run: the worker lets go of its engine and region."""
        region = self.regions.pop(number, None)
        self.describes.pop(number, None)
        if region is not None:
            region.close()
        try:
            self.conn.send(("close", number))
        except (OSError, ValueError):
            pass  # a dead worker holds nothing

    @property
    def pid(self) -> int:
        return self.proc.pid

    def pin(self, cores: set) -> bool:
        """Keep every thread of the process on `cores` (Linux; elsewhere, or refused: False).
        Affinity is a thread's: the runtime's threads, started already, are each set."""
        try:
            threads = [int(t) for t in os.listdir(f"/proc/{self.pid}/task")]
        except (OSError, ValueError):
            threads = [self.pid]
        try:
            for tid in threads:
                try:
                    os.sched_setaffinity(tid, cores)
                except ProcessLookupError:  # a thread that ended meanwhile
                    pass
        except (AttributeError, OSError):
            return False
        return True

    def _answer(self, deadline: float, starting: Optional[float] = None) -> Any:
        """The worker's next message (`starting`: an open's answer, within that many seconds);
        WorkerLost when it dies, stays stopped STOPPED_S, or the deadline passes."""
        stopped_since: Optional[float] = None
        while True:
            left = deadline - time.monotonic()
            try:
                if self.conn.poll(max(0.0, min(left, 0.5))):
                    return self.conn.recv_bytes() if starting is None else self.conn.recv()
            except (EOFError, OSError, ConnectionError):
                raise WorkerLost("crash", f"worker {self.pid} {self._how()}") from None
            if self.proc.poll() is not None and not self.conn.poll(0):
                raise WorkerLost("crash", f"worker {self.pid} {self._how()}")
            if is_stopped(self.pid):
                now = time.monotonic()
                stopped_since = now if stopped_since is None else stopped_since
                if now - stopped_since >= STOPPED_S:
                    raise WorkerLost("hang", f"worker {self.pid} was stopped for {STOPPED_S:g} s",
                                     stopped=True)
            else:
                stopped_since = None
            if left <= 0:
                if starting is not None:
                    raise WorkerLost("hang", f"worker {self.pid} did not open the model within {starting:.1f} s")
                raise WorkerLost("hang", f"worker {self.pid} did not answer within {self._waited(deadline)}")

    def _in_step(self, wait: Callable[[], Answer]) -> Answer:
        """`wait()` for an answer; interrupted (Ctrl-C), the answer would come to the next
        question: the worker is ended, and the next call finds it gone and replaces it."""
        try:
            return wait()
        except WorkerLost:
            raise
        except BaseException:
            self.end()
            raise

    def _waited(self, deadline: float) -> str:
        started = getattr(self, "_started", None)
        return f"{deadline - started:.1f} s" if started is not None else "its deadline"

    def _how(self) -> str:
        try:
            rc = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "closed its connection"
        if rc < 0:
            try:
                return f"was killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"was killed by signal {-rc}"
        return f"exited with status {rc}"

    def call(self, number: int, tensors: List[np.ndarray], deadline: float) -> List[np.ndarray]:
        """Run model `number` on the inputs, outputs copied out of its region; WorkerLost or the
        model's error."""
        region = self.regions[number]
        for view, tensor in zip(region.inputs, tensors):
            view[...] = tensor.reshape(view.shape)
        self._started = time.monotonic()
        try:
            self.conn.send_bytes(run_message(number))
        except (OSError, ValueError):
            raise WorkerLost("crash", f"worker {self.pid} {self._how()}") from None
        try:
            answer = self._in_step(lambda: self._answer(deadline))
        except WorkerLost as lost:
            lost.waited = time.monotonic() - self._started
            raise
        if answer != DONE:
            import pickle

            error = _error(pickle.loads(answer))
            if isinstance(error, _MODEL_ERRORS):
                raise error
            raise WorkerLost("error", str(error), time.monotonic() - self._started)
        return [np.array(view) for view in region.outputs]

    def end(self, graceful: bool = False) -> None:
        """Stop the process and let go of it all: at once (SIGKILL, which ends a hung or stopped
        one too), or `graceful`ly, given a moment to close its device first."""
        if self.proc.poll() is None:
            try:
                self.conn.send_bytes(QUIT)
            except (OSError, ValueError):
                graceful = False
            if graceful:
                try:
                    self.proc.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    pass
            if self.proc.poll() is None:
                try:
                    self.proc.kill()
                except OSError:
                    pass
        try:
            self.proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:  # an uninterruptible sleep in the driver: not ours to wait
            pass
        self.conn.close()
        for region in self.regions.values():
            region.close()
        self.regions.clear()


