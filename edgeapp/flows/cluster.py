"""Batches of any task across a fleet of hosts, on Dask distributed.

The client (this process) splits the inputs into chunks and submits them to the scheduler; each
worker process opens the model once (cached per worker, see `_runner_for`) and runs the chunk
through the same task and `iter_records` as a local run, so records are identical. Results
come back as chunks finish and are written in input order, each once: a chunk retried after a
worker died (the scheduler's own retry) is still written once, because the client writes by
chunk index. Only a bounded number of chunks is in flight, so `--ship-bytes` never holds the
whole batch in memory.

Workers declare Edge TPUs as a resource (`dask worker ... --resources "edgetpu=N"`); an
explicit TPU device asks for it, `auto` lets workers without one run the CPU twin. Each worker
opens the model through `flows.open_task`, as a local run does, so `--device all` runs a
worker's chunks on every Edge TPU it has (data-parallel, as a local `--device all` run does).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, List, Optional

from typing_extensions import TypedDict

from edgeapp.core.naming import cpu_twin_path, sidecar_path
from edgeapp.core.tflite.model import load_model
from edgeapp.errors import (
    ClusterError,
    EdgeappError,
    MissingDependency,
    UsageError,
    error_for_exit_code,
)
from edgeapp.flows.batch import (
    BatchStats,
    Record,
    device_of_failures,
    drain,
    failed_record,
    iter_records,
    todo,
)
from edgeapp.flows.open_task import Placement, open_task
from edgeapp.hw.device_choice import parse_devices
from edgeapp.hw.hostinfo import usable_cores
from edgeapp.sinks.records import RecordWriter

INSTALL = "pip install 'edgeapp[cluster]'"
DEFAULT_CHUNK = 16
EDGETPU_RESOURCE = "edgetpu"


@dataclass(frozen=True)
class Job:
    """Everything a worker needs to rebuild the task: plain data, pickled to the workers."""

    task: str  # a task name (tasks/)
    model: str  # the model path as the client names it (records say this)
    place: Placement = Placement()
    labels: Optional[dict] = None  # read on the client: workers need no labels file
    mean: Optional[float] = None
    std: Optional[float] = None
    decode: Optional[str] = None  # --decode (None: the model's sidecar, else the task's)
    options: dict = field(default_factory=dict)  # the task's options (top_k, threshold, ...)
    model_files: Optional[dict] = None  # --ship-bytes: file name -> bytes of the model, its CPU
    # twin and their sidecars, which travel too
    decode_workers: int = 2

    @property
    def device(self) -> str:
        return self.place.device


@dataclass
class ClusterStats(BatchStats):
    per_worker: dict = field(default_factory=lambda: defaultdict(int))  # worker address -> images

    def summary(self, device: str, output=None) -> list:
        parts = super().summary(device, output)
        if self.per_worker and self.seconds > 0:
            each = ", ".join(f"{w} {n / self.seconds:.1f}/s" for w, n in sorted(self.per_worker.items()))
            parts.append(f"per worker: {each}")
        return parts


def connect(address: str):
    """A Dask client for `tcp://host:port`, or a new local cluster for `local[:N]`."""
    try:
        from distributed import Client
    except ImportError:
        raise MissingDependency(f"--cluster needs Dask distributed: {INSTALL}") from None
    import logging

    # Dask logs connection trouble as tracebacks; edgeapp reports it as one line (ClusterError).
    # Its event loop (tornado) logs its callbacks' errors too: older distributed's sync() raises
    # one when Ctrl-C lands early, after which edgeapp says what was kept, as one line.
    dask_loggers = [n for n in logging.root.manager.loggerDict if n.startswith(("distributed.", "tornado."))]
    for name in ["distributed", "tornado"] + dask_loggers:
        logging.getLogger(name).setLevel(logging.CRITICAL)  # dask's config sets some levels itself
    if address == "local" or address.startswith("local:"):
        n = address.partition(":")[2]
        if n and not (n.isdigit() and int(n) > 0):
            raise UsageError(f"--cluster {address}: use local or local:N with N > 0")
        return _local_client(int(n) if n else usable_cores())  # as --workers counts them
    if "://" not in address:
        raise UsageError(f"--cluster {address}: use tcp://HOST:PORT (the scheduler) or local[:N]")
    try:
        return Client(address, timeout="10s")
    except (OSError, TimeoutError) as e:
        raise ClusterError(f"cannot reach the Dask scheduler at {address} ({e}); is "
                           "`dask scheduler` running there?") from None


def _local_client(workers: int):
    """A client of a new cluster of `workers` processes on 127.0.0.1 (its HTTP routes too, on a
    free port: no warning that another cluster holds Dask's 8787). Ctrl-C while Dask starts
    it would leave it half made, and Dask's own exit handler then fails with a traceback: it
    is kept until the cluster is up, which is then closed, and raised."""
    from distributed import Client, LocalCluster

    _quiet_worker_processes()
    with _ctrl_c_deferred() as pressed:
        client = Client(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                     host="127.0.0.1", dashboard_address=None,
                                     scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}))
    if pressed:
        _close(client)
        raise KeyboardInterrupt
    return client


@contextlib.contextmanager
def _ctrl_c_deferred() -> Iterator[list]:
    """Ctrl-C in the block is noted in the list it gives, not raised (main thread only)."""
    import signal

    pressed: list = []
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield pressed
        return
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(True))
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


def _quiet_worker_processes() -> None:
    """The worker processes of `local[:N]` never see the terminal's Ctrl-C and never log to it.

    Ctrl-C reaches every process of the terminal's foreground group: Dask's spawned workers
    died with KeyboardInterrupt tracebacks, and logged timestamped warnings (tasks cancelled)
    over edgeapp's own one-line summary. This process handles Ctrl-C and closes the cluster;
    its workers are forked from a fork server started with SIGINT ignored and Dask's logging
    at critical, which every worker (a restarted one too) inherits. Ctrl-C is ignored only
    while that server starts (milliseconds), not while the cluster does.
    """
    import multiprocessing
    import signal
    from multiprocessing import forkserver

    import dask
    from distributed.utils import get_mp_context

    if "forkserver" not in multiprocessing.get_all_start_methods():  # Windows: Dask's default
        return
    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
    get_mp_context()  # Dask's preload list (its modules imported once, in the server)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    saved = os.environ.get(_WORKER_LOG_LEVEL)
    os.environ[_WORKER_LOG_LEVEL] = "critical"  # read by Dask's config when the server imports it
    try:
        forkserver.ensure_running()
    finally:
        if saved is None:
            os.environ.pop(_WORKER_LOG_LEVEL, None)
        else:
            os.environ[_WORKER_LOG_LEVEL] = saved
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


_WORKER_LOG_LEVEL = "DASK_LOGGING__DISTRIBUTED"


def run_cluster(paths: list, job: Job, writer: RecordWriter, address: str, ship_bytes: bool = False,
                chunk_size: int = DEFAULT_CHUNK, progress: Optional[Callable[[], None]] = None
                ) -> ClusterStats:
    """Run every path not already in `writer` on the cluster; records in input order."""
    if chunk_size < 1:
        raise UsageError("--chunk-size must be at least 1")
    stats = ClusterStats(total=len(paths))
    left = todo(paths, writer, stats)
    files = _model_files(job.model)  # one-line errors for a bad model before any worker sees it
    if ship_bytes:
        job = replace(job, model_files=files)
    chunks = [left[i:i + chunk_size] for i in range(0, len(left), chunk_size)]
    client = connect(address)
    try:
        resources = {EDGETPU_RESOURCE: 1} if _needs_tpu(job.device) else None
        if resources and not _any_worker_has(client, EDGETPU_RESOURCE):
            raise ClusterError(f"--device {job.device}: no worker declares an Edge TPU (start workers "
                               f"with --resources \"{EDGETPU_RESOURCE}=N\"), or use --device auto")
        drain(_records(_ordered_results(client, job, chunks, ship_bytes, resources), stats),
              stats, writer, progress)
    finally:
        _close(client)
    return stats


def _records(chunks: Iterator[tuple], stats: ClusterStats) -> Iterator[dict]:
    """The records of (records, worker) chunks, in order, counted per worker."""
    for records, worker in chunks:
        stats.per_worker[worker] += len(records)
        yield from records


def _ordered_results(client, job: Job, chunks: list, ship_bytes: bool, resources) -> Iterator[tuple]:
    """(records, worker) per chunk in chunk order, keeping a bounded number of chunks in flight."""
    from distributed import as_completed

    in_flight = max(4, 2 * _total_threads(client))
    futures, done, next_submit, next_write = {}, {}, 0, 0
    pending = as_completed()

    def submit(i: int) -> None:
        items = [(p, _read_bytes(p)) for p in chunks[i]] if ship_bytes else list(chunks[i])
        fut = client.submit(process_chunk, job, items, key=f"edgeapp-chunk-{i}-{id(job)}",
                            resources=resources, pure=False, retries=0)
        futures[fut.key] = i
        pending.add(fut)

    while next_submit < len(chunks) and next_submit < in_flight:
        submit(next_submit)
        next_submit += 1
    try:
        for fut in pending:
            i = futures.pop(fut.key)
            done[i] = _result(fut, chunks[i], job)
            fut.release()
            if next_submit < len(chunks):
                submit(next_submit)
                next_submit += 1
            while next_write in done:
                yield done.pop(next_write)
                next_write += 1
    except EdgeappError:
        raise
    except Exception as e:  # the scheduler went away: comm errors, cancelled futures
        raise ClusterError(f"lost the Dask scheduler ({type(e).__name__}: {e or 'connection closed'}); "
                           "the results so far are kept: re-run with --output FILE --resume") from None


def _result(fut, paths: list, job: Job) -> tuple:
    """A finished chunk's (records, worker); a chunk that keeps killing workers is error records."""
    from distributed import KilledWorker

    try:
        out = fut.result()
    except KilledWorker as e:
        from edgeapp.tasks import kind

        message = f"the worker processing it died repeatedly ({e})"
        return [failed_record(p, None, job.model, kind(job.task), message) for p in paths], "(killed)"
    if "fatal" in out:
        raise error_for_exit_code(out["exit_code"], out["fatal"])
    return out["records"], out["worker"]


# ------------------------------------------------------------------------------- on the workers

class ChunkDone(TypedDict, total=False):
    """What a worker sends back for a chunk: its records and its address, or (`fatal`) why the
    model could not be opened there and the exit code that error maps to."""
    records: List[Record]
    worker: str
    fatal: str
    exit_code: int


_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()


def process_chunk(job: Job, items: list) -> ChunkDone:
    """Run on a worker: the chunk's records, or {"fatal"} when the model cannot be opened there."""
    try:
        runner, task, lock = _runner_for(job)
    except EdgeappError as e:
        return {"fatal": f"on worker {_worker_address()}: {e}", "exit_code": int(e.exit_code)}
    with lock:  # one runner per worker process: tasks on other threads wait their turn
        if items and isinstance(items[0], tuple):  # --ship-bytes: (path, bytes or why not)
            records = _shipped_records(items, runner, task, job.decode_workers)
        else:
            records = list(iter_records(items, runner, task, job.decode_workers))
    if job.model_files is not None:  # name the model as the client knows it, as a local run would
        folder = os.path.dirname(job.model)
        for r in records:
            r["model"] = os.path.join(folder, os.path.basename(r["model"]))
    return {"records": records, "worker": _worker_address()}


def _runner_for(job: Job):
    """The worker's opened model for this job, opened once per worker process: one device, or
    every Edge TPU the worker has for a TPU list or `all` (flows/open_task.py)."""
    key = (job.model, job.place, job.task, tuple(sorted(job.options.items())), job.mean, job.std,
           job.decode, tuple(sorted((n, len(b)) for n, b in (job.model_files or {}).items())))
    with _CACHE_LOCK:
        if key not in _CACHE:
            path = _materialize(job) if job.model_files is not None else job.model
            opened = open_task(path, job.task, job.place, options=job.options, labels=job.labels,
                               mean=job.mean, std=job.std, decode=job.decode)
            _CACHE[key] = (opened.runner, opened.task, threading.Lock())
        return _CACHE[key]


def _materialize(job: Job) -> str:
    """Write the shipped model files into the worker's temp folder (named by content, reused)."""
    import hashlib
    import tempfile

    digest = hashlib.sha256()
    for name, data in sorted(job.model_files.items()):
        digest.update(name.encode() + b"\0" + data)
    folder = os.path.join(tempfile.gettempdir(), f"edgeapp-model-{digest.hexdigest()[:16]}")
    os.makedirs(folder, exist_ok=True)
    for name, data in job.model_files.items():
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            tmp = path + f".{os.getpid()}.part"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
    return os.path.join(folder, os.path.basename(job.model))


def _shipped_records(items: list, runner, task, workers: int) -> List[Record]:
    """Records of (path, bytes) items, in order; an item the client could not read carries the
    one-line reason instead of bytes, and is that error's record."""
    readable = [(p, b) for p, b in items if not isinstance(b, str)]
    ran = iter_records([p for p, _ in readable], runner, task, workers,
                       sources=[b for _, b in readable])
    device = device_of_failures(runner)
    return [failed_record(p, device, runner.model_path, task.kind, b) if isinstance(b, str)
            else next(ran) for p, b in items]


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return f"pid {os.getpid()}"


# ------------------------------------------------------------------------------- on the client

def _read_bytes(path: str):
    """The image's bytes for --ship-bytes, or the one-line reason it cannot be read."""
    try:
        if not os.path.isfile(path):
            return f"{path}: not a regular file" if os.path.exists(path) else f"{path}: no such file"
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        return f"{path}: cannot read ({e.strerror or e})"


def _model_files(path: str) -> dict:
    """The model, its CPU twin and their sidecars (labels, mean/std): what a worker needs."""
    load_model(path)  # the same one-line errors as a local run, before anything is shipped
    twin = cpu_twin_path(path)
    files = {}
    for p in dict.fromkeys([Path(path), sidecar_path(path), twin, sidecar_path(twin)]):
        if p.is_file():
            files[p.name] = p.read_bytes()
    return files


def _needs_tpu(device: str) -> bool:
    """Only workers with an Edge TPU may take the chunks: an explicit TPU, a list or `all`
    without `auto` (which lets a worker without one run the CPU twin)."""
    choice = parse_devices(device)
    if choice.single is not None:
        return choice.single.kind == "edgetpu"
    return not choice.fallback


def _any_worker_has(client, resource: str) -> bool:
    info = client.scheduler_info().get("workers", {})
    return any(w.get("resources", {}).get(resource) for w in info.values())


def _total_threads(client) -> int:
    return sum(client.nthreads().values()) or 1


def _close(client) -> None:
    cluster = getattr(client, "cluster", None)
    try:
        client.close(timeout=5)
        if cluster is not None:
            cluster.close(timeout=5)
    except Exception:  # closing a client whose scheduler is gone must not hide the real error
        pass
