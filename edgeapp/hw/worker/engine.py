"""`IsolatedEngine`: the engine the main process sees when the model runs in a worker. It
declares what every engine declares (hw/runtime.py: inputs, outputs, the input's shape, dtype
and quantization, the model, the device, `run`), so runners, tasks and bench use it unchanged.

Every engine of a run opened on the same Edge TPU shares one worker, whatever its model (a
cascade's two models, several pipelines): each model has its own interpreter and region in it,
and engines of the same model with the same options share that one. Closing an engine releases
its model once no other engine uses it; the worker ends with its last model. On the CPU a model
goes into the first worker that does not run it yet: a cascade's two models share one worker,
the replicas of one model each get their own (they work side by side), each kept on a core of
its own while there are free ones (`_keep_replicas_apart`).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import namedtuple
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

from edgeapp.errors import InvalidModel
from edgeapp.hw.worker.supervisor import Supervisor
from edgeapp.hw.worker.wire import ModelDescription

# hw/runtime.EngineOptions (not imported: hw/runtime opens the worker, not the other way)
Options = Any

if TYPE_CHECKING:
    from edgeapp.core.tflite.model import TfliteModel
    from edgeapp.hw.recovery import HardwareOps

RuntimeName = namedtuple("RuntimeName", "name version")  # the worker's runtime, as records name it
_lock = threading.Lock()
_opening = threading.Lock()  # held while a model is opened: a second pipeline shares the first's
_workers: Dict[str, List[Supervisor]] = {}  # device as asked -> the workers of the run on it


class IsolatedEngine:
    """An engine whose interpreter lives in a worker process (supervisor.py watches it); its
    model is number `number` of the worker's."""

    interpreter = None  # nothing of the runtime lives here: it is the worker's

    def __init__(self, supervisor: Supervisor, number: int, model: TfliteModel, requested: str) -> None:
        self.supervisor, self.number, self.model = supervisor, number, model
        self._last = supervisor.models[number].describe
        d = self._describe
        self.inputs: List[dict] = d["inputs"]
        self.input = self.inputs[0]
        self.outputs: List[dict] = d["outputs"]
        self.input_shape: Tuple[int, ...] = tuple(int(x) for x in self.input["shape"])
        self.input_dtype = np.dtype(self.input["dtype"])
        scale, zero = self.input.get("quantization", (0.0, 0))
        self.input_quantization: Tuple[float, int] = (float(scale), int(zero))
        self.requested_model = requested
        self.notice: Optional[str] = d["notice"]
        self._pending: Optional[np.ndarray] = None
        self._closed = False
        self._finalizer = weakref.finalize(self, _release, supervisor, number)

    @property
    def _describe(self) -> ModelDescription:
        """What the model runs as now (the CPU twin's while it has taken over)."""
        model = self.supervisor.models.get(self.number)
        if model is not None:
            self._last = model.describe
        return self._last

    # what changes when the CPU twin takes over, read from the worker that runs now
    @property
    def device(self) -> str:
        return self._describe["device"]

    @property
    def name(self) -> str:
        return self._describe["name"]

    @property
    def model_path(self) -> str:
        return self._describe["model_path"]

    @property
    def cpu_kernels(self) -> str:
        return self._describe["cpu_kernels"]

    @property
    def runtime(self) -> Any:
        name, version = self._describe["runtime"]
        return RuntimeName(name, version)

    @property
    def pid(self) -> int:
        """The worker process's id (it changes when the worker is replaced)."""
        return self.supervisor.pid
    def run(self, tensor: np.ndarray) -> List[np.ndarray]:
        """Invoke on one input tensor in the worker; copies of all raw outputs."""
        return self.run_all([tensor])

    def run_all(self, tensors: list) -> List[np.ndarray]:
        """Invoke with one tensor per input, in input order (model segments take several)."""
        if len(tensors) != len(self.inputs):
            raise InvalidModel(f"{self.model_path} takes {len(self.inputs)} input(s), not {len(tensors)}")
        for detail, tensor in zip(self.inputs, tensors):
            want = np.dtype(detail["dtype"])
            size = int(np.prod(detail["shape"]))
            if tensor.dtype != want or tensor.size != size:
                raise InvalidModel(f"{self.runtime.name} {self.runtime.version} cannot run "
                                   f"{self.model_path}: got a {tensor.dtype} tensor of shape "
                                   f"{tuple(tensor.shape)} for input {detail.get('name', '')!r} "
                                   f"({want}, {tuple(int(d) for d in detail['shape'])})")
        return self.supervisor.run(self.number, tensors)

    def set_input(self, tensor: np.ndarray) -> None:
        """Keep one input for `invoke` (bench runs it again and again)."""
        self._pending = tensor

    def invoke(self) -> None:
        if self._pending is None:
            raise InvalidModel(f"{self.model_path}: invoke before any input was set")
        self.run(self._pending)

    def release(self) -> None:
        """This engine is done: its model is closed once no engine uses it, the worker with its
        last model."""
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._finalizer()
            if self.supervisor.device == "cpu":  # the workers left may all be one-thread now
                _keep_replicas_apart()


def _release(supervisor: Supervisor, number: int) -> None:
    if supervisor.release(number):  # its last model: the worker has ended
        with _lock:
            workers = _workers.get(supervisor.device, [])
            if supervisor in workers:
                workers.remove(supervisor)
            if not workers:
                _workers.pop(supervisor.device, None)


def _candidates(device: str, path: str, options: Options) -> List[Supervisor]:
    """The workers a model may join: the device's one (an Edge TPU is owned by one process); on
    the CPU, those that do not run this model yet."""
    with _lock:
        alive = [s for s in _workers.get(device, []) if not s.closed]
    if device == "cpu":
        return [s for s in alive if not s.holds(path, options)]
    return alive[:1]


def _keep_replicas_apart() -> None:
    """One-thread CPU workers (the replicas of `cpu_runner`), two or more, are each kept on a
    core none of the others holds. Left to the scheduler, two workers' wake-ups often land on
    one core while the other idles (7-17% of the machine idle, against 1% in-process): pinned,
    a batch on MobileNet V2 keeps 0.95 of in-process throughput instead of 0.87
    (docs/recovery.md). A lone one floats (another process's may hold the same core); beyond
    the cores, the rest float; a worker a model of several threads joins floats again. An Edge
    TPU's worker (and its CPU twin) is never pinned: its invokes wait on the device."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return
    with _lock:
        alive = [s for s in _workers.get("cpu", []) if not s.closed]
    one_thread = [s for s in alive
                  if s.models and all(m.options.threads == 1 for m in list(s.models.values()))]
    for sup in alive:
        if sup.core is not None and sup not in one_thread:
            sup.pin(None, set(cores))
    if len(one_thread) < 2 or len(cores) < 2:
        return
    free = [c for c in cores if c not in {s.core for s in one_thread}]
    for sup in one_thread:
        if sup.core is None and free:
            sup.pin(free.pop(0))


def open_isolated(model: TfliteModel, device: str, options: Options, *, requested: str,
                  trust_model: bool = False, twin: bool = False,
                  ops: Optional[HardwareOps] = None) -> IsolatedEngine:
    """An engine for `model` on `device` in a worker: the run's worker for that device when
    there is one already (the model opened in it, or shared when it runs there already), else a
    new one. `twin`: the model's CPU twin may take over when the ladder cannot bring the Edge TPU
    back (`auto`)."""
    share = device != "cpu"
    with _opening:  # two pipelines opening at once: the second waits and joins the first's
        for sup in _candidates(device, model.path, options):
            number = sup.add(model.path, options, trust_model=trust_model, twin=twin, share=share)
            if number is not None:
                if device == "cpu":
                    _keep_replicas_apart()
                return IsolatedEngine(sup, number, model, requested)
        sup = Supervisor(device, options, ops=ops)
        try:
            number = sup.add(model.path, options, trust_model=trust_model, twin=twin, share=share)
        except BaseException:
            sup.close()
            raise
        assert number is not None
        with _lock:
            _workers.setdefault(device, []).append(sup)
        if device == "cpu":
            _keep_replicas_apart()
        return IsolatedEngine(sup, number, model, requested)
