"""Google's Edge TPU compiler as files: where they are published, what each must hash to, how
they are laid out and run, and what each compiler version emits. The one owner of these facts.

Google's last public copy of the compiler is the folder `compiler/x86_64/` of
github.com/google-coral/edgetpu (release "eel2", commit 3b625cd..., still the tree at HEAD):
compiler 14.1.317412892 with its own loader and C/C++ libraries, run by a 3-line wrapper as
`edgetpu_compiler_bin/ld-linux-x86-64.so.2 --library-path edgetpu_compiler_bin
edgetpu_compiler_bin/edgetpu_compiler ARGS`. Coral's `edgetpu-compiler_16.0_amd64.deb` (compiler
16.0.384591198, the last release) has the same layout under `usr/bin/`. The git blob ids below
are `git ls-tree -r -l 3b625cd compiler/x86_64` of a clone of google-coral/edgetpu; sizes where
that listing has them (the compiler binary's was not in the copy we read). Pure data.
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

from edgeapp.core.registry import FileRef

REPOSITORY = "github.com/google-coral/edgetpu"
COMMIT = "3b625cddfe8886f15978221a02cda2e52044b24c"
FOLDER = "compiler/x86_64"
DEFAULT_URL = f"https://raw.githubusercontent.com/google-coral/edgetpu/{COMMIT}/{FOLDER}/"
URL_ENV = "EDGEAPP_COMPILER_URL"  # a mirror of that folder (http(s):// or file://), ending in /
PINNED_VERSION = "14.1.317412892"

BIN = "edgetpu_compiler_bin"  # the folder of the binary, its loader and libraries
LOADER = "ld-linux-x86-64.so.2"
BINARY = "edgetpu_compiler"
NOTICES = ("NOTICE", "LICENSES")  # shown before first use; edgeapp never redistributes the files

PINNED: Tuple[FileRef, ...] = (
    FileRef("edgetpu_compiler", "2b4f6e538fbd4edaddf99b80433f7e66cee4691e", 182),
    FileRef(f"{BIN}/edgetpu_compiler", "ee1bd4ac60819666cb711c176a4cc2fbc1697503"),
    FileRef(f"{BIN}/{LOADER}", "6586b459f7be1abefa0fcde92892829d6ab7d49c", 169552),
    FileRef(f"{BIN}/libc++.so.1", "5464d59b1972fdb014fd7e3e967b1585929b7ea7", 788920),
    FileRef(f"{BIN}/libc++abi.so.1", "a02ced52ee3436af97cb16bda7376da65496210b", 211616),
    FileRef(f"{BIN}/libc.so.6", "305b599a6afe2e8bf2f8a7f7986a97323bf3aa73", 1795984),
    FileRef(f"{BIN}/libdl.so.2", "1f6d98946211ce92a08ef23c4885f11655e230f1", 14448),
    FileRef(f"{BIN}/libm.so.6", "6b4fd5586651c4da3361b22b6652abcb2b90eb50", 1435680),
    FileRef(f"{BIN}/libpthread.so.0", "6511291b2de9c7dbe786f55d1a49932b07f14f2f", 105496),
    FileRef(f"{BIN}/libresolv.so.2", "36a157d5f56bce77ff5fe4d3ea3912ee42a6459c", 84008),
    FileRef(f"{BIN}/librt.so.1", "c710eed5591db870a1acaf9582afa32117d18b49", 31056),
    FileRef(f"{BIN}/LICENSES", "7ae9326f63c9853e41617bb57449c3165acb3288", 186309),
    FileRef(f"{BIN}/NOTICE", "d5b45f8db0fdadcce6fece7f9bedbebcc0c8b6c1", 4020),
)

# What the compiler prints for --version: "Edge TPU Compiler version 16.0.384591198".
_VERSION = re.compile(r"version\s+(\d+(?:\.\d+)*)", re.I)

# Edge TPU runtime version each compiler emits by default (Coral's compiler docs: "compiler
# 14/15 → runtime 13, 16 → runtime 14"), and the libedgetpu release that first runs it.
RUNTIME_OF_COMPILER = {14: 13, 15: 13, 16: 14}
LIBEDGETPU_OF_RUNTIME = {13: "15.0", 14: "16.0"}
DEFAULT_PREDICTION = 16  # what `check` predicts for when no compiler is installed


def parse_version(text: str) -> Optional[str]:
    """`16.0.384591198` from the compiler's --version output, else None."""
    m = _VERSION.search(text or "")
    return m.group(1) if m else None


def version_key(version: str) -> Tuple[int, ...]:
    """Sortable: (16, 0, 384591198); unknown parts sort first."""
    return tuple(int(p) for p in re.findall(r"\d+", version or "")[:4]) or (0,)


def major(version: Optional[str]) -> Optional[int]:
    key = version_key(version or "")
    return key[0] if key != (0,) else None


def runtime_needed(compiler_version: Optional[str], min_runtime: Optional[int] = None) -> Optional[int]:
    """The Edge TPU runtime version a compiled model needs: --min-runtime when given (the
    compiler then targets that older runtime), else what this compiler emits."""
    if min_runtime is not None:
        return min_runtime
    return RUNTIME_OF_COMPILER.get(major(compiler_version) or -1)


def runtime_text(runtime: Optional[int]) -> str:
    """`Edge TPU runtime 14 (libedgetpu 16.0 or newer)` for reports."""
    if runtime is None:
        return "unknown (compiler version unknown)"
    lib = LIBEDGETPU_OF_RUNTIME.get(runtime)
    return f"Edge TPU runtime {runtime}" + (f" (libedgetpu {lib} or newer)" if lib else "")


def safe_member(name: str) -> Optional[str]:
    """The path below `edgetpu_compiler_bin/` of an archive member, or None when it is outside
    that folder or could escape it (absolute, '..')."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts or BIN not in parts:
        return None
    rest = parts[parts.index(BIN) + 1:]
    return "/".join(rest) if rest else None
