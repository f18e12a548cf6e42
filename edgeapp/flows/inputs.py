"""Expand command-line inputs (files, folders, globs, `-` for stdin) into a list of paths."""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, TextIO

from edgeapp.errors import UsageError

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp",
                            ".ppm", ".pgm", ".pbm", ".pnm", ".jfif", ".ico", ".tga"})


def expand_inputs(args: Iterable[str], stdin: Optional[TextIO] = None,
                  suffixes: frozenset[str] = IMAGE_SUFFIXES,
                  on_notice: Optional[Callable[[str], None]] = None) -> list[str]:
    """Files as given; folders walked recursively (image suffixes only, sorted); globs expanded.

    A file named explicitly is kept whatever its suffix, so a bad file gives an error record;
    a path that does not exist is kept too (an error record, the batch goes on) and named to
    `on_notice`, since the results file is not where a user looks for a typo. Nothing at all to
    process, or nothing but missing paths, is a usage error: a typo'd folder should not look
    like success, nor like a batch whose one image failed.
    """
    args = list(args)
    out: list[str] = []
    missing: list[str] = []
    for arg in args:
        if arg == "-":
            read = [line.strip() for line in (stdin or sys.stdin) if line.strip()]
            if not read and args == ["-"]:
                raise UsageError("no image paths on stdin (-): give one path per line")
            out.extend(read)
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
            missing.append(arg)
            out.append(arg)  # reported per input as "no such file", the batch goes on
    if missing and len(missing) == len(out):
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    for arg in missing:
        if on_notice is not None:
            on_notice(f"warning: {arg}: no such file or folder (a failed record in the results)")
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
