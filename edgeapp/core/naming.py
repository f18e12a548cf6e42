"""How Edge TPU files are named: the one owner of `_edgetpu`, segment and sidecar names.

edgetpu_compiler writes `X_edgetpu.tflite` (+ `X_edgetpu.log`) for `X.tflite`, and
`X_segment_I_of_N_edgetpu.tflite` with `--num_segments N`; edgeapp keeps the CPU twin `X.tflite`
and its sidecar `X.json` beside them, which is what the CPU fallback and labels look for.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

EDGETPU_SUFFIX = "_edgetpu"
_SEGMENT_RE = re.compile(r"^(?P<base>.+)_segment_(?P<index>\d+)_of_(?P<count>\d+)$")

PathLike = Union[str, Path]


def edgetpu_stem(stem: str) -> str:
    """`X` -> `X_edgetpu`: what the compiler calls its output."""
    return stem + EDGETPU_SUFFIX


def edgetpu_twin_path(path: PathLike) -> Path:
    """Where the compiled build of `X.tflite` lives: `X_edgetpu.tflite` beside it."""
    p = Path(path)
    return p.with_name(edgetpu_stem(p.stem) + p.suffix)


def cpu_twin_path(path: PathLike) -> Path:
    """Where the CPU model of `X_edgetpu.tflite` lives: `X.tflite` beside it."""
    p = Path(path)
    stem = p.stem[: -len(EDGETPU_SUFFIX)] if p.stem.endswith(EDGETPU_SUFFIX) else p.stem
    return p.with_name(stem + p.suffix)


def compiler_outputs(model: PathLike, out_dir: PathLike, segments: Optional[int] = None
                     ) -> list:
    """(X_edgetpu.tflite, X_edgetpu.log) as the compiler names them, one pair per segment."""
    stem, out = Path(model).stem, Path(out_dir)
    names = ([segment_stem(stem, i, segments) for i in range(segments)]
             if segments and segments > 1 else [stem])
    return [(out / (edgetpu_stem(n) + ".tflite"), out / (edgetpu_stem(n) + ".log")) for n in names]


def segment_stem(base: str, index: int, count: int) -> str:
    return f"{base}_segment_{index}_of_{count}"


def parse_segment(path: PathLike) -> Optional[Tuple[str, int, int]]:
    """(base, index, count) of `X_segment_I_of_N_edgetpu.tflite`, or None for other names."""
    stem = Path(path).stem
    if stem.endswith(EDGETPU_SUFFIX):
        stem = stem[: -len(EDGETPU_SUFFIX)]
    m = _SEGMENT_RE.match(stem)
    if not m:
        return None
    return m.group("base"), int(m.group("index")), int(m.group("count"))


def segment_paths(path: PathLike) -> Optional[list]:
    """All N segment files of the set `path` belongs to, in order (they may not all exist)."""
    parsed = parse_segment(path)
    if parsed is None:
        return None
    base, _, count = parsed
    p = Path(path)
    return [p.with_name(edgetpu_stem(segment_stem(base, i, count)) + ".tflite") for i in range(count)]


def sidecar_path(model_path: PathLike) -> Path:
    """`X.json` beside `X.tflite`: labels and preprocessing written by convert."""
    return Path(model_path).with_suffix(".json")


def report_path(model_path: PathLike) -> Path:
    """`X.report.json` beside `X.tflite`: convert --report's per-layer quantization errors."""
    return Path(model_path).with_suffix(".report.json")


def report_plot_path(model_path: PathLike) -> Path:
    """`X.report.png` beside `X.tflite`: the picture of convert --report."""
    return Path(model_path).with_suffix(".report.png")


def convert_log_path(model_path: PathLike) -> Path:
    """`X.onnx2tf.log` beside `X.tflite`: what onnx2tf printed while converting an ONNX model."""
    return Path(model_path).with_suffix(".onnx2tf.log")


def segment_source(path: PathLike) -> Path:
    """`X.tflite` beside `X_segment_I_of_N_edgetpu.tflite`: the model the compiler split, which
    is also the CPU twin of the whole pipeline."""
    parsed = parse_segment(path)
    p = Path(path)
    return p.with_name((parsed[0] if parsed else p.stem) + ".tflite")


def segment_sets_of(base: PathLike) -> dict:
    """The segment files found for the base name `X` (or `X.tflite`, `X_edgetpu.tflite`):
    {N: [paths of X_segment_I_of_N_edgetpu.tflite found, by I]}, for every N on disk."""
    p = Path(base)
    stem = p.name[: -len(".tflite")] if p.name.endswith(".tflite") else p.name
    if stem.endswith(EDGETPU_SUFFIX):
        stem = stem[: -len(EDGETPU_SUFFIX)]
    found: dict = {}
    folder = p.parent if str(p.parent) else Path(".")
    for f in sorted(folder.glob(f"{glob_escape(stem)}_segment_*_of_*{EDGETPU_SUFFIX}.tflite")):
        parsed = parse_segment(f)
        if parsed and parsed[0] == stem:
            found.setdefault(parsed[2], []).append(f)
    return {n: sorted(fs, key=lambda f: parse_segment(f)[1]) for n, fs in found.items()}


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def distinct_names(paths: Sequence[PathLike]) -> List[str]:
    """Short names that tell models apart in a table: each file's name, with as many of its
    folders as it takes when two share it (`a/model.tflite`, `b/model.tflite`); the same
    path given twice gets its position (`model.tflite #2`)."""
    parts = [Path(str(p)).parts or (str(p),) for p in paths]
    depth = [1] * len(parts)
    while True:
        names = ["/".join(ps[-d:]) for ps, d in zip(parts, depth)]
        clash = {n for n in names if names.count(n) > 1}
        grow = [i for i, n in enumerate(names) if n in clash and depth[i] < len(parts[i])]
        if not grow:
            break
        for i in grow:
            depth[i] += 1
    seen: dict = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n} #{seen[n]}")
    return out
