"""`IsolatedEngine`: the engine the main process sees when the model runs in a worker. It
declares what every engine declares (hw/runtime.py: inputs, outputs, the input's shape, dtype
and quantization, the model, the device, `run`), so runners, tasks and bench use it unchanged.

Every engine of a run opened on the same Edge TPU with the same model shares one worker
(`open_isolated` keeps them by (model, device, options)); the worker ends when the last of them
is closed or collected. On the CPU each engine gets its own worker (the replicas of a CPU run
work side by side).
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

# hw/runtime.EngineOptions (not imported: hw/runtime opens the worker, not the other way)
Options = Any

if TYPE_CHECKING:
    from edgeapp.core.tflite.model import TfliteModel
    from edgeapp.hw.recovery import HardwareOps

RuntimeName = namedtuple("RuntimeName", "name version")  # the worker's runtime, as records name it
_lock = threading.Lock()
_opening = threading.Lock()  # held while a shared worker starts
_shared: Dict[tuple, Tuple[Supervisor, int]] = {}  # key -> (supervisor, engines using it)


class IsolatedEngine:
    """An engine whose interpreter lives in a worker process (supervisor.py watches it)."""

    interpreter = None  # nothing of the runtime lives here: it is the worker's

    def __init__(self, supervisor: Supervisor, model: TfliteModel, requested: str,
                 key: Optional[tuple]) -> None:
        self.supervisor, self.model, self._key = supervisor, model, key
        d = supervisor.describe
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
        self._finalizer = weakref.finalize(self, _release, key, supervisor)

    # what changes when the CPU twin takes over, read from the worker that runs now
    @property
    def device(self) -> str:
        return self.supervisor.describe["device"]

    @property
    def name(self) -> str:
        return self.supervisor.describe["name"]

    @property
    def model_path(self) -> str:
        return self.supervisor.describe["model_path"]

    @property
    def cpu_kernels(self) -> str:
        return self.supervisor.describe["cpu_kernels"]

    @property
    def runtime(self) -> Any:
        name, version = self.supervisor.describe["runtime"]
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
        return self.supervisor.run(tensors)

    def set_input(self, tensor: np.ndarray) -> None:
        """Keep one input for `invoke` (bench runs it again and again)."""
        self._pending = tensor

    def invoke(self) -> None:
        if self._pending is None:
            raise InvalidModel(f"{self.model_path}: invoke before any input was set")
        self.run(self._pending)

    def release(self) -> None:
        """This engine is done: its worker ends once no engine uses it."""
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._finalizer()


def _release(key: Optional[tuple], supervisor: Supervisor) -> None:
    with _lock:
        if key is not None and key in _shared and _shared[key][0] is supervisor:
            sup, users = _shared[key]
            if users > 1:
                _shared[key] = (sup, users - 1)
                return
            del _shared[key]
    supervisor.close()  # the last user; or one given up and replaced (closed already)


def open_isolated(model: TfliteModel, device: str, options: Options, *, requested: str,
                  trust_model: bool = False, twin: bool = False,
                  ops: Optional[HardwareOps] = None) -> IsolatedEngine:
    """An engine for `model` on `device` in a worker: the run's one worker for that Edge TPU
    and model when there is one already, else a new one. `twin`: the CPU twin may take over
    when the ladder cannot bring the Edge TPU back (`auto`)."""
    from dataclasses import astuple

    key = None if device == "cpu" else (os.path.realpath(model.path), device, astuple(options))
    if key is None:
        sup = Supervisor(model.path, device, options, trust_model=trust_model, twin=twin, ops=ops)
        return IsolatedEngine(sup, model, requested, key)
    with _opening:  # two pipelines opening at once: the second waits and shares the first's
        with _lock:
            if key in _shared and not _shared[key][0].closed:
                sup, users = _shared[key]
                _shared[key] = (sup, users + 1)
                return IsolatedEngine(sup, model, requested, key)
            _shared.pop(key, None)  # a worker given up (closed): a new one
        sup = Supervisor(model.path, device, options, trust_model=trust_model, twin=twin, ops=ops)
        with _lock:
            _shared[key] = (sup, 1)
        return IsolatedEngine(sup, model, requested, key)
