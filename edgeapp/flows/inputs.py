"""Expand command-line inputs (files, folders, globs, `-` for stdin) into a list of paths."""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path
from typing import Iterable, Iterator, Optional, TextIO

from edgeapp.errors import UsageError

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp",
                            ".ppm", ".pgm", ".pbm", ".pnm", ".jfif", ".ico", ".tga"})


def expand_inputs(args: Iterable[str], stdin: Optional[TextIO] = None,
                  suffixes: frozenset[str] = IMAGE_SUFFIXES) -> list[str]:
    """Files as given; folders walked recursively (image suffixes only, sorted); globs expanded.

    A file named explicitly is kept whatever its suffix, so a bad file gives an error record.
    Nothing at all to process is a usage error: a typo'd folder should not look like success.
    """
    out: list[str] = []
    for arg in args:
        if arg == "-":
            out.extend(line.strip() for line in (stdin or sys.stdin) if line.strip())
        elif os.path.isdir(arg):
            out.extend(_walk(arg, suffixes))
        elif os.path.exists(arg):
            out.append(arg)
        elif glob.has_magic(arg):
            matches = sorted(glob.glob(arg, recursive=True))
            if not matches:
                raise UsageError(f"no files match {arg!r}")
            for m in matches:
                out.extend(_walk(m, suffixes) if os.path.isdir(m) else [m])
        else:
            out.append(arg)  # reported per input as "no such file", the batch goes on
    if not out:
        raise UsageError(f"no images found in {' '.join(args) or 'the input'} "
                         f"(looked for {', '.join(sorted(suffixes)[:6])}, ...)")
    return list(dict.fromkeys(out))


def _walk(folder: str, suffixes: frozenset[str]) -> Iterator[str]:
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if not f.startswith(".") and Path(f).suffix.lower() in suffixes:
                yield os.path.join(root, f)
