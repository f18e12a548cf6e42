"""An ONNX file read and made convertible before TensorFlow loads: one image input, batch 1,
static spatial size, the layout named, every operator one onnx2tf can map, memory enough.

Needs only the `onnx` package (seconds before TensorFlow's import): bad files, a missing extra
and unconvertible graphs are said at once, with the operator and node named.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from edgeapp.errors import ConvertError, InvalidModel, MissingDependency, UsageError
from edgeapp.hw.hostinfo import available_memory

INSTALL = "pip install 'edgeapp[onnx]'"
IMAGE_CHANNELS = (1, 3)
# What converting takes besides the model: TensorFlow, onnx2tf, ONNX Runtime and the converter
# (measured: MobileNetV2 peaks at ~1.6 GB), and per weight byte: the ONNX graph, onnx2tf's
# copy, the TensorFlow graph, the SavedModel and the converter's own copies.
BASE_MEMORY = 1_500_000_000
MEMORY_PER_WEIGHT_BYTE = 12


@dataclass
class OnnxInput:
    """The model's one input as edgeapp feeds it: batch 1, NHWC pixels in, whatever the file had."""

    name: str
    dims: list  # as in the file: ints and symbolic names
    layout: str  # "NCHW" or "NHWC"
    height: int
    width: int
    channels: int
    notes: list = field(default_factory=list)

    @property
    def static_dims(self) -> list:
        if self.layout == "NCHW":
            return [1, self.channels, self.height, self.width]
        return [1, self.height, self.width, self.channels]


def onnx_module():
    """The `onnx` package, or exit 7 with the install line."""
    try:
        import onnx
    except ImportError:
        raise MissingDependency(f"converting ONNX models needs the onnx extra: {INSTALL}") from None
    return onnx


def onnx2tf_ops_folder() -> Path:
    """Where onnx2tf keeps one converter module per ONNX operator (found without importing
    onnx2tf, which imports TensorFlow)."""
    try:
        spec = importlib.util.find_spec("onnx2tf")
    except (ImportError, ValueError):  # a broken or blocked installation
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependency(f"converting ONNX models needs onnx2tf: {INSTALL}")
    return Path(list(spec.submodule_search_locations)[0]) / "ops"


def read_onnx(path: Path):
    """The parsed ModelProto (external weights loaded), or a one-line InvalidModel (exit 4)."""
    onnx = onnx_module()
    if not path.exists():
        raise InvalidModel(f"model not found: {path}")
    if not path.is_file():
        raise InvalidModel(f"{path}: not a file")
    check_memory(path)
    try:
        model = onnx.load(str(path))
    except MemoryError:
        raise ConvertError(f"{path}: not enough memory to read this model") from None
    except Exception as e:  # DecodeError, OSError for missing external data, ValueError...
        raise InvalidModel(f"{path}: not a readable ONNX model ({_one_line(e)})") from None
    if not model.graph.node:
        raise InvalidModel(f"{path}: not an ONNX model (no graph nodes)")
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # ValidationError
        raise InvalidModel(f"{path}: invalid ONNX model ({_one_line(e)})") from None
    return model


def check_memory(path: Path, available: Optional[int] = None) -> None:
    """Refuse (exit 6) a model whose conversion would not fit in memory, before trying."""
    size = path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob(f"{path.stem}*.data"))
    need = BASE_MEMORY + MEMORY_PER_WEIGHT_BYTE * size
    free = available if available is not None else available_memory()
    if free is not None and need > free:
        raise ConvertError(f"{path}: model too big for this machine's memory: converting "
                           f"{size / 1e6:.0f} MB of weights needs about {need / 1e9:.1f} GB, "
                           f"{free / 1e9:.1f} GB available; convert on a larger machine")


def image_input(model, input_size: Optional[tuple], path: Path) -> OnnxInput:
    """The one image input: 4-D float, 1 or 3 channels, batch fixed to 1, symbolic height and
    width given by --input-size."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise ConvertError(f"{path}: {len(inputs)} inputs ({', '.join(i.name for i in inputs)}); "
                           "edgeapp converts models with one image input")
    inp = inputs[0]
    t = inp.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
    if t.elem_type != 1 or len(dims) != 4:  # 1 = FLOAT
        raise ConvertError(f"{path}: input {inp.name!r} is not an image (shape {dims}, "
                           f"{_elem_type(t.elem_type)}); edgeapp converts models taking one float "
                           "image [1, C, H, W] or [1, H, W, C]")
    layout = _layout(dims)
    if layout is None:
        raise ConvertError(f"{path}: input {inp.name!r} with shape {dims} is not an image with 1 or 3 "
                           "channels")
    c_axis, h_axis, w_axis = (1, 2, 3) if layout == "NCHW" else (3, 1, 2)
    notes = []
    if dims[0] != 1:
        notes.append(f"batch {dims[0]} fixed to 1")
    hw = (dims[h_axis], dims[w_axis])
    if not all(isinstance(d, int) and d > 0 for d in hw):
        if input_size is None:
            raise UsageError(f"{path}: input {inp.name!r} has symbolic height/width {list(hw)}; give "
                             "--input-size HxW (the size the model was trained at)")
        notes.append(f"height and width {list(hw)} fixed to {input_size[0]}x{input_size[1]}")
        hw = input_size
    elif input_size is not None and tuple(hw) != tuple(input_size):
        raise UsageError(f"--input-size {input_size[0]}x{input_size[1]}: the model's input is fixed at "
                         f"{hw[0]}x{hw[1]}")
    if layout == "NCHW":
        notes.append("NCHW input: the TFLite model takes NHWC images")
    return OnnxInput(inp.name, dims, layout, int(hw[0]), int(hw[1]), int(dims[c_axis]), notes)


def _layout(dims: list) -> Optional[str]:
    if dims[1] in IMAGE_CHANNELS:
        return "NCHW"
    if dims[3] in IMAGE_CHANNELS:
        return "NHWC"
    return None


def _elem_type(code: int) -> str:
    onnx = onnx_module()
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(code).name
    except Exception:  # an unknown code in a damaged file
        return f"type {code}"


def unmappable_ops(model, ops_folder: Path) -> list[tuple]:
    """(op_type, node name) of nodes onnx2tf has no converter for, in graph order."""
    bad = []
    for i, node in enumerate(model.graph.node):
        domain_ok = node.domain in ("", "ai.onnx")
        if not domain_ok or not (ops_folder / f"{node.op_type}.py").is_file():
            op = node.op_type if domain_ok else f"{node.domain}.{node.op_type}"
            bad.append((op, node.name or f"#{i}"))
    return bad


def refuse_unmappable(model, path: Path) -> None:
    bad = unmappable_ops(model, onnx2tf_ops_folder())
    if bad:
        op, node = bad[0]
        others = ", ".join(sorted({b[0] for b in bad[1:]}))
        more = f" (and {len(bad) - 1} more node(s): {others})" if len(bad) > 1 else ""
        raise ConvertError(f"{path}: operator {op} (node {node!r}) cannot be converted by onnx2tf{more}; "
                           "replace it in the source model and export again")


def fixed_model(model, inp: OnnxInput):
    """A copy with the input at batch 1 and static size, and shapes inferred again, so that
    ONNX Runtime and onnx2tf both see the graph the Edge TPU will run."""
    onnx = onnx_module()
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    batch_name = inp.dims[0] if isinstance(inp.dims[0], str) else None
    for i in fixed.graph.input:
        if i.name == inp.name:
            for d, v in zip(i.type.tensor_type.shape.dim, inp.static_dims):
                d.Clear()
                d.dim_value = v
    for o in fixed.graph.output:
        dims = o.type.tensor_type.shape.dim
        if dims and (dims[0].dim_param == batch_name and batch_name or dims[0].dim_value > 1):
            dims[0].Clear()
            dims[0].dim_value = 1
    del fixed.graph.value_info[:]
    try:
        return onnx.shape_inference.infer_shapes(fixed)
    except Exception:  # inference is a help, not a requirement: onnx2tf infers again
        return fixed


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return (text[:200] + "...") if len(text) > 200 else (text or type(e).__name__)
