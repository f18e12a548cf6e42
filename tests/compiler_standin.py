"""A stand-in Edge TPU compiler laid out exactly as Google's folder, and packages made of it.

`build_bundle` compiles tests/standin_compiler/edgetpu_compiler.c with gcc for this x86-64 host
and lays it out as Google's compiler/x86_64 folder: the wrapper script, and
edgetpu_compiler_bin/ with the binary, the host's own loader (ld-linux-x86-64.so.2) and libc,
NOTICE and LICENSES, so edgeapp runs it through that loader as it runs Google's. `make_deb`
packs such a folder as Coral's edgetpu-compiler_*.deb (ar: debian-binary, control.tar.xz,
data.tar.xz with ./usr/bin/edgetpu_compiler_bin/...), `make_tar_gz` as a .tar.gz.
"""

from __future__ import annotations

import io
import platform
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "standin_compiler" / "edgetpu_compiler.c"
WRAPPER = ('#!/bin/bash\nd="$(dirname "${BASH_SOURCE[0]}")"\n${d}/edgetpu_compiler_bin/ld-linux-x86-64.so.2 '
           '--library-path ${d}/edgetpu_compiler_bin ${d}/edgetpu_compiler_bin/edgetpu_compiler "$@"')
INSTALL_GCC = "apt-get install -y gcc libc6-dev"


def why_not() -> str:
    """Why the stand-in cannot be built here ('' when it can)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"the stand-in compiler is an x86-64 Linux program, this is {platform.machine()}"
    if shutil.which("gcc") is None:
        return f"needs gcc: {INSTALL_GCC}"
    return ""


def _host_file(name: str) -> Path:
    out = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True,
                         check=True).stdout.strip()
    return Path(out).resolve()


def build_bundle(dest: Path, version: str = "16.0.384591198") -> Path:
    """`dest/` laid out as Google's compiler/x86_64 folder; returns `dest`."""
    bin_dir = dest / "edgetpu_compiler_bin"
    bin_dir.mkdir(parents=True)
    subprocess.run(["gcc", "-O2", f'-DSTANDIN_VERSION="{version}"', "-o",
                    str(bin_dir / "edgetpu_compiler"), str(SOURCE)], check=True)
    shutil.copy(_host_file("ld-linux-x86-64.so.2"), bin_dir / "ld-linux-x86-64.so.2")
    shutil.copy(_host_file("libc.so.6"), bin_dir / "libc.so.6")
    (bin_dir / "NOTICE").write_text("Stand-in NOTICE: this is not Google's compiler.\nSecond line.\n")
    (bin_dir / "LICENSES").write_text("Stand-in LICENSES.\n")
    (dest / "edgetpu_compiler").write_text(WRAPPER)
    (dest / "edgetpu_compiler").chmod(0o755)
    return dest


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _data_tar(bundle: Path, prefix: str, compression: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=f"w:{compression}") as tar:
        _add(tar, f"{prefix}edgetpu_compiler", (bundle / "edgetpu_compiler").read_bytes(), 0o755)
        for f in sorted((bundle / "edgetpu_compiler_bin").iterdir()):
            _add(tar, f"{prefix}edgetpu_compiler_bin/{f.name}", f.read_bytes(),
                 0o644 if f.name in ("NOTICE", "LICENSES") else 0o755)
        _add(tar, "./usr/share/doc/edgetpu-compiler/copyright", b"stand-in\n")
    return buf.getvalue()


def make_deb(bundle: Path, deb: Path, version: str = "16.0") -> Path:
    """Coral's edgetpu-compiler_VERSION_amd64.deb layout, as an `ar` archive."""
    control = io.BytesIO()
    with tarfile.open(fileobj=control, mode="w:xz") as tar:
        _add(tar, "./control", (f"Package: edgetpu-compiler\nVersion: {version}\nArchitecture: amd64\n"
                                "Maintainer: stand-in\nDescription: stand-in Edge TPU compiler\n").encode())
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", control.getvalue()),
               ("data.tar.xz", _data_tar(bundle, "./usr/bin/", "xz"))]
    with open(deb, "wb") as out:
        out.write(b"!<arch>\n")
        for name, data in members:
            header = f"{name:<16}{int(time.time()):<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n"
            out.write(header.encode("ascii"))
            out.write(data + (b"\n" if len(data) % 2 else b""))
    return deb


def make_tar_gz(bundle: Path, path: Path) -> Path:
    path.write_bytes(_data_tar(bundle, "edgetpu_compiler/", "gz"))
    return path
