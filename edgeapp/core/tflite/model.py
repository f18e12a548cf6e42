"""Read and validate a .tflite file without any TFLite runtime.

Native runtimes trust the file: tflite-runtime 2.14 segfaults on a truncated model. So every
model is walked here first, with every offset, vector and buffer checked against the file
size, and anything wrong becomes an `InvalidModel` with a one-line reason. The same walk
gives the graph (operators, tensors, quantization) that `check`, `bench` and the fallback use.
"""

from __future__ import annotations

import math
import mmap
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from edgeapp.core.compat import cached_property
from edgeapp.core.tflite.schema import BUILTIN_OPS, BUILTIN_OPTIONS, TENSOR_TYPES, option_slot
from edgeapp.errors import InvalidModel

EDGETPU_CUSTOM_OP = "edgetpu-custom-op"
_FILE_ID = b"TFL3"


class _Corrupt(Exception):
    """Internal: an offset or length points outside the file."""


class _Table:
    """A flatbuffer table whose every access is bounds-checked."""

    __slots__ = ("buf", "pos", "vt", "vt_len")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        _need(buf, pos, 4)
        vt = pos - struct.unpack_from("<i", buf, pos)[0]
        _need(buf, vt, 4)
        vt_len, _obj_len = struct.unpack_from("<HH", buf, vt)
        if vt_len < 4 or vt_len % 2:
            raise _Corrupt("bad vtable")
        _need(buf, vt, vt_len)
        self.pos, self.vt, self.vt_len = pos, vt, vt_len

    def _off(self, slot: int) -> int:
        o = 4 + 2 * slot
        if o >= self.vt_len:
            return 0
        return struct.unpack_from("<H", self.buf, self.vt + o)[0]

    def scalar(self, slot: int, fmt: str, default=0):
        o = self._off(slot)
        if not o:
            return default
        _need(self.buf, self.pos + o, struct.calcsize(fmt))
        return struct.unpack_from("<" + fmt, self.buf, self.pos + o)[0]

    def _indirect(self, slot: int) -> Optional[int]:
        o = self._off(slot)
        if not o:
            return None
        p = self.pos + o
        _need(self.buf, p, 4)
        return p + struct.unpack_from("<I", self.buf, p)[0]

    def table(self, slot: int) -> Optional["_Table"]:
        p = self._indirect(slot)
        return None if p is None else _Table(self.buf, p)

    def _vector(self, slot: int, elem: int) -> tuple[int, int]:
        p = self._indirect(slot)
        if p is None:
            return 0, 0
        _need(self.buf, p, 4)
        n = struct.unpack_from("<I", self.buf, p)[0]
        _need(self.buf, p + 4, n * elem)
        return p + 4, n

    def string(self, slot: int, strict: bool = False) -> Optional[str]:
        """strict: undecodable UTF-8 raises (runtimes decode tensor names and fail)."""
        if not self._off(slot):
            return None
        start, n = self._vector(slot, 1)
        return bytes(self.buf[start:start + n]).decode("utf-8", "strict" if strict else "replace")

    def scalars(self, slot: int, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        start, n = self._vector(slot, size)
        return struct.unpack_from(f"<{n}{fmt}", self.buf, start) if n else ()

    def bytes_span(self, slot: int) -> tuple[int, int]:
        return self._vector(slot, 1)

    def tables(self, slot: int) -> list["_Table"]:
        start, n = self._vector(slot, 4)
        out = []
        for i in range(n):
            p = start + 4 * i
            out.append(_Table(self.buf, p + struct.unpack_from("<I", self.buf, p)[0]))
        return out


def _need(buf: bytes, pos: int, n: int) -> None:
    if pos < 0 or n < 0 or pos + n > len(buf):
        raise _Corrupt(f"offset {pos}+{n} outside the file ({len(buf)} bytes)")


@dataclass(frozen=True)
class Quantization:
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    quantized_dimension: int = 0

    @property
    def per_tensor(self) -> tuple[float, int]:
        """(scale, zero_point) of a per-tensor quantized tensor, (0.0, 0) when absent."""
        if not self.scale:
            return 0.0, 0
        return self.scale[0], (self.zero_point[0] if self.zero_point else 0)


@dataclass(frozen=True)
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: int
    quantization: Optional[Quantization]
    data_size: int  # bytes of constant data, 0 for activations
    shape_signature: Optional[tuple[int, ...]] = None

    @property
    def is_constant(self) -> bool:
        return self.data_size > 0

    @property
    def has_dynamic_batch(self) -> bool:
        sig = self.shape_signature
        return bool(sig) and sig[0] == -1


@dataclass(frozen=True)
class Operator:
    index: int
    op: str  # builtin name (CONV_2D) or custom code (edgetpu-custom-op)
    builtin_code: Optional[int]  # None for custom operators
    version: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options_type: int = 0
    _options: Optional[_Table] = field(default=None, repr=False, compare=False)

    @property
    def is_custom(self) -> bool:
        return self.builtin_code is None

    def option(self, name: str, fmt: str = "b", default=0):
        """A scalar field of the builtin options table, by its schema.fbs name; `default` when
        the operator carries no such table (or one of another type)."""
        known = BUILTIN_OPTIONS.get(self.op)
        if self._options is None or known is None or self.options_type != known[0]:
            return default
        return self._options.scalar(option_slot(self.op, name), fmt, default)


@dataclass(frozen=True)
class TfliteModel:
    path: str
    size: int
    version: int
    description: str
    tensors: tuple[Tensor, ...]  # of the main subgraph
    operators: tuple[Operator, ...]  # of the main subgraph, in execution order
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    subgraph_count: int
    metadata: dict[str, bytes]
    # (name, tensor index) of the first signature's outputs, if the model has signatures
    signature_outputs: tuple[tuple[str, int], ...] = ()

    @property
    def input_tensors(self) -> list[Tensor]:
        return [self.tensors[i] for i in self.inputs]

    @property
    def output_tensors(self) -> list[Tensor]:
        return [self.tensors[i] for i in self.outputs]

    @cached_property
    def op_names(self) -> list[str]:
        return [o.op for o in self.operators]

    @property
    def is_edgetpu_compiled(self) -> bool:
        """Compiled by edgetpu_compiler: judged by the operators, never by the file name."""
        return EDGETPU_CUSTOM_OP in self.op_names

    @property
    def parameter_bytes(self) -> int:
        return sum(t.data_size for t in self.tensors)


def load_model(path: str | Path) -> TfliteModel:
    """Read and validate `path`; raise `InvalidModel` with a one-line reason."""
    return parse_model(map_model_file(path), str(path))


def map_model_file(path: str | Path):
    """The model file's bytes, memory-mapped: validation reads only the pages it walks.

    Only a regular file is a model: a FIFO would block forever and /dev/zero never ends, so
    they are refused before anything is read (opened non-blocking, then checked). A 2 GB
    file of zeros costs one page, not 2 GB of memory.
    """
    p = Path(path)
    _refuse_keras(p)
    if p.is_dir():
        raise InvalidModel(f"{p} is a folder, not a .tflite model file")
    try:
        fd = os.open(str(p), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise InvalidModel(f"model not found: {p}") from None
    except OSError as e:
        raise InvalidModel(f"cannot read model {p}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" \
                if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket" \
                if stat.S_ISSOCK(st.st_mode) else "not a regular file"
            raise InvalidModel(f"{p} is {kind}, not a .tflite model file")
        if st.st_size == 0:
            return b""
        head = os.pread(fd, 256, 0) if hasattr(os, "pread") else b""
        if head and (len(head) < 8 or head[4:8] != _FILE_ID):
            return head  # not a model: its first bytes say so (a 2 GB file of zeros costs 256 bytes)
        try:
            return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # a file system without mmap: read it, bounded by its size
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read(st.st_size)
    except OSError as e:
        raise InvalidModel(f"cannot read model {p}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _refuse_keras(p: Path) -> None:
    """A Keras model where a .tflite is expected: say what turns one into the other."""
    keras = p.suffix.lower() in (".keras", ".h5", ".hdf5") and p.is_file()
    if keras or (p.is_dir() and (p / "saved_model.pb").is_file()):
        kind = "a Keras model" if keras else "a TensorFlow SavedModel"
        raise InvalidModel(f"{p} is {kind}, not a .tflite model: convert it first, e.g. "
                           f"`edgeapp convert {p} -o {p.stem or 'model'}_int8.tflite --calibration "
                           "IMAGES/` (needs pip install 'edgeapp[convert]')")


def parse_model(data: bytes, name: str = "<bytes>") -> TfliteModel:
    """Validate and read a TFLite flatbuffer held in memory (bytes or a memory map)."""
    if not data:
        raise InvalidModel(f"{name} is empty (0 bytes): not a TFLite model")
    if len(data) < 8 or data[4:8] != _FILE_ID:
        hint = "; it looks like a text file" if _looks_like_text(data) else ""
        raise InvalidModel(f"{name} is not a TFLite model (no 'TFL3' file identifier{hint})")
    try:
        return _read(data, name)
    except _Corrupt as e:
        raise InvalidModel(f"{name} is truncated or corrupt ({e}); re-download or re-convert it") from None
    except (struct.error, UnicodeDecodeError, IndexError) as e:
        raise InvalidModel(f"{name} is corrupt ({e}); re-download or re-convert it") from None


def _looks_like_text(data: bytes) -> bool:
    head = data[:256]
    return all(32 <= b < 127 or b in b"\r\n\t" for b in head)


def _read(buf: bytes, name: str) -> TfliteModel:
    """The model of a flatbuffer, read in the file's order (so the first fault found is reported)."""
    root = _Table(buf, struct.unpack_from("<I", buf, 0)[0])
    version = root.scalar(0, "I")
    codes = _opcodes(root)
    buffers = _buffer_sizes(root, buf)
    subgraphs = root.tables(2)
    if not subgraphs:
        raise InvalidModel(f"{name} has no subgraph: not a usable TFLite model")
    sg = subgraphs[0]
    tensors = tuple(_tensor(t, i, buffers, name) for i, t in enumerate(sg.tables(0)))
    nt = len(tensors)
    operators = tuple(_operator(o, i, codes, nt) for i, o in enumerate(sg.tables(3)))
    if not operators:
        raise InvalidModel(f"{name} has no operators: not a usable TFLite model")
    inputs = _indices(sg.scalars(1, "i"), nt, "subgraph input")
    outputs = _indices(sg.scalars(2, "i"), nt, "subgraph output")
    if not inputs or not outputs or -1 in inputs or -1 in outputs:
        raise InvalidModel(f"{name} has no inputs or outputs: not a usable TFLite model")
    metadata = _metadata(root, buf, buffers)
    sig_outputs = _signature_outputs(root)
    return TfliteModel(path=name, size=len(buf), version=version, description=root.string(3) or "",
                 tensors=tensors, operators=operators, inputs=inputs,
                 outputs=outputs, subgraph_count=len(subgraphs), metadata=metadata,
                 signature_outputs=sig_outputs)


def _opcodes(root: _Table) -> list[tuple[int, Optional[str], int]]:
    """(builtin code, custom code, version) of every operator code."""
    codes = []
    for t in root.tables(1):
        deprecated = t.scalar(0, "b")
        builtin = max(t.scalar(3, "i"), deprecated)
        custom = t.string(1)
        codes.append((builtin, custom, t.scalar(2, "i", 1)))
    return codes


def _buffer_sizes(root: _Table, buf: bytes) -> list[int]:
    """The data size of every buffer, checked to lie inside the file."""
    buffers = []
    for t in root.tables(4):
        _start, n = t.bytes_span(0)
        off, size = t.scalar(1, "Q"), t.scalar(2, "Q")
        if off > 1:  # data stored outside the flatbuffer (models over 2 GB)
            _need(buf, off, size)
            n = size
        buffers.append(n)
    return buffers


def _tensor(t: _Table, i: int, buffers: list[int], name: str) -> Tensor:
    try:
        tensor_name = t.string(3, strict=True) or ""
    except UnicodeDecodeError:
        raise InvalidModel(f"{name}: tensor {i} has a name that is not UTF-8 text; the file is "
                           "corrupt: re-download or re-convert it") from None
    ttype = t.scalar(1, "b")
    if not 0 <= ttype < len(TENSOR_TYPES):
        raise _Corrupt(f"tensor {i} has unknown type {ttype}")
    bidx = t.scalar(2, "I")
    if buffers and bidx >= len(buffers):
        raise _Corrupt(f"tensor {i} refers to buffer {bidx} of {len(buffers)}")
    quant = _quantization(t.table(4), f"{name}: tensor {i} ({tensor_name or 'unnamed'})")
    shape = tuple(t.scalars(0, "i"))
    if any(d < 0 for d in shape):
        raise InvalidModel(f"{name}: tensor {i} has a negative dimension {list(shape)}")
    sig = t.scalars(7, "i")
    return Tensor(index=i, name=tensor_name, shape=shape, dtype=TENSOR_TYPES[ttype], buffer=bidx,
                  quantization=quant, data_size=buffers[bidx] if buffers else 0,
                  shape_signature=tuple(sig) if sig else None)


def _quantization(q: Optional[_Table], which: str) -> Optional[Quantization]:
    """A tensor's quantization; None without scales. A zero, negative or non-finite scale is
    refused (runtimes divide by it)."""
    if q is None:
        return None
    scale = q.scalars(2, "f")
    if not scale:
        return None
    if not all(math.isfinite(v) and v > 0 for v in scale):
        raise InvalidModel(f"{which} has an invalid quantization scale {_first_bad(scale)}; "
                           "re-convert the model")
    return Quantization(tuple(scale), tuple(q.scalars(3, "q")), q.scalar(6, "i"))


def _indices(values: tuple, nt: int, what: str) -> tuple[int, ...]:
    """Tensor indices, each a tensor of the subgraph or -1 (an optional operand left out)."""
    for v in values:
        if not -1 <= v < nt:
            raise _Corrupt(f"{what} refers to tensor {v} of {nt}")
    return tuple(values)


def _operator(o: _Table, i: int, codes: list[tuple[int, Optional[str], int]], nt: int) -> Operator:
    ci = o.scalar(0, "I")
    if ci >= len(codes):
        raise _Corrupt(f"operator {i} refers to opcode {ci} of {len(codes)}")
    builtin, custom, ver = codes[ci]
    if builtin == 32 and custom is not None:  # BuiltinOperator.CUSTOM
        op_name, code = custom, None
    else:
        op_name = BUILTIN_OPS[builtin] if 0 <= builtin < len(BUILTIN_OPS) else f"BUILTIN_{builtin}"
        code = builtin
    opts_type = o.scalar(3, "B")
    return Operator(index=i, op=op_name, builtin_code=code, version=ver,
                    inputs=_indices(o.scalars(1, "i"), nt, f"operator {i}"),
                    outputs=_indices(o.scalars(2, "i"), nt, f"operator {i}"),
                    options_type=opts_type, _options=o.table(4) if opts_type else None)


def _metadata(root: _Table, buf: bytes, buffers: list[int]) -> dict[str, bytes]:
    """Named metadata buffers (labels, TFLite metadata); one pointing past the buffers is skipped."""
    metadata = {}
    buffer_tables = root.tables(4) if buffers else []
    for m in root.tables(6):
        bidx = m.scalar(1, "I")
        if bidx < len(buffers):
            start, n = buffer_tables[bidx].bytes_span(0)
            metadata[m.string(0) or ""] = bytes(buf[start:start + n])
    return metadata


def _signature_outputs(root: _Table) -> tuple[tuple[str, int], ...]:
    """(name, tensor index) of the first signature's outputs; () without signatures."""
    sigs = root.tables(7)
    if not sigs:
        return ()
    return tuple((tm.string(0) or "", tm.scalar(1, "I")) for tm in sigs[0].tables(1))


def _first_bad(values: tuple) -> float:
    return next(v for v in values if not (math.isfinite(v) and v > 0))
