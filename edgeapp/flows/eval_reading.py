"""Bounded, safe reading of labelled data files: only regular files are opened (a FIFO or a
device among them would block the reader), sizes are capped before reading, JSON and YAML are
capped in depth and YAML aliases are refused (a "billion laughs" bomb expands a few hundred
bytes into gigabytes). Every failure is a UsageError (exit 2) naming the file.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from types import ModuleType
from typing import Any, Union

from edgeapp.core.limits import MAX_JSON_BYTES, MAX_NESTING, MAX_TEXT_BYTES, MAX_YAML_BYTES
from edgeapp.errors import MissingDependency, UsageError

PathLike = Union[str, Path]
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def file_kind(path: PathLike) -> str:
    """'' for a regular file (symlinks followed), 'missing', else what it is ('a FIFO', ...)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    if stat.S_ISREG(mode):
        return ""
    return next((word for test, word in _KINDS if test(mode)), "not a regular file")


def check_regular(path: PathLike, what: str = "labelled data") -> None:
    """Exit 2 unless `path` is a regular file (never opened otherwise: a FIFO would block)."""
    kind = file_kind(path)
    if kind:
        raise UsageError(f"{what} {path}: " + ("not found" if kind == "missing" else
                                               f"{kind}, not a regular file"))


def read_bytes(path: PathLike, limit: int, what: str = "labelled data") -> bytes:
    """A regular file's bytes, at most `limit` of them (exit 2 beyond)."""
    check_regular(path, what)
    try:
        fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped since the check
                raise UsageError(f"{what} {path}: not a regular file")
            data = f.read(limit + 1)
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot read it ({e.strerror or e})") from None
    if len(data) > limit:
        raise UsageError(f"{what} {path}: larger than {limit // (1024 * 1024)} MB")
    return data


def read_text(path: PathLike, limit: int = MAX_TEXT_BYTES, what: str = "labelled data") -> str:
    """A regular file as UTF-8 text (a BOM dropped); exit 2 when it is not UTF-8."""
    data = read_bytes(path, limit, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{what} {path}: not UTF-8 text (byte {e.start}: "
                         f"{data[e.start:e.start + 1]!r})") from None
    if "\0" in text:
        raise UsageError(f"{what} {path}: not a text file (it has NUL bytes)")
    return text[1:] if text.startswith("\ufeff") else text


def load_json(path: PathLike) -> Any:
    """A JSON document at most MAX_NESTING deep: the depth is counted before json parses it, as
    json's parser recurses in C and overflows the stack (a crash, not a RecursionError) on deep
    input once any library has raised the recursion limit (onnx2tf does)."""
    text = read_text(path, MAX_JSON_BYTES)
    if json_nesting(text) > MAX_NESTING:
        raise UsageError(f"labelled data {path}: nested deeper than {MAX_NESTING} levels")
    try:
        doc = json.loads(text)
    except RecursionError:
        raise UsageError(f"labelled data {path}: nested deeper than {MAX_NESTING} levels") from None
    except ValueError as e:
        raise UsageError(f"labelled data {path}: not a readable JSON file ({e})") from None
    _check_depth(doc, path)
    return doc


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_CHUNK = 1 << 24


def json_nesting(text: str) -> int:
    """The deepest nesting of a JSON text's arrays and objects, counted on its brackets outside
    strings (in chunks, so a large file costs no more than a chunk's arrays)."""
    import numpy as np

    bare = _JSON_STRING.sub("", text).encode("utf-8", "ignore")
    depth = deepest = 0
    for start in range(0, len(bare), _CHUNK):
        b = np.frombuffer(bare, dtype=np.uint8, count=min(_CHUNK, len(bare) - start), offset=start)
        steps = (b == 91).astype(np.int64) + (b == 123) - (b == 93) - (b == 125)  # [ { ] }
        running = np.cumsum(steps) + depth
        if running.size:
            deepest, depth = max(deepest, int(running.max())), int(running[-1])
    return deepest


def _check_depth(doc: object, path: PathLike) -> None:
    level = [doc]
    for depth in range(MAX_NESTING + 1):
        level = [v for node in level if isinstance(node, (list, dict))
                 for v in (node.values() if isinstance(node, dict) else node)
                 if isinstance(v, (list, dict))]
        if not level:
            return
    raise UsageError(f"labelled data {path}: nested deeper than {MAX_NESTING} levels")


def load_yaml(path: PathLike) -> Any:
    """yaml.safe_load's types, without aliases and at most MAX_NESTING deep."""
    try:
        import yaml
    except ImportError:
        raise MissingDependency("reading a data.yaml needs PyYAML: pip install 'edgeapp[eval]'") from None
    text = read_text(path, MAX_YAML_BYTES)
    loader = None
    try:
        loader = _bounded_loader(yaml)(text)  # its reader refuses control characters here
        return loader.get_single_data()
    except yaml.YAMLError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"labelled data {path}: not a readable YAML file ({first})") from None
    except (RecursionError, ValueError, TypeError, OverflowError) as e:
        raise UsageError(f"labelled data {path}: not a readable YAML file ({e})") from None
    finally:
        if loader is not None:
            loader.dispose()


_LOADER: Any = None


def _bounded_loader(yaml: ModuleType) -> Any:
    """SafeLoader whose composer refuses aliases and nodes deeper than MAX_NESTING."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER

    class BoundedLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: object, index: object) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.YAMLError(f"line {mark.line + 1}: aliases (*name) are not allowed here")
            self.depth += 1
            try:
                if self.depth > MAX_NESTING:
                    mark = self.peek_event().start_mark
                    raise yaml.YAMLError(f"line {mark.line + 1}: nested deeper than {MAX_NESTING} levels")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    _LOADER = BoundedLoader
    return _LOADER
