"""The hardware boundary: the one module that touches TFLite runtimes and the Edge TPU delegate.

Everything else works on numpy arrays. `open_engine` turns (model file, device string) into a
`TfliteEngine`: an allocated interpreter on the Edge TPU, or on the CPU with the model's CPU twin
when the Edge TPU cannot be used and the user asked for `auto`. `Engine` is what tasks and
runners read of any engine (this one, eval's float source, a segment pipeline seen as one model).

The runtimes' names (RUNTIMES) are what every command's --runtime offers, so importing this
module costs next to nothing: the model reader, the device parser and libedgetpu are imported
by the functions that use them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Tuple, Union

from typing_extensions import Protocol

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np

    from edgeapp.core.tflite.model import TfliteModel
    from edgeapp.core.vision.tiles import Tiles
    from edgeapp.hw.device_choice import DeviceSpec

from edgeapp.errors import DeviceFailed, DeviceUnavailable, InvalidModel, MissingDependency, UsageError
from edgeapp.hw.runtime_errors import (
    INSTALL,
    error_chain_text,
    numpy_mismatch,
    numpy_mismatch_text,
    runtime_error_text,
)

# CPU preference order: ai-edge-litert uses XNNPACK for int8 (3.8 ms vs 71 ms measured on
# MobileNetV2 with tflite-runtime 2.14), tflite-runtime is what 32-bit Raspberry Pi OS has.
RUNTIMES = ("ai-edge-litert", "tflite-runtime", "tensorflow")
RUNTIME_MODULES = {  # runtime name -> (module to import, attribute holding Interpreter)
    "ai-edge-litert": ("ai_edge_litert.interpreter", ""),
    "tflite-runtime": ("tflite_runtime.interpreter", ""),
    # `import tensorflow.lite` gives a stub package without Interpreter: only the attribute of
    # the imported `tensorflow` module (its public API) has it.
    "tensorflow": ("tensorflow", "lite"),
}
_DISTRIBUTIONS = {"ai-edge-litert": ("ai-edge-litert",), "tflite-runtime": ("tflite-runtime",),
                  "tensorflow": ("tensorflow", "tensorflow-cpu")}
# CPU kernels: "fast" is the runtime's default (ai-edge-litert applies XNNPACK); "reference" is
# the builtin op resolver without default delegates, whose int8 rounding is TFLite's reference
# rounding, as tflite-runtime and Coral's published CPU results have it (docs/choosing-a-device.md).
CPU_KERNELS = ("fast", "reference")


@dataclass(frozen=True)
class Runtime:
    """One importable TFLite runtime implementation."""

    name: str
    version: str
    module: Any

    def make_interpreter(self, model_path: str, delegates: Optional[list] = None,
                         threads: Optional[int] = None, cpu_kernels: str = "fast") -> Any:
        import warnings

        extra = {}
        if cpu_kernels == "reference":
            extra["experimental_op_resolver_type"] = self._reference_resolver()
        elif cpu_kernels != "fast":
            raise UsageError(f"unknown CPU kernels {cpu_kernels!r}; choose one of: "
                             f"{', '.join(CPU_KERNELS)}")
        with warnings.catch_warnings():  # tf.lite.Interpreter's deprecation notice, on every call
            warnings.filterwarnings("ignore", message=r"\s*Warning: tf\.lite\.Interpreter is deprecated")
            return self.module.Interpreter(model_path=model_path, experimental_delegates=delegates,
                                           num_threads=threads, **extra)

    def _reference_resolver(self) -> Any:
        kinds = getattr(self.module, "OpResolverType", None)
        if kinds is None:  # tensorflow.lite keeps it under experimental
            kinds = getattr(getattr(self.module, "experimental", None), "OpResolverType", None)
        kind = getattr(kinds, "BUILTIN_WITHOUT_DEFAULT_DELEGATES", None)
        if kind is None:
            raise MissingDependency(f"{self.name} {self.version} cannot choose its CPU kernels "
                                    "(--cpu-kernels reference needs ai-edge-litert, or "
                                    "tflite-runtime/TensorFlow 2.5 or newer)")
        return kind

    def load_delegate(self, library: str, options: dict) -> Any:
        load = getattr(self.module, "load_delegate", None)
        if load is None:  # tensorflow.lite keeps it under experimental
            load = self.module.experimental.load_delegate
        return load(library, options)


# Folders searched first for a runtime (os.pathsep-separated): one kept outside this Python's
# packages, e.g. `pip install --no-deps --target DIR ai-edge-litert==1.4.0` to pair that version
# with a given libedgetpu build without changing the environment (its dependencies, numpy first,
# come from the environment). Every command and the model check's child (`python -I`, which
# ignores PYTHONPATH) use it; the tests plant their stand-in runtimes there, in a venv or not.
RUNTIME_PATH_ENV = "EDGEAPP_RUNTIME_PATH"


def runtime_path(environ: Optional[Mapping[str, str]] = None) -> list[str]:
    """The folders of $EDGEAPP_RUNTIME_PATH, in order."""
    value = (os.environ if environ is None else environ).get(RUNTIME_PATH_ENV, "")
    return [folder for folder in value.split(os.pathsep) if folder]


def _runtime_path_first() -> None:
    """Put $EDGEAPP_RUNTIME_PATH's folders first on sys.path (once each), before a runtime is
    looked for, imported or its version read."""
    missing = [folder for folder in runtime_path() if folder not in sys.path]
    if missing:
        sys.path[:0] = missing
        importlib.invalidate_caches()


def available_runtimes() -> list[str]:
    """Runtimes that are installed, without importing them."""
    _runtime_path_first()
    return [n for n in RUNTIMES
            if importlib.util.find_spec(RUNTIME_MODULES[n][0].split(".")[0]) is not None]


def import_runtime(name: str) -> Any:
    """The module object holding `Interpreter` for runtime `name`; ImportError when it has none."""
    module_name, attribute = RUNTIME_MODULES[name]
    _runtime_path_first()
    if name == "tensorflow" and module_name not in sys.modules:
        from edgeapp.hw.native_stderr import filtered_native_stderr

        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # its start-up chatter is not ours
        with filtered_native_stderr():  # what it writes to fd 2 before absl starts, too
            importlib.import_module(module_name)
    module = importlib.import_module(module_name)
    for part in filter(None, attribute.split(".")):
        module = getattr(module, part, None)
        if module is None:
            raise ImportError(f"{module_name} has no {attribute}")
    if not hasattr(module, "Interpreter"):
        raise ImportError(f"{module_name}{'.' + attribute if attribute else ''} has no Interpreter")
    return module


def runtime_import_code(name: str) -> str:
    """Python source that imports runtime `name` as `import_runtime` does (for a child process
    that must not import edgeapp itself, e.g. doctor's isolated import checks), with
    $EDGEAPP_RUNTIME_PATH first on its sys.path."""
    module_name, attribute = RUNTIME_MODULES[name]
    target = ".".join(filter(None, [module_name, attribute]))
    folders = runtime_path()
    first = f"import sys; sys.path[:0] = {folders!r}; " if folders else ""
    return f"{first}import {module_name}; {target}.Interpreter"


def find_runtime(name: Optional[str] = None) -> Runtime:
    """The requested runtime, or the best installed one."""
    if name is not None and name not in RUNTIMES:
        raise UsageError(f"unknown runtime {name!r}; choose one of: {', '.join(RUNTIMES)}")
    broken = None
    for candidate in [name] if name else RUNTIMES:
        try:
            module = import_runtime(candidate)
        except ImportError as e:
            if candidate in available_runtimes():
                if name and numpy_mismatch(error_chain_text(e)):
                    raise MissingDependency(numpy_mismatch_text(name, runtime_version(name))) from None
                broken = f"{candidate} {runtime_version(candidate)} is installed but does not import: {e}"
            continue
        return Runtime(candidate, _imported_version(module) or runtime_version(candidate), module)
    if name and broken:
        raise MissingDependency(f"{broken} (pip install --force-reinstall {_DISTRIBUTIONS[name][0]})")
    if name:
        raise MissingDependency(f"runtime {name!r} is not installed ({INSTALL[name]})")
    raise MissingDependency("no TFLite runtime installed: pip install ai-edge-litert "
                            "(or tflite-runtime on 32-bit ARM)")


def _imported_version(module: ModuleType) -> Optional[str]:
    """The version an imported runtime states itself (its top package's __version__), which
    costs nothing where the distribution's metadata costs a scan of every site folder."""
    top = sys.modules.get(module.__name__.split(".")[0])
    version = getattr(top, "__version__", None)
    return version if isinstance(version, str) and version else None


def runtime_version(name: str) -> str:
    """The installed version of a runtime's distribution, without importing it."""
    _runtime_path_first()
    from edgeapp.core.compat import metadata

    for dist in _DISTRIBUTIONS[name]:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def load_edgetpu_delegate(runtime: Runtime, spec: DeviceSpec, extra: Optional[dict] = None) -> Any:
    """Load the Edge TPU delegate or raise DeviceUnavailable with a short reason and the fix.
    `extra`: more libedgetpu options (`Performance`, ...: device_choice.tuned)."""
    from edgeapp.hw.libedgetpu import EDGETPU_LIB_ENV, edgetpu_library, explain_load_error, open_library

    library = edgetpu_library()
    options = {"device": spec.option} if spec.option else {}
    options.update(extra or {})
    try:
        if runtime.name == "tflite-runtime" and not os.environ.get(EDGETPU_LIB_ENV):
            try:  # Google's pycoral, when installed, knows its own library
                from pycoral.utils import edgetpu as coral  # type: ignore
                return coral.load_edgetpu_delegate(options)
            except ImportError:
                pass
        open_library(library)  # fail here, not half-way through the runtime's Delegate object
        return runtime.load_delegate(library, options)
    except OSError as e:
        raise DeviceUnavailable(explain_load_error(str(e), library)) from None
    except ValueError as e:  # "Failed to load delegate from libedgetpu.so.1"
        where = f" at {spec.option}" if spec.option else ""
        reason = " ".join(str(e).split())  # the runtime's message spans lines
        raise DeviceUnavailable(f"no Edge TPU found{where} ({reason}); plug it in, check `edgeapp devices` "
                                "and that your user may access it (udev rule, plugdev group)") from None


class Engine(Protocol):
    """What tasks and runners read of an opened model, whatever runs it: `TfliteEngine` (a
    .tflite on the Edge TPU or the CPU), eval's float source (flows/sources/float_engine.py) and
    a segment pipeline seen as one model (execution/pipeline.PipelineView) declare it."""

    inputs: List[dict]  # the runtime's tensor details: index, shape, dtype, quantization
    input: dict  # inputs[0]
    outputs: List[dict]
    input_shape: Tuple[int, ...]  # checked on every run
    input_dtype: np.dtype
    input_quantization: Tuple[float, int]  # (scale, zero point); (0.0, 0) when float
    model: TfliteModel  # the graph read (operators, tensors); a float source: its path only
    model_path: str  # the file that runs (a CPU twin, a segment set's label)
    requested_model: str  # the file asked for: where labels and the sidecar are looked up
    device: str  # "edgetpu" or "cpu"
    name: str  # the device as records name it: usb:1, edgetpu (any), cpu, float on ...
    notice: Optional[str]  # one line for stderr: why it runs where it runs
    cpu_kernels: str  # CPU_KERNELS, or "float"

    def run(self, tensor: np.ndarray) -> List[np.ndarray]:
        """The raw outputs of one input tensor."""


@dataclass
class TfliteEngine(Engine):
    """An allocated interpreter and what it runs: the thing pipelines call `run` on."""

    interpreter: Any
    model: TfliteModel
    device: str  # "edgetpu" or "cpu"
    runtime: Runtime
    requested_model: str
    notice: Optional[str] = None  # one line for stderr: why we run where we run
    cpu_kernels: str = "fast"  # CPU_KERNELS: the kernels of the ops the CPU runs
    name: str = ""  # the device as records name it: usb:1, edgetpu (any), cpu; "": `device`

    def __post_init__(self) -> None:
        import numpy as np

        self.inputs = self.interpreter.get_input_details()
        self.input = self.inputs[0]
        self.outputs = self.interpreter.get_output_details()
        self.model_path: str = self.model.path
        self.input_shape: "tuple[int, ...]" = tuple(int(d) for d in self.input["shape"])  # checked on every run
        self.input_dtype: "np.dtype" = np.dtype(self.input["dtype"])
        scale, zero = self.input.get("quantization", (0.0, 0))
        self.input_quantization: "tuple[float, int]" = (float(scale), int(zero))
        if not self.name:
            self.name = self.device

    def set_input(self, tensor: "np.ndarray") -> None:
        """Copy one input tensor in, for `invoke` to run on (again and again, as bench does)."""
        if tensor.shape != self.input_shape:
            tensor = tensor.reshape(self.input_shape)
        try:
            self.interpreter.set_tensor(self.input["index"], tensor)
        except (RuntimeError, ValueError) as e:
            raise self._refusal(e) from None

    def invoke(self) -> None:
        """Run the model on the input already set: the bare call that benchmarks time.

        An Edge TPU that fails here (unplugged, delegate error) raises DeviceFailed, so a
        multi-TPU run can hand its work to the others. On the CPU, the runtime's refusal at
        invoke time (a kernel's parameter check, an input it cannot take) is the model's fault:
        InvalidModel with the runtime's own words.
        """
        try:
            self.interpreter.invoke()
        except (RuntimeError, ValueError) as e:
            if self.device != "edgetpu":
                if isinstance(e, RuntimeError):
                    raise self._refusal(e) from None
                raise
            reason = " ".join(runtime_error_text(e).split()) or type(e).__name__
            reason = reason.split("Node number")[0].strip() or reason
            raise DeviceFailed(f"Edge TPU {self.name} failed: {reason}", self.name) from None

    def run(self, tensor: "np.ndarray") -> "list[np.ndarray]":
        """Invoke on one input tensor; return copies of all raw outputs."""
        self.set_input(tensor)
        self.invoke()
        return [self.interpreter.get_tensor(o["index"]) for o in self.outputs]

    def run_all(self, tensors: list) -> "list[np.ndarray]":
        """Invoke with one tensor per input, in input order (model segments take several)."""
        if len(tensors) != len(self.inputs):
            raise InvalidModel(f"{self.model_path} takes {len(self.inputs)} input(s), not {len(tensors)}")
        for detail, tensor in zip(self.inputs, tensors):
            shape = tuple(int(d) for d in detail["shape"])
            self.interpreter.set_tensor(detail["index"], tensor.reshape(shape))
        self.invoke()
        return [self.interpreter.get_tensor(o["index"]) for o in self.outputs]

    def release(self) -> None:
        """Let go of the interpreter and its delegate, so libedgetpu closes the device: an engine
        whose Edge TPU failed, before the same device is opened again (execution/reconnect.py)."""
        import gc

        self.interpreter = None
        gc.collect()

    def _refusal(self, error: BaseException) -> InvalidModel:
        return InvalidModel(f"{self.runtime.name} {self.runtime.version} cannot run "
                            f"{self.model.path}: {runtime_error_text(error)}")


@dataclass(frozen=True)
class EngineOptions:
    """How every engine of a run is opened, whatever device it lands on: what --cpu-model,
    --runtime, --threads, --no-probe, --cpu-kernels, --performance, --usb-queue and
    --cocompiled-check say. One value travels from the command (or the API) through placement
    down to `open_engine`; plain data, so the cluster ships it to its workers."""

    cpu_model: Optional[str] = None  # a compiled model's CPU twin (default: X.tflite beside it)
    runtime: Optional[str] = None  # one of RUNTIMES; None: the best installed
    threads: Optional[int] = None  # interpreter threads; None: the runtime's default
    probe: bool = True  # try the (runtime, libedgetpu) pair in a child process first
    cpu_kernels: str = "fast"  # one of CPU_KERNELS
    performance: Optional[str] = None  # libedgetpu's Performance: low, medium, high, max
    usb_queue: Optional[int] = None  # libedgetpu's Usb.MaxBulkInQueueLength
    # the engine in a worker process (hw/worker/): None = whenever an Edge TPU is used
    isolate: Optional[bool] = None
    invoke_timeout: Optional[float] = None  # seconds; None: p99 of the latencies x 10, >= 1 s
    recover: str = "reset"  # how far the recovery ladder climbs (hw/worker.RECOVER)
    retry_tpu: float = 60.0  # seconds between tries of a lost Edge TPU while its CPU twin runs
    cocompiled_check: str = "warn"  # a co-compiled model vs its CPU twin: warn|strict|off (hw/cocompiled.py)


def open_engine(path: str | Path | TfliteModel, device: str = "auto",
                options: Optional[EngineOptions] = None, *, trust_model: bool = False,
                **settings: object) -> TfliteEngine:
    """Validate the model, pick the device, and return an allocated Engine.

    auto: Edge TPU when a compiled model and a TPU are there, else the CPU (the CPU twin for a
    compiled model). An explicit TPU device never falls back: it raises DeviceUnavailable.
    Containment (probe.py): no model reaches the runtime here before a child process has built,
    allocated and invoked it once (cached by content hash), so a file that crashes the runtime
    is refused with one line instead of killing us; trust_model (or EDGEAPP_TRUST_MODEL=1)
    skips that. options.probe: first try the (runtime, Edge TPU library) pair in a child, so a
    mismatched build that segfaults is reported instead of killing us.
    A parsed `TfliteModel` may be passed instead of a path, so callers that already read it don't
    read it again.
    `options` (EngineOptions), with `settings` (its fields by name, e.g. `threads=1`) replacing
    some: cpu_kernels "fast" (the runtime's default) or "reference" (see CPU_KERNELS);
    performance (low|medium|high|max) and usb_queue (Usb.MaxBulkInQueueLength) go to libedgetpu
    with the device indexed (device_choice.tuned); max with a std build on USB is refused.
    """
    from edgeapp.core.naming import edgetpu_twin_path
    from edgeapp.core.tflite.model import TfliteModel, load_model
    from edgeapp.hw.device_choice import parse_device, tuned, wants_worker

    o = replace(options or EngineOptions(), **settings)
    cpu_model, threads, cpu_kernels = o.cpu_model, o.threads, o.cpu_kernels
    spec = parse_device(device)
    model = path if isinstance(path, TfliteModel) else load_model(path)
    path = model.path if isinstance(path, TfliteModel) else path
    if wants_worker(o.isolate, spec.kind, model.is_edgetpu_compiled):
        from edgeapp.hw.worker.engine import open_isolated

        return open_isolated(model, device, o, requested=str(path), trust_model=trust_model,
                             twin=spec.kind == "auto" and model.is_edgetpu_compiled)
    rt = find_runtime(o.runtime)
    if spec.kind != "cpu" and model.is_edgetpu_compiled:
        spec, extra = tuned(spec, o.performance, o.usb_queue)
        try:
            if o.probe:
                from edgeapp.hw.probe import ensure_probed
                ensure_probed(rt, spec, model.path, lambda: load_edgetpu_delegate(rt, spec, extra),
                              check_model=not trust_model)
            delegate = load_edgetpu_delegate(rt, spec, extra)
            interpreter = _interpreter(rt, model, [delegate], threads, cpu_kernels)
        except DeviceUnavailable as e:
            if spec.kind == "edgetpu":
                raise
            twin = _load_twin(model, cpu_model)
            return _cpu_engine(rt, twin, threads, str(path),
                               f"Edge TPU unavailable ({e}); running {Path(twin.path).name} on CPU",
                               cpu_kernels, trust_model)
        return TfliteEngine(interpreter, model, "edgetpu", rt, str(path), cpu_kernels=cpu_kernels,
                            name=spec.option or "edgetpu")
    if spec.kind == "edgetpu":  # the arguments ask the impossible, whatever is plugged in: exit 2
        compiled = edgetpu_twin_path(model.path)
        fix = (f"pass its compiled build {compiled}" if compiled.is_file()
               else f"run `edgeapp compile {model.path}` first")
        raise UsageError(f"{model.path} is not compiled for the Edge TPU, so --device {spec.text} "
                         f"cannot run it: {fix}, or use --device cpu")
    if model.is_edgetpu_compiled:  # --device cpu with a compiled model
        twin = _load_twin(model, cpu_model)
        return _cpu_engine(rt, twin, threads, str(path),
                           f"--device cpu: running {Path(twin.path).name} (CPU twin) on CPU",
                           cpu_kernels, trust_model)
    note = None if spec.kind == "cpu" else \
        f"running {Path(model.path).name} on CPU (not compiled for the Edge TPU)"
    return _cpu_engine(rt, model, threads, str(path), note, cpu_kernels, trust_model)


def _load_twin(model: TfliteModel, cpu_model: Optional[str | Path]) -> TfliteModel:
    from edgeapp.core.naming import cpu_twin_path
    from edgeapp.core.tflite.model import load_model

    twin_path = Path(cpu_model) if cpu_model else cpu_twin_path(model.path)
    if twin_path.exists() and twin_path.resolve() == Path(model.path).resolve():
        raise UsageError(f"--cpu-model {twin_path} is the compiled model itself; pass the uncompiled "
                         "model it was compiled from")
    if not twin_path.exists():
        raise DeviceUnavailable(f"{Path(model.path).name} needs the Edge TPU, which is unavailable, and "
                                f"its CPU twin {twin_path} was not found; pass --cpu-model PATH")
    twin = load_model(twin_path)
    if twin.is_edgetpu_compiled:
        raise InvalidModel(f"CPU twin {twin_path} is itself compiled for the Edge TPU; pass the "
                           "uncompiled model with --cpu-model")
    if _io_signature(twin) != _io_signature(model):
        raise InvalidModel(f"CPU twin {twin_path} does not match {Path(model.path).name}: inputs/outputs "
                           f"{_io_signature(twin)} vs {_io_signature(model)}; pass the model it was "
                           "compiled from with --cpu-model")
    return twin


def _io_signature(model: TfliteModel) -> list[tuple]:
    """What a twin must share with its compiled model: I/O shapes and types."""
    return [(list(t.shape), t.dtype) for t in model.input_tensors + model.output_tensors]


def _cpu_engine(rt: Runtime, model: TfliteModel, threads: Optional[int], requested: str,
                notice: Optional[str], cpu_kernels: str = "fast", trust_model: bool = False) -> TfliteEngine:
    if not trust_model:
        from edgeapp.hw.probe import ensure_model_runs
        ensure_model_runs(rt, model.path)
    return TfliteEngine(_interpreter(rt, model, None, threads, cpu_kernels), model, "cpu", rt, requested,
                        notice, cpu_kernels)


def _interpreter(rt: Runtime, model: TfliteModel, delegates: Optional[list], threads: Optional[int],
                 cpu_kernels: str = "fast") -> Any:
    from edgeapp.hw.native_stderr import collected_native_stderr

    native: list[str] = []
    try:
        with collected_native_stderr(native):
            interpreter = rt.make_interpreter(model.path, delegates, threads, cpu_kernels)
            interpreter.allocate_tensors()
    except (RuntimeError, ValueError, SystemError) as e:
        if numpy_mismatch(error_chain_text(e)) or numpy_mismatch(" ".join(native)):
            raise MissingDependency(numpy_mismatch_text(rt.name, rt.version)) from None
        if isinstance(e, SystemError):
            raise
        first = runtime_error_text(e, native)
        if delegates:
            raise DeviceUnavailable(f"Edge TPU rejected {model.path}: {first}") from None
        raise InvalidModel(f"{rt.name} {rt.version} cannot run {model.path}: {first}") from None
    return interpreter


def run_payload(engine: Engine, payload: "Union[np.ndarray, Tiles]") -> Any:
    """The model run on one payload: one input tensor, or the windows of one image (`--tiles`:
    core/vision/tiles.Tiles), each in turn on the same engine, their outputs as a list."""
    from edgeapp.core.vision.tiles import Tiles  # loaded once a run runs: not for --help

    if isinstance(payload, Tiles):
        return [engine.run(t) for t in payload.tensors]
    return engine.run(payload)
