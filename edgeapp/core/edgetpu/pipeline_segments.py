"""Model segments (`edgetpu_compiler --num_segments N`): find the set, check that it chains.

The compiler cuts a model into `X_segment_0_of_N_edgetpu.tflite` ... `X_segment_{N-1}_of_N_...`,
meant to run one per Edge TPU with each segment's results handed to the next. Tensors travel
by name, and not only to the next segment: in Coral's SSD MobileNetV2 cut into 4, segment 0's
`expanded_conv_13` output is read by segment 3. So the chain holds when every input of segment
i is an input of segment 0 or an output of an earlier segment, with the same shape, type and
quantization, and every output of a segment but the last is read later (an output nobody reads
means a segment is missing or from another compile). The last segment's outputs are the
model's; any ops after its `edgetpu-custom-op` (SSD's post-process) run on the CPU there.

Pure code over parsed models: nothing here opens a runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence

from typing_extensions import TypedDict

from edgeapp.core import naming
from edgeapp.core.tflite.model import Tensor, TfliteModel
from edgeapp.errors import InvalidModel, UsageError

EDGETPU_OP = "edgetpu-custom-op"


def find_segment_files(path: str | Path) -> Optional[list[Path]]:
    """The segment files `path` stands for, in order, or None when it names no segment set.

    Any one segment names its set; so does the base name `X` (or `X_edgetpu.tflite`) when no
    such model file exists but `X_segment_*_of_N_edgetpu.tflite` files do. An existing model
    file that is not a segment (`X.tflite`, the CPU twin) is never taken for its segments.
    """
    p = Path(path)
    if naming.parse_segment(p) is not None:
        paths = naming.segment_paths(p)
        if not p.exists():
            raise InvalidModel(f"{p}: no such segment file")
    elif p.exists():
        return None
    else:
        sets = naming.segment_sets_of(p)
        if not sets:
            return None
        if len(sets) > 1:
            counts = ", ".join(str(n) for n in sorted(sets))
            raise UsageError(f"{p}: segment sets of {counts} segments are there; name one segment "
                             "file of the set you mean")
        (count, found), = sets.items()
        paths = naming.segment_paths(found[0])
    missing = [str(q) for q in paths if not q.exists()]
    if missing:
        raise InvalidModel(f"segment set of {len(paths)} is incomplete: {', '.join(missing)} not found")
    if len(paths) < 2:
        raise InvalidModel(f"{p}: a segment set needs at least 2 segments")
    return paths


def set_label(paths: Sequence[Path]) -> str:
    """One name for the whole set, for records and messages: `dir/X_segment_{0..3}_of_4_edgetpu.tflite`."""
    base, _, count = naming.parse_segment(paths[0])
    stem = naming.edgetpu_stem(naming.segment_stem(base, "{0..%d}" % (count - 1), count))
    return str(Path(paths[0]).with_name(stem + ".tflite"))


@dataclass(frozen=True)
class Hop:
    """What segment `index` reads and where each input comes from (-1: the model input)."""

    index: int
    path: str
    inputs: tuple  # tensor names, in the segment's input order
    outputs: tuple  # tensor names, in the segment's output order
    sources: tuple  # per input: the segment that produced it, -1 for the pipeline's input
    cpu_ops: tuple  # operators that run on the CPU in this segment (after or beside the TPU op)


class HopJson(TypedDict):
    """One segment of a chain: its tensors, where its inputs come from, what skips past it."""
    index: int
    path: str
    inputs: List[str]
    outputs: List[str]
    sources: List[int]
    cpu_ops: List[str]
    passed_through: List[str]


class ChainJson(TypedDict):
    segments: List[HopJson]


@dataclass
class Chain:
    """A checked segment set: how tensors flow, and which may be dropped after which segment."""

    hops: list[Hop]
    last_use: dict = field(default_factory=dict)  # tensor name -> last segment that reads it

    @property
    def count(self) -> int:
        return len(self.hops)

    def passed_through(self, index: int) -> list[str]:
        """Tensors that skip past segment `index` (made before it, read after it)."""
        made = {n for h in self.hops[:index] for n in h.outputs}
        return sorted(n for n in made if self.last_use.get(n, -1) > index)

    def to_json(self) -> ChainJson:
        return {"segments": [{"index": h.index, "path": h.path, "inputs": list(h.inputs),
                              "outputs": list(h.outputs), "sources": list(h.sources),
                              "cpu_ops": list(h.cpu_ops),
                              "passed_through": self.passed_through(h.index)} for h in self.hops]}


def _short(name: str) -> str:
    """Compiler tensor names join every fused op with `;`: the first one names it well enough."""
    first = name.split(";")[0]
    return first if len(first) <= 100 else first[:97] + "..."


def _signature(t: Tensor) -> tuple:
    q = t.quantization
    quant = (tuple(round(s, 9) for s in q.scale), tuple(q.zero_point)) if q and q.scale else None
    return tuple(t.shape), t.dtype, quant


def _describe(sig: tuple) -> str:
    shape, dtype, quant = sig
    text = f"{dtype}{list(shape)}"
    if quant:
        text += f" (scale {quant[0][0]:g}, zero point {quant[1][0] if quant[1] else 0})"
    return text


def check_chain(models: Sequence[TfliteModel]) -> Chain:
    """The chain of `models` (segment 0 first), or InvalidModel saying where it breaks."""
    if len(models) < 2:
        raise InvalidModel("a segment set needs at least 2 segments")
    available: dict[str, tuple[tuple, int]] = {}  # name -> (signature, producing segment)
    for t in models[0].input_tensors:
        available[t.name] = (_signature(t), -1)
    hops, last_use = [], {}
    for i, m in enumerate(models):
        name = Path(m.path).name
        if not m.is_edgetpu_compiled:
            raise InvalidModel(f"segment {i} ({name}) is not compiled for the Edge TPU")
        sources = []
        for t in m.input_tensors:
            if t.name not in available:
                raise InvalidModel(f"broken segment chain: input {_short(t.name)!r} of segment {i} "
                                   f"({name}) is not produced by any earlier segment; the files are "
                                   "not one compile")
            sig, source = available[t.name]
            if sig != _signature(t):
                raise InvalidModel(f"broken segment chain: {_short(t.name)!r} is {_describe(sig)} out of "
                                   f"{'the input' if source < 0 else f'segment {source}'} but segment "
                                   f"{i} ({name}) reads {_describe(_signature(t))}")
            sources.append(source)
            last_use[t.name] = i
        for t in m.output_tensors:
            available[t.name] = (_signature(t), i)
        cpu_ops = tuple(op.op for op in m.operators if op.op != EDGETPU_OP)
        hops.append(Hop(i, str(m.path), tuple(t.name for t in m.input_tensors),
                        tuple(t.name for t in m.output_tensors), tuple(sources), cpu_ops))
    for h in hops[:-1]:
        unread = [n for n in h.outputs if last_use.get(n, -1) <= h.index]
        if unread:
            raise InvalidModel(f"broken segment chain: output {_short(unread[0])!r} of segment {h.index} "
                               f"({Path(h.path).name}) is read by no later segment; a segment is "
                               "missing or from another compile")
    return Chain(hops, last_use)
