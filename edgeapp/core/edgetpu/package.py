"""What a compiled model's `edgetpu-custom-op` carries: its executables, how many parameter bytes
each caches on the chip or streams from the host, and the caching token that co-compiled models
share.

The compiler's report is gone once it has run; the compiled file still says it. The op's custom
options are a FlexBuffers map (libedgetpu's tflite/custom_op_data.cc: "4" is the serialized
Package); the Package (executable/executable.fbs, file identifier DWN1) holds a MultiExecutable
whose executables are STAND_ALONE (streams every parameter), or a PARAMETER_CACHING one (the
parameters loaded into the chip's SRAM once) with an EXECUTION_ONLY one (what is still streamed
on every inference). Models compiled in one `edgetpu_compiler` call share one
`parameter_caching_token`, so the runtime keeps all their parameters cached together; models
compiled apart each evict the other's (Coral's "Run multiple models with a single Edge TPU").

Every read is bounds-checked (core/tflite/model's table reader); a malformed op is InvalidModel.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, List, Optional

from typing_extensions import TypedDict

from edgeapp.core.tflite.model import EDGETPU_CUSTOM_OP, _Corrupt, _Table, parse_model
from edgeapp.errors import InvalidModel

STAND_ALONE, PARAMETER_CACHING, EXECUTION_ONLY = 0, 1, 2
KINDS = {STAND_ALONE: "stand-alone", PARAMETER_CACHING: "parameter caching",
         EXECUTION_ONLY: "execution only"}
_PACKAGE_KEY = "4"  # custom_op_data.cc: kKeyExecutable, the serialized Package
_PACKAGE_ID = b"DWN1"


@dataclass(frozen=True)
class Executable:
    """One executable of a compiled op: its kind and the parameter bytes it carries."""

    kind: int  # STAND_ALONE, PARAMETER_CACHING or EXECUTION_ONLY
    parameter_bytes: int
    caching_token: int


class ParameterUseJson(TypedDict):
    on_chip_bytes: int
    off_chip_bytes: int
    caching_tokens: List[str]  # 16 hex digits each
    edgetpu_ops: int
    min_runtime_version: Optional[int]


@dataclass(frozen=True)
class ParameterUse:
    """Where a compiled model's parameters live: cached on the chip, or streamed every inference."""

    on_chip_bytes: int
    off_chip_bytes: int
    caching_tokens: tuple[int, ...]  # one per Edge TPU op that caches parameters
    edgetpu_ops: int
    min_runtime_version: Optional[int]

    def to_json(self) -> ParameterUseJson:
        return {"on_chip_bytes": self.on_chip_bytes, "off_chip_bytes": self.off_chip_bytes,
                "caching_tokens": [f"{t:016x}" for t in self.caching_tokens],
                "edgetpu_ops": self.edgetpu_ops, "min_runtime_version": self.min_runtime_version}


def parameter_use(data: bytes, name: str = "<bytes>") -> Optional[ParameterUse]:
    """The parameter bytes of every Edge TPU op of the model file `data`, summed; None for a
    model that is not compiled for the Edge TPU."""
    model = parse_model(data, name)
    if not model.is_edgetpu_compiled:
        return None
    on_chip = off_chip = 0
    tokens: list[int] = []
    runtimes: list[int] = []
    try:
        options = _custom_options(data, EDGETPU_CUSTOM_OP)
        for blob in options:
            runtime, executables = read_package(blob)
            runtimes.append(runtime)
            for e in executables:
                if e.kind == PARAMETER_CACHING:
                    on_chip += e.parameter_bytes
                    if e.caching_token not in tokens:
                        tokens.append(e.caching_token)
                else:
                    off_chip += e.parameter_bytes
    except (_Corrupt, struct.error, IndexError, ValueError, UnicodeDecodeError) as e:
        raise InvalidModel(f"{name}: its edgetpu-custom-op is malformed ({e}); recompile it") from None
    return ParameterUse(on_chip, off_chip, tuple(tokens), len(options), max(runtimes) if runtimes else None)


def read_package(custom_options: bytes) -> tuple[int, list[Executable]]:
    """(the package's minimum runtime version, its executables) from one op's custom options."""
    entries = flexbuffer_map(custom_options)
    package = entries.get(_PACKAGE_KEY)
    if not isinstance(package, bytes) or package[4:8] != _PACKAGE_ID:
        raise ValueError("no Edge TPU package in the op's options")
    root = _root(package)
    start, n = root.bytes_span(1)  # serialized_multi_executable
    multi = bytes(package[start:start + n])
    executables = []
    for blob in _strings(_root(multi), 0):  # serialized_executables
        e = _root(blob)
        executables.append(Executable(kind=e.scalar(13, "h"), parameter_bytes=e.bytes_span(6)[1],
                                      caching_token=e.scalar(14, "Q")))
    return root.scalar(0, "i"), executables


def _root(buf: bytes) -> _Table:
    if len(buf) < 8:
        raise ValueError("an empty flatbuffer")
    return _Table(buf, struct.unpack_from("<I", buf, 0)[0])


def _strings(table: _Table, slot: int) -> list[bytes]:
    """A [string] (or [[ubyte]]) field: each element's bytes."""
    start, n = table._vector(slot, 4)
    out = []
    for i in range(n):
        p = start + 4 * i
        s = p + struct.unpack_from("<I", table.buf, p)[0]
        size = _uint(table.buf, s, 4)
        _check(table.buf, s + 4, size)
        out.append(bytes(table.buf[s + 4:s + 4 + size]))
    return out


def _custom_options(data: bytes, code: str) -> list[bytes]:
    """The custom options of each operator of the main subgraph whose custom code is `code`."""
    root = _root(data)
    codes = [c.string(1) for c in root.tables(1)]  # OperatorCode.custom_code
    out = []
    for op in root.tables(2)[0].tables(3):
        index = op.scalar(0, "I")
        if index < len(codes) and codes[index] == code:
            start, n = op.bytes_span(5)
            out.append(bytes(data[start:start + n]))
    return out


# ----------------------------------------------------------------------------- FlexBuffers
# The subset libedgetpu writes: a map of ints, strings/blobs and vectors (FlexBuffers' own
# format: a value's type byte packs its type << 2 with its child width; offsets point back).
_NULL, _INT, _UINT, _STRING, _MAP, _VECTOR, _VECTOR_INT, _VECTOR_UINT, _BLOB, _BOOL = 0, 1, 2, 5, 9, 10, 11, 12, 25, 26


def flexbuffer_map(buf: bytes) -> dict[str, Any]:
    """The root map of a FlexBuffer (ints, strings as bytes, vectors as lists)."""
    if len(buf) < 3:
        raise ValueError("a FlexBuffer of fewer than 3 bytes")
    width, packed = buf[-1], buf[-2]
    if width not in (1, 2, 4, 8):
        raise ValueError(f"a FlexBuffer root of width {width}")
    value = _value(buf, len(buf) - 2 - width, width, packed, depth=0)
    if not isinstance(value, dict):
        raise ValueError("the FlexBuffer root is not a map")
    return value


def _value(buf: bytes, p: int, width: int, packed: int, depth: int) -> Any:
    kind, child = packed >> 2, 1 << (packed & 3)
    if depth > 4:
        raise ValueError("FlexBuffer nested too deep")
    if kind == _NULL:
        return None
    if kind == _INT:
        return _uint(buf, p, width, signed=True)
    if kind in (_UINT, _BOOL):
        return _uint(buf, p, width)
    target = p - _uint(buf, p, width)
    if kind in (_STRING, _BLOB):
        size = _uint(buf, target - child, child)
        _check(buf, target, size)
        return bytes(buf[target:target + size])
    if kind in (_VECTOR_INT, _VECTOR_UINT):
        size = _uint(buf, target - child, child)
        return [_uint(buf, target + i * child, child, signed=kind == _VECTOR_INT) for i in range(size)]
    if kind == _VECTOR:
        size = _uint(buf, target - child, child)
        return [_value(buf, target + i * child, child, _byte(buf, target + size * child + i), depth + 1)
                for i in range(size)]
    if kind == _MAP:
        size = _uint(buf, target - child, child)
        keys_at = target - 3 * child
        keys = keys_at - _uint(buf, keys_at, child)
        key_width = _uint(buf, target - 2 * child, child)
        if key_width not in (1, 2, 4, 8):
            raise ValueError(f"FlexBuffer map keys of width {key_width}")
        out = {}
        for i in range(size):
            at = keys + i * key_width
            start = at - _uint(buf, at, key_width)
            end = buf.find(b"\0", start) if 0 <= start < len(buf) else -1
            if end < 0:
                raise ValueError("a FlexBuffer key runs off the end")
            out[bytes(buf[start:end]).decode("utf-8")] = _value(
                buf, target + i * child, child, _byte(buf, target + size * child + i), depth + 1)
        return out
    raise ValueError(f"FlexBuffer type {kind} (not one libedgetpu writes)")


def _check(buf: bytes, p: int, n: int) -> None:
    if p < 0 or n < 0 or p + n > len(buf):
        raise ValueError(f"offset {p}+{n} outside the {len(buf)} bytes")


def _byte(buf: bytes, p: int) -> int:
    _check(buf, p, 1)
    return buf[p]


def _uint(buf: bytes, p: int, width: int, signed: bool = False) -> int:
    _check(buf, p, width)
    return int.from_bytes(bytes(buf[p:p + width]), "little", signed=signed)
