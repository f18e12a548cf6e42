#!/usr/bin/env python3
"""Mutation fuzzer for model files: every mutant through `classify`, `detect`, `check` and `bench`.

A user's bad model file must give a one-line error and a documented exit code, never a native
crash, a traceback or a hang. This script breaks real models in many ways, from random byte
flips to structure-aware edits of the flatbuffer (tensor shapes, buffer/opcode/tensor indices,
quantization, operator options, TFLite_Detection_PostProcess's custom options, subgraph
counts), runs each mutant through the CLI exactly as a user would, and sorts the outcomes:

  OK           exit 0
  CLEAN-ERROR  a documented non-zero exit code, no traceback
  CRASH        the edgeapp process was killed by a signal (SIGSEGV, SIGABRT, ...)
  TRACEBACK    exit 1 (internal error) or a Python traceback on stderr
  HANG         no exit within --timeout

Deterministic: mutant N of seed S is the same file on every run and machine (for the same
base models). Failing mutants are kept in WORK/failures/ with a repro line.

Speed: starting Python and importing the runtime costs ~0.7 s per command, so by default the
commands run in processes forked from this one after the imports (`python -m edgeapp` run
in-process by runpy, in its own process group); --subprocess runs real `python -m edgeapp`
processes instead (what the repro lines do).

    python scripts/fuzz_models.py --mutants 2000 --jobs 2            # the table in docs/containment.md
    python scripts/fuzz_models.py --mutants 100 --seed 1 --bases classifier,det_op_uint8
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import shlex
import signal
import struct
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "coral"
OUTCOMES = ("OK", "CLEAN-ERROR", "CRASH", "TRACEBACK", "HANG")
COMMANDS = ("classify", "detect", "check", "bench")
BAD = ("CRASH", "TRACEBACK", "HANG")
CORAL_MODELS = ("mobilenet_v1_0.25_128_quant.tflite", "mobilenet_v2_1.0_224_quant.tflite",
                "deeplabv3_mnv2_dm05_pascal_quant.tflite", "movenet_single_pose_lightning_ptq.tflite")


# ---------------------------------------------------------------------------------------------
# Base models


_TF_BUILD = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, keras, tensorflow as tf
out = sys.argv[1]
keras.utils.set_random_seed(0)
# the classifier edgeapp convert turns into int8 (same shape as the test suite's)
m = keras.Sequential([keras.Input((16, 16, 3)),
    keras.layers.Conv2D(8, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
    keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3, activation="softmax")])
m.save(os.path.join(out, "classifier.keras"))
# an LSTM over image rows (UNIDIRECTIONAL_SEQUENCE_LSTM), float and with int8 weights (hybrid;
# full int8 crashes TensorFlow's own calibrator)
lstm = keras.Sequential([keras.Input((16, 16, 3), batch_size=1), keras.layers.Reshape((16, 48)),
    keras.layers.LSTM(8), keras.layers.Dense(4, activation="softmax")])
def save(name, data):
    with open(os.path.join(out, name + ".tflite"), "wb") as f:
        f.write(data)
save("lstm_float", tf.lite.TFLiteConverter.from_keras_model(lstm).convert())
conv = tf.lite.TFLiteConverter.from_keras_model(lstm)
conv.optimizations = [tf.lite.Optimize.DEFAULT]
save("lstm_hybrid", conv.convert())
'''


def build_bases(work: Path, log: Callable[[str], None]) -> Dict[str, Path]:
    """Our own models (built once into WORK/bases with TensorFlow) and Coral's when present."""
    folder = work / "bases"
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    if not (folder / "lstm_hybrid.tflite").exists():
        log("building the classifier and LSTM base models with TensorFlow ...")
        _quiet_run([sys.executable, "-c", _TF_BUILD, str(folder)], env)
    if not (folder / "classifier.tflite").exists():
        calib = folder / "calibration"
        _write_images(calib, 12)
        log("converting the classifier with `edgeapp convert` ...")
        subprocess.run([sys.executable, "-m", "edgeapp", "convert", str(folder / "classifier.keras"),
                        "-o", str(folder / "classifier.tflite"), "--calibration", str(calib),
                        "--samples", "12"], check=True, env=env, stdout=subprocess.DEVNULL)
    sys.path.insert(0, str(ROOT / "tests"))
    import detection_models  # the test suite's detection models, every output layout

    if not all((folder / f"{n}.tflite").exists() for n in detection_models.NAMES):
        log("building the detection models with TensorFlow ...")
        code = detection_models.BUILD % {"S": detection_models.SIZE, "G": detection_models.GRID}
        _quiet_run([sys.executable, "-c", code, str(folder)], env)
    bases = {"classifier": folder / "classifier.tflite", "lstm_float": folder / "lstm_float.tflite",
             "lstm_hybrid": folder / "lstm_hybrid.tflite"}
    bases.update({n: folder / f"{n}.tflite" for n in detection_models.NAMES})
    for name in CORAL_MODELS:
        if (SHARED / name).is_file():
            bases[name.split("_quant")[0].split("_ptq")[0]] = SHARED / name
    return bases


def _quiet_run(cmd: List[str], env: dict) -> None:
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode:
        raise SystemExit(f"building base models failed:\n{proc.stdout[-3000:]}")


def _write_images(folder: Path, n: int) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        (folder / cls).mkdir(parents=True, exist_ok=True)
        for i in range(n // 2):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(
                folder / cls / f"{i}.png")


# ---------------------------------------------------------------------------------------------
# The flatbuffer, as places to mutate


@dataclass(frozen=True)
class Site:
    kind: str  # mutation kind this site serves
    pos: int  # absolute byte offset in the file
    fmt: str  # struct format of the value there ("i", "I", "f", "q", "B", "H")
    what: str  # human description ("subgraph 0 tensor 12 shape[1]")


@dataclass
class Layout:
    """A valid base model's mutable places and counts, found once per base."""

    sites: Dict[str, List[Site]] = field(default_factory=lambda: defaultdict(list))
    n_tensors: int = 0
    n_buffers: int = 0
    n_opcodes: int = 0
    custom_ops: List[Tuple[int, int]] = field(default_factory=list)  # (subgraph, operator)
    buffer_data: List[Tuple[int, int]] = field(default_factory=list)  # (start, length)


class _T:
    """Minimal reader over a VALID flatbuffer (the bases), recording field positions."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos
        self.vt = pos - struct.unpack_from("<i", buf, pos)[0]
        self.vt_len = struct.unpack_from("<H", buf, self.vt)[0]

    def field(self, slot: int) -> Optional[int]:
        o = 4 + 2 * slot
        if o >= self.vt_len:
            return None
        off = struct.unpack_from("<H", self.buf, self.vt + o)[0]
        return self.pos + off if off else None

    def vtable_entry(self, slot: int) -> Optional[int]:
        o = 4 + 2 * slot
        return self.vt + o if o < self.vt_len else None

    def target(self, slot: int) -> Optional[int]:
        p = self.field(slot)
        return None if p is None else p + struct.unpack_from("<I", self.buf, p)[0]

    def table(self, slot: int) -> Optional["_T"]:
        p = self.target(slot)
        return None if p is None else _T(self.buf, p)

    def vector(self, slot: int) -> Tuple[Optional[int], int]:
        """(position of the length prefix, length) or (None, 0)."""
        p = self.target(slot)
        if p is None:
            return None, 0
        return p, struct.unpack_from("<I", self.buf, p)[0]

    def tables(self, slot: int) -> List["_T"]:
        p, n = self.vector(slot)
        out = []
        for i in range(n):
            e = p + 4 + 4 * i
            out.append(_T(self.buf, e + struct.unpack_from("<I", self.buf, e)[0]))
        return out

    def fields_present(self) -> List[Tuple[int, int]]:
        """(slot, position) of every present field, for options tables of unknown schema."""
        return [(s, p) for s in range((self.vt_len - 4) // 2) for p in [self.field(s)] if p is not None]


def layout_of(data: bytes) -> Layout:
    lay = Layout()
    add = lambda kind, pos, fmt, what: lay.sites[kind].append(Site(kind, pos, fmt, what))  # noqa: E731
    root = _T(data, struct.unpack_from("<I", data, 0)[0])

    def vec_elems(kind: str, t: _T, slot: int, fmt: str, what: str) -> None:
        p, n = t.vector(slot)
        size = struct.calcsize(fmt)
        for i in range(n):
            add(kind, p + 4 + size * i, fmt, f"{what}[{i}]")

    def offsets(t: _T, what: str) -> None:  # uoffset fields and vtable entries: raw structure
        for slot, p in t.fields_present():
            add("vtable", t.vtable_entry(slot), "H", f"{what} vtable slot {slot}")
        add("vtable", t.pos, "i", f"{what} vtable offset")

    offsets(root, "model")
    for slot, name in ((1, "operator_codes"), (2, "subgraphs"), (4, "buffers")):
        p, _n = root.vector(slot)
        if p is not None:
            add("vector_count" if slot != 2 else "subgraph_count", p, "I", f"model.{name} length")
            add("offset", root.field(slot), "I", f"model.{name} offset")
    codes = root.tables(1)
    lay.n_opcodes = len(codes)
    for i, c in enumerate(codes):
        for slot, fmt in ((0, "b"), (3, "i")):
            p = c.field(slot)
            if p is not None:
                add("opcode", p, fmt, f"operator_codes[{i}] builtin slot {slot}")
    buffers = root.tables(4)
    lay.n_buffers = len(buffers)
    for i, b in enumerate(buffers):
        p, n = b.vector(0)
        if p is not None and n:
            lay.buffer_data.append((p + 4, n))
            add("vector_count", p, "I", f"buffers[{i}].data length")
    for g, sg in enumerate(root.tables(2)):
        offsets(sg, f"subgraph {g}")
        tensors = sg.tables(0)
        lay.n_tensors = max(lay.n_tensors, len(tensors))
        p, _n = sg.vector(0)
        add("vector_count", p, "I", f"subgraph {g} tensors length")
        vec_elems("graph_io", sg, 1, "i", f"subgraph {g} inputs")
        vec_elems("graph_io", sg, 2, "i", f"subgraph {g} outputs")
        for ti, t in enumerate(tensors):
            w = f"subgraph {g} tensor {ti}"
            vec_elems("shape", t, 0, "i", f"{w} shape")
            vec_elems("shape", t, 7, "i", f"{w} shape_signature")
            for slot, kind, fmt in ((1, "tensor_type", "b"), (2, "buffer_index", "I")):
                p = t.field(slot)
                if p is not None:
                    add(kind, p, fmt, f"{w} slot {slot}")
            q = t.table(4)
            if q is not None:
                vec_elems("quant", q, 2, "f", f"{w} scale")
                vec_elems("quant", q, 3, "q", f"{w} zero_point")
                vec_elems("quant", q, 0, "f", f"{w} min")
                vec_elems("quant", q, 1, "f", f"{w} max")
                p = q.field(6)
                if p is not None:
                    add("quant", p, "i", f"{w} quantized_dimension")
        ops = sg.tables(3)
        for oi, op in enumerate(ops):
            w = f"subgraph {g} operator {oi}"
            p = op.field(0)
            if p is not None:
                add("opcode_index", p, "I", f"{w} opcode_index")
            vec_elems("op_io", op, 1, "i", f"{w} inputs")
            vec_elems("op_io", op, 2, "i", f"{w} outputs")
            for slot, name in ((1, "inputs"), (2, "outputs")):
                p, _n = op.vector(slot)
                if p is not None:
                    add("op_io", p, "I", f"{w} {name} length")
            opts = op.table(4)
            if opts is not None:
                present = sorted(p for _s, p in opts.fields_present())
                end = opts.pos + struct.unpack_from("<H", data, opts.vt + 2)[0]
                for k, p in enumerate(present):
                    size = (present[k + 1] if k + 1 < len(present) else end) - p
                    fmt = {1: "b", 2: "h"}.get(size, "i")
                    add("op_options", p, fmt, f"{w} builtin option at +{p - opts.pos}")
            p, n = op.vector(5)
            if p is not None and n:
                lay.custom_ops.append((g, oi))
                for k in range(n):
                    add("custom_options_bytes", p + 4 + k, "B", f"{w} custom_options[{k}]")
    return lay


# ---------------------------------------------------------------------------------------------
# Mutations: each takes (data, layout, rng) and returns (new bytes, description)

_INT_VALUES = (0, -1, 1, 2, 3, 4, 7, 255, 256, 65535, 0x7FFFFFFF, -0x80000000, 1 << 20)
_FLOAT_VALUES = (0.0, -0.0, -1.0, 1e-30, 1e30, float("nan"), float("inf"), float("-inf"), 1e-45,
                 3.4e38, 0.5, 255.0)


def _value_for(fmt: str, old, rng: random.Random, lay: Layout, kind: str):
    if fmt == "f":
        return rng.choice(_FLOAT_VALUES + (old * rng.choice((2.0, 0.5, -1.0, 1000.0)),))
    hi = {"b": 127, "B": 255, "h": 32767, "H": 65535, "i": 0x7FFFFFFF, "I": 0xFFFFFFFF,
          "q": 1 << 62}[fmt]
    lo = {"b": -128, "B": 0, "h": -32768, "H": 0, "i": -0x80000000, "I": 0, "q": -(1 << 62)}[fmt]
    limit = {"buffer_index": lay.n_buffers, "opcode_index": lay.n_opcodes,
             "op_io": lay.n_tensors, "graph_io": lay.n_tensors}.get(kind)
    cands = list(_INT_VALUES) + [old + 1, old - 1, old * 2, rng.randint(-8, 300)]
    if limit is not None:
        cands += [limit, limit - 1, limit + 1, rng.randrange(max(limit, 1)), -2]
    if kind == "quant" and fmt == "q":
        cands += [-128, 127, 1 << 40, -(1 << 40)]
    v = rng.choice(cands)
    return min(max(v, lo), hi)


def _patch_site(data: bytes, site: Site, value) -> bytes:
    out = bytearray(data)
    struct.pack_into("<" + site.fmt, out, site.pos, value)
    return bytes(out)


def mutate_site(kind: str) -> Callable:
    def mutate(data: bytes, lay: Layout, rng: random.Random):
        sites = lay.sites.get(kind) or []
        if not sites:
            return None
        site = rng.choice(sites)
        old = struct.unpack_from("<" + site.fmt, data, site.pos)[0]
        for _ in range(8):
            value = _value_for(site.fmt, old, rng, lay, kind)
            if value != old and not (isinstance(value, float) and math.isnan(old)):
                break
        return _patch_site(data, site, value), f"{site.what}: {old!r} -> {value!r}"

    return mutate


def m_bitflip(data: bytes, lay: Layout, rng: random.Random):
    out = bytearray(data)
    n = rng.choice((1, 1, 2, 4, 8, 32))
    for _ in range(n):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out), f"{n} random bit flips"


def m_bytes(data: bytes, lay: Layout, rng: random.Random):
    out = bytearray(data)
    head = rng.random() < 0.5  # the header and tables live near the start or the end
    region = min(len(out), 4096)
    start = rng.randrange(region) if head else len(out) - 1 - rng.randrange(region)
    n = rng.choice((1, 2, 4, 16, 64))
    fill = rng.choice(("zero", "ff", "random"))
    for i in range(start, min(len(out), start + n)):
        out[i] = 0 if fill == "zero" else 0xFF if fill == "ff" else rng.randrange(256)
    return bytes(out), f"{n} bytes at {start} set to {fill}"


def m_truncate(data: bytes, lay: Layout, rng: random.Random):
    cut = rng.choice((rng.randrange(len(data)), rng.randrange(64), len(data) - rng.randrange(1, 4096)))
    cut = max(0, min(cut, len(data) - 1))
    return data[:cut], f"truncated to {cut} of {len(data)} bytes"


def m_weights(data: bytes, lay: Layout, rng: random.Random):
    if not lay.buffer_data:
        return None
    start, n = rng.choice(lay.buffer_data)
    out = bytearray(data)
    k = min(n, rng.choice((4, 64, 1024)))
    at = start + rng.randrange(max(1, n - k + 1))
    fill = rng.choice((b"\xff", b"\x00", b"\x7f\xc0\x00\x00"[::-1]))  # -1 bytes, zeros, float NaN
    out[at:at + k] = (fill * k)[:k]
    return bytes(out), f"{k} bytes of constant data at {at} set to {fill.hex()}"


_SCHEMA = []


def _schema():
    """TFLite's flatbuffers schema classes: ai-edge-litert's, else TensorFlow's file of the same
    name (tflite-runtime, on Python <= 3.9, ships none), loaded alone: TensorFlow is not imported."""
    if not _SCHEMA:
        try:
            from ai_edge_litert import schema_py_generated as schema
        except ImportError:
            import importlib.util

            tf = importlib.util.find_spec("tensorflow")
            if tf is None or not tf.submodule_search_locations:
                raise SystemExit("fuzz_models: needs ai-edge-litert or TensorFlow for the TFLite schema") from None
            path = Path(list(tf.submodule_search_locations)[0], "lite", "python", "schema_py_generated.py")
            spec = importlib.util.spec_from_file_location("tflite_schema_py_generated", path)
            schema = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(schema)
        _SCHEMA.append(schema)
    return _SCHEMA[0]


def _unpack(data: bytes):
    schema = _schema()
    return schema, schema.ModelT.InitFromPackedBuf(data, 0)


def _pack(model) -> bytes:
    import flatbuffers

    b = flatbuffers.Builder(1 << 16)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def m_custom_options(data: bytes, lay: Layout, rng: random.Random):
    """Decode a custom op's flexbuffer map (TFLite_Detection_PostProcess's parameters), change one."""
    if not lay.custom_ops:
        return None
    from flatbuffers import flexbuffers

    schema, model = _unpack(data)
    g, oi = rng.choice(lay.custom_ops)
    op = model.subgraphs[g].operators[oi]
    raw = bytes(bytearray(op.customOptions))
    try:
        params = flexbuffers.Loads(raw)
    except Exception:  # an opaque blob (edgetpu-custom-op): fall back to bytes
        params = None
    if not isinstance(params, dict) or not params:
        k = rng.randrange(len(raw))
        blob = bytearray(raw)
        blob[k] = rng.randrange(256)
        op.customOptions = list(blob)
        return _pack(model), f"subgraph {g} operator {oi} custom_options[{k}] randomised"
    key = rng.choice(sorted(params))
    old = params[key]
    choice = rng.random()
    if choice < 0.1:
        del params[key]
        new = "<removed>"
    elif choice < 0.2:
        params[key] = new = "text"
    elif isinstance(old, float) or choice < 0.5:
        params[key] = new = rng.choice((0.0, -1.0, float("nan"), float("inf"), 1e-30, 1e30, 2.0))
    elif isinstance(old, bool):
        params[key] = new = not old
    else:
        params[key] = new = rng.choice((0, -1, 1, 1000, 1 << 20, 0x7FFFFFFF, -0x80000000, 100000))
    op.customOptions = list(flexbuffers.Dumps(params))
    return _pack(model), f"subgraph {g} operator {oi} custom option {key}: {old!r} -> {new!r}"


def m_structure(data: bytes, lay: Layout, rng: random.Random):
    """Edits that change counts: subgraphs, operators, operator inputs/outputs, tensors, buffers."""
    schema, model = _unpack(data)
    sg = model.subgraphs[0]
    ops = sg.operators or []
    choices = ["dup_subgraph", "no_subgraphs", "empty_subgraph", "drop_op", "dup_op", "swap_ops",
               "drop_input", "extra_input", "drop_output", "no_graph_inputs", "no_graph_outputs",
               "drop_buffers", "no_opcodes", "drop_tensor", "input_is_output", "self_loop"]
    what = rng.choice(choices)
    oi = rng.randrange(len(ops)) if ops else None
    if what == "dup_subgraph":
        model.subgraphs = model.subgraphs + [model.subgraphs[0]]
    elif what == "no_subgraphs":
        model.subgraphs = []
    elif what == "empty_subgraph":
        model.subgraphs = [schema.SubGraphT()] + model.subgraphs[1:]
    elif what == "drop_op" and ops:
        del ops[oi]
    elif what == "dup_op" and ops:
        ops.insert(oi, ops[oi])
    elif what == "swap_ops" and len(ops) > 1:
        j = rng.randrange(len(ops))
        ops[oi], ops[j] = ops[j], ops[oi]
    elif what == "drop_input" and ops and ops[oi].inputs is not None and len(ops[oi].inputs):
        ops[oi].inputs = list(ops[oi].inputs)[:rng.randrange(len(ops[oi].inputs))]
    elif what == "extra_input" and ops:
        ops[oi].inputs = list(ops[oi].inputs if ops[oi].inputs is not None else []) + \
            [rng.randrange(len(sg.tensors))]
    elif what == "drop_output" and ops and ops[oi].outputs is not None and len(ops[oi].outputs):
        ops[oi].outputs = list(ops[oi].outputs)[:-1]
    elif what == "no_graph_inputs":
        sg.inputs = []
    elif what == "no_graph_outputs":
        sg.outputs = []
    elif what == "drop_buffers":
        model.buffers = model.buffers[: rng.randrange(1, max(2, len(model.buffers)))]
    elif what == "no_opcodes":
        model.operatorCodes = []
    elif what == "drop_tensor" and sg.tensors:
        del sg.tensors[rng.randrange(len(sg.tensors))]
    elif what == "input_is_output" and ops and ops[oi].outputs is not None and len(ops[oi].outputs):
        outs = list(ops[oi].outputs)
        outs[0] = int(sg.inputs[0]) if sg.inputs is not None and len(sg.inputs) else 0
        ops[oi].outputs = outs
    elif what == "self_loop" and ops and ops[oi].inputs is not None and len(ops[oi].inputs) \
            and ops[oi].outputs is not None and len(ops[oi].outputs):
        ins = list(ops[oi].inputs)
        ins[0] = int(ops[oi].outputs[0])
        ops[oi].inputs = ins
    else:
        return None
    return _pack(model), f"structure: {what}" + (f" (operator {oi})" if oi is not None else "")


MUTATIONS: Dict[str, Callable] = {
    "bitflip": m_bitflip,
    "bytes": m_bytes,
    "truncate": m_truncate,
    "weights": m_weights,
    "shape": mutate_site("shape"),
    "tensor_type": mutate_site("tensor_type"),
    "buffer_index": mutate_site("buffer_index"),
    "opcode_index": mutate_site("opcode_index"),
    "opcode": mutate_site("opcode"),
    "op_io": mutate_site("op_io"),
    "graph_io": mutate_site("graph_io"),
    "quant": mutate_site("quant"),
    "op_options": mutate_site("op_options"),
    "custom_options": m_custom_options,
    "custom_options_bytes": mutate_site("custom_options_bytes"),
    "subgraph_count": mutate_site("subgraph_count"),
    "vector_count": mutate_site("vector_count"),
    "offset": mutate_site("offset"),
    "vtable": mutate_site("vtable"),
    "structure": m_structure,
}


@dataclass
class Mutant:
    index: int
    base: str
    kind: str
    what: str
    data: bytes

    @property
    def name(self) -> str:
        return f"{self.index:05d}-{self.base}-{self.kind}"


def make_mutant(seed: int, index: int, bases: Dict[str, bytes], layouts: Dict[str, Layout],
                kinds: List[str]) -> Mutant:
    """Mutant `index` of `seed`: a function of (seed, index, bases) alone."""
    rng = random.Random(f"{seed}:{index}")
    names = sorted(bases)
    for _attempt in range(50):
        base, kind = rng.choice(names), rng.choice(kinds)
        result = MUTATIONS[kind](bases[base], layouts[base], rng)
        if result is not None and result[0] != bases[base]:
            return Mutant(index, base, kind, result[1], result[0])
    raise RuntimeError(f"no mutation applies (seed {seed}, mutant {index})")


# ---------------------------------------------------------------------------------------------
# Running the CLI


def command_args(command: str, model: Path, image: Path) -> List[str]:
    return {
        "classify": ["classify", str(model), str(image)],
        "detect": ["detect", str(model), str(image)],
        "check": ["check", str(model)],
        "bench": ["bench", str(model), "--runs", "2", "--warmup", "0", "--power", "none"],
    }[command]


@dataclass
class Run:
    command: str
    outcome: str
    code: Optional[int]  # exit code, or -signal
    seconds: float
    stderr: str


def classify_outcome(code: Optional[int], stderr: str) -> str:
    if code is None:
        return "HANG"
    if code < 0:
        return "CRASH"
    if code == 1 or "Traceback (most recent call last)" in stderr:
        return "TRACEBACK"
    return "OK" if code == 0 else "CLEAN-ERROR"


def _wait(pid: int, timeout: float) -> Optional[int]:
    """The child's exit code (-signal when killed), or None after killing its group at timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            return None
        time.sleep(delay)
        delay = min(delay * 1.5, 0.05)


def run_forked(args: List[str], timeout: float, scratch: Path) -> Tuple[Optional[int], str]:
    """`python -m edgeapp ARGS` in a fork of this (already imported) process."""
    err_path = scratch / f"stderr-{os.getpid()}"
    pid = os.fork()
    if pid == 0:  # the child: become `python -m edgeapp`, never return
        code = 1
        try:
            os.setpgid(0, 0)
            null = os.open(os.devnull, os.O_RDWR)
            err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.dup2(err, 2)
            import runpy

            sys.argv = ["edgeapp"] + args
            try:
                runpy.run_module("edgeapp", run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    code = _wait(pid, timeout)
    try:
        text = err_path.read_text(errors="replace")
        err_path.unlink()
    except OSError:
        text = ""
    return code, text


def run_subprocess(args: List[str], timeout: float, scratch: Path) -> Tuple[Optional[int], str]:
    proc = subprocess.Popen([sys.executable, "-m", "edgeapp"] + args, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _out, err = proc.communicate(timeout=timeout)
        return proc.returncode, err.decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, ""


def test_mutant(mutant: Mutant, commands: List[str], folder: Path, image: Path, timeout: float,
                runner: Callable) -> List[Run]:
    path = folder / f"{mutant.name}.tflite"
    path.write_bytes(mutant.data)
    runs = []
    try:
        for command in commands:
            t0 = time.perf_counter()
            code, err = runner(command_args(command, path, image), timeout, folder)
            runs.append(Run(command, classify_outcome(code, err), code, time.perf_counter() - t0,
                            err[-2000:]))
    finally:
        path.unlink()
    return runs


def worst(runs: List[Run]) -> str:
    order = ("OK", "CLEAN-ERROR", "TRACEBACK", "HANG", "CRASH")
    return max((r.outcome for r in runs), key=order.index)


def preload() -> None:
    """Import what every command needs once, so forked children start warm (no TensorFlow)."""
    import contextlib
    import importlib
    import pkgutil
    import runpy

    for name in ("numpy", "PIL.Image", "PIL.PngImagePlugin", "ai_edge_litert.interpreter", "typer",
                 "rich.console", "flatbuffers"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    import edgeapp

    for mod in pkgutil.walk_packages(edgeapp.__path__, "edgeapp."):
        if mod.name.endswith(("__main__", "converter", ".convert")) or "probe" in mod.name:
            continue
        try:
            importlib.import_module(mod.name)
        except Exception:
            pass
    # one real (failing) run of each command: Typer imports more on its first real parse
    for args in (["--version"], ["check", "/nonexistent.tflite"], ["bench", "/nonexistent.tflite"],
                 ["classify", "/nonexistent.tflite", "x.png"], ["detect", "/nonexistent.tflite", "x.png"]):
        sys.argv = ["edgeapp"] + args
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                runpy.run_module("edgeapp", run_name="__main__", alter_sys=True)
            except SystemExit:
                pass
    assert "tensorflow" not in sys.modules, "preloading imported TensorFlow"
    try:  # Typer rebuilds the Click command tree on every call (0.15 s): build it once here
        import functools

        import typer.main

        typer.main.get_command = functools.lru_cache(maxsize=None)(typer.main.get_command)
    except (ImportError, AttributeError):
        pass


# ---------------------------------------------------------------------------------------------
# The campaign


@dataclass
class Result:
    mutant: Mutant
    runs: List[Run]

    @property
    def outcome(self) -> str:
        return worst(self.runs)


def fuzz(bases: Dict[str, Path], *, seed: int, mutants: int, jobs: int, timeout: float, work: Path,
         commands: List[str] = list(COMMANDS), kinds: Optional[List[str]] = None,
         subprocess_mode: bool = False, progress: Optional[Callable[[int, int], None]] = None,
         start: int = 0) -> List[Result]:
    """Mutants start..start+mutants-1 of `seed` over `bases`, `jobs` at a time."""
    kinds = kinds or list(MUTATIONS)
    data = {n: Path(p).read_bytes() for n, p in bases.items()}
    layouts = {n: layout_of(d) for n, d in data.items()}
    scratch = work / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    image = _image(work)
    os.environ.setdefault("XDG_CACHE_HOME", str(work / "cache"))  # verdict caches stay ours
    os.environ["EDGEAPP_NO_PROGRESS"] = "1"
    # a model that hangs the runtime is refused by the containment check well within `timeout`
    os.environ.setdefault("EDGEAPP_PROBE_TIMEOUT", str(max(1.0, timeout / 4)))
    runner = run_subprocess if subprocess_mode else run_forked
    if not subprocess_mode:
        preload()
    results: Dict[int, Result] = {}
    running: Dict[int, Tuple[int, Path]] = {}  # pid -> (mutant index, result file)
    todo = list(range(start, start + mutants))
    while todo or running:
        while todo and len(running) < jobs:
            index = todo.pop(0)
            out = scratch / f"result-{index}.json"
            pid = os.fork()
            if pid == 0:  # one worker per mutant: make it, run its commands, write the outcome
                status = 0
                try:
                    m = make_mutant(seed, index, data, layouts, kinds)
                    runs = test_mutant(m, commands, scratch, image, timeout, runner)
                    doc = {"index": index, "base": m.base, "kind": m.kind, "what": m.what,
                           "runs": [r.__dict__ for r in runs]}
                    if _failed(doc):  # kept at once: a killed campaign keeps what it found
                        keep = work / "failures"
                        keep.mkdir(parents=True, exist_ok=True)
                        (keep / f"{m.name}.tflite").write_bytes(m.data)
                    out.write_text(json.dumps(doc))
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    status = 1
                finally:
                    os._exit(status)
            running[pid] = (index, out)
        pid, _status = os.wait()
        if pid not in running:
            continue
        index, out = running.pop(pid)
        try:
            doc = json.loads(out.read_text())
            out.unlink()
        except (OSError, ValueError):
            raise SystemExit(f"fuzz worker for mutant {index} failed (see above)")
        with open(work / "runs.jsonl", "a") as log:  # as they come: progress and post-mortems
            log.write(json.dumps({"seed": seed, **doc}) + "\n")
        m = make_mutant(seed, index, data, layouts, kinds) if _failed(doc) else \
            Mutant(index, doc["base"], doc["kind"], doc["what"], b"")
        results[index] = Result(m, [Run(**r) for r in doc["runs"]])
        if progress:
            progress(len(results), mutants)
    return [results[i] for i in sorted(results)]


def _failed(doc: dict) -> bool:
    return any(r["outcome"] in BAD for r in doc["runs"])


def _image(work: Path) -> Path:
    path = work / "input.png"
    if not path.exists():
        import numpy as np
        from PIL import Image

        rng = np.random.default_rng(0)
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(path)
    return path


def keep_failures(results: List[Result], work: Path, image: Path) -> List[str]:
    """Copy failing mutants to WORK/failures with a repro line each; returns the lines."""
    folder = work / "failures"
    lines = []
    for r in results:
        if r.outcome not in BAD:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{r.mutant.name}.tflite"
        path.write_bytes(r.mutant.data)
        for run in r.runs:
            if run.outcome in BAD:
                repro = "python -m edgeapp " + " ".join(shlex.quote(a) for a in
                                                        command_args(run.command, path, image))
                last = [ln for ln in run.stderr.splitlines() if ln.strip()][-1:] or [""]
                lines.append(f"{run.outcome} {run.command} [{r.mutant.base}, {r.mutant.kind}: "
                             f"{r.mutant.what}] {last[0][:200]}\n    {repro}")
    if lines:
        (folder / "repro.txt").write_text("\n".join(lines) + "\n")
    return lines


def table(results: List[Result], by: str = "kind") -> str:
    """Markdown: one row per mutation kind (or base), mutants counted by their worst outcome."""
    counts: Dict[str, Counter] = defaultdict(Counter)
    for r in results:
        key = getattr(r.mutant, by)
        counts[key][r.outcome] += 1
        counts["all"][r.outcome] += 1
    rows = [f"| {by} | mutants | " + " | ".join(OUTCOMES) + " |",
            "| --- | ---: | " + " | ".join("---:" for _ in OUTCOMES) + " |"]
    for key in sorted(k for k in counts if k != "all") + ["all"]:
        c = counts[key]
        name = f"**{key}**" if key == "all" else key
        rows.append(f"| {name} | {sum(c.values())} | " + " | ".join(str(c[o]) for o in OUTCOMES) + " |")
    return "\n".join(rows)


def command_table(results: List[Result]) -> str:
    counts: Dict[str, Counter] = defaultdict(Counter)
    for r in results:
        for run in r.runs:
            counts[run.command][run.outcome] += 1
    rows = ["| command | runs | " + " | ".join(OUTCOMES) + " |",
            "| --- | ---: | " + " | ".join("---:" for _ in OUTCOMES) + " |"]
    for cmd in COMMANDS:
        if cmd in counts:
            c = counts[cmd]
            rows.append(f"| {cmd} | {sum(c.values())} | " + " | ".join(str(c[o]) for o in OUTCOMES) + " |")
    return "\n".join(rows)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mutants", type=int, default=200)
    p.add_argument("--start", type=int, default=0, help="first mutant index (resume or replay one)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per command before HANG")
    p.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "edgeapp-fuzz")
    p.add_argument("--bases", help="comma-separated base model names (default: all)")
    p.add_argument("--base", action="append", default=[], metavar="NAME=PATH",
                   help="use this model as a base instead of building/finding the usual ones")
    p.add_argument("--kinds", help="comma-separated mutation kinds (default: all): " + ", ".join(MUTATIONS))
    p.add_argument("--commands", default=",".join(COMMANDS))
    p.add_argument("--subprocess", action="store_true", help="real `python -m edgeapp` processes")
    p.add_argument("--json", type=Path, help="also write every run as JSON here")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="set in the environment of the runs (e.g. EDGEAPP_TRUST_MODEL=1 to see what "
                        "the containment check catches)")
    a = p.parse_args(argv)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    sys.path.insert(0, str(ROOT))
    a.work.mkdir(parents=True, exist_ok=True)
    for item in a.env:
        name, _, value = item.partition("=")
        os.environ[name] = value
    if a.base:
        bases = {}
        for item in a.base:
            name, _, path = item.partition("=")
            bases[name] = Path(path)
    else:
        bases = build_bases(a.work, log)
    if a.bases:
        wanted = a.bases.split(",")
        unknown = [b for b in wanted if b not in bases]
        if unknown:
            p.error(f"unknown base(s) {unknown}; have {sorted(bases)}")
        bases = {b: bases[b] for b in wanted}
    kinds = a.kinds.split(",") if a.kinds else None
    log(f"bases: {', '.join(sorted(bases))}")
    t0 = time.perf_counter()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 10 or done == total:
            last[0] = time.perf_counter()
            log(f"  {done}/{total} mutants, {last[0] - t0:.0f} s")

    results = fuzz(bases, seed=a.seed, mutants=a.mutants, jobs=a.jobs, timeout=a.timeout, work=a.work,
                   commands=a.commands.split(","), kinds=kinds, subprocess_mode=a.subprocess,
                   progress=progress, start=a.start)
    elapsed = time.perf_counter() - t0
    lines = keep_failures(results, a.work, _image(a.work))
    print(f"{len(results)} mutants (seed {a.seed}, {len(bases)} base models, "
          f"{sum(len(r.runs) for r in results)} command runs) in {elapsed:.0f} s with {a.jobs} jobs\n")
    print(table(results))
    print()
    print(table(results, by="base"))
    print()
    print(command_table(results))
    print()
    for cmd in a.commands.split(","):
        times = sorted(run.seconds for r in results for run in r.runs if run.command == cmd)
        if times:
            print(f"{cmd}: median {times[len(times) // 2]:.2f} s, max {times[-1]:.1f} s per run")
    if a.json:
        a.json.write_text(json.dumps([{"index": r.mutant.index, "base": r.mutant.base,
                                       "kind": r.mutant.kind, "what": r.mutant.what,
                                       "runs": [x.__dict__ for x in r.runs]} for r in results], indent=1))
    if lines:
        print(f"\n{len(lines)} failing runs, mutants kept in {a.work / 'failures'}:")
        print("\n".join(lines))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
