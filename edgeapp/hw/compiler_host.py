"""How Google's x86-64 Linux compiler files run on this machine: natively on x86-64 Linux,
through QEMU user-mode emulation on ARM Linux, in a `linux/amd64` Docker container elsewhere.

The files carry their own loader and libraries, so running them is one argv (never a shell):
`[EMULATOR] DIR/ld-linux-x86-64.so.2 --library-path DIR DIR/edgetpu_compiler ARGS`, exactly what
Google's wrapper script does. An emulator is `qemu-x86_64` (or `-static`) on PATH, or the
kernel's binfmt_misc registration for x86-64 ELF files (read under the one system root,
EDGEAPP_SYSROOT), with which the loader is started as it is. `EDGEAPP_COMPILER_RUN`
(auto, native, qemu, docker) overrides the choice.
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import List, Mapping, Optional, Sequence, Tuple

from edgeapp.core.edgetpu.compiler_files import BIN, BINARY, LOADER
from edgeapp.errors import MissingDependency, UsageError
from edgeapp.hw.sysroot import Root, sysroot, under

RUN_ENV = "EDGEAPP_COMPILER_RUN"
IMAGE_ENV = "EDGEAPP_COMPILER_IMAGE"
DOCKER_IMAGE = "debian:bookworm-slim"  # any linux/amd64 image: the files bring their own libc
QEMU_NAMES = ("qemu-x86_64", "qemu-x86_64-static")
CONTAINER_BIN = "/opt/edgetpu_compiler_bin"
# x86-64 ELF executables as binfmt_misc matches them (e_ident + e_type + e_machine 0x3e)
X86_64_MAGIC = "7f454c4602010100000000000000000002003e00"
EMULATION_TIMEOUT_FACTOR = 5  # a compile under QEMU or Docker's emulation takes several times longer
MODES = ("native", "qemu", "binfmt", "docker")


@dataclass(frozen=True)
class CompilerRunner:
    """How a compiler folder runs here: `mode` and the argv prefix before the loader."""

    mode: str  # native, qemu, binfmt, docker
    emulator: Optional[str] = None  # the qemu executable, or the docker executable
    detail: str = ""  # how it was found, for `compiler show` and doctor

    @property
    def emulated(self) -> bool:
        return self.mode != "native"

    def describe(self) -> str:
        what = {"native": "natively (x86-64 Linux)",
                "qemu": f"through QEMU user-mode emulation ({self.emulator})",
                "binfmt": "through the kernel's binfmt_misc x86-64 emulator",
                "docker": f"in a linux/amd64 Docker container ({self.emulator})"}[self.mode]
        return what + (f"; {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class Bundle:
    """A compiler folder laid out as Google's: `<dir>/edgetpu_compiler_bin/{loader, binary, libs}`."""

    bin_dir: Path

    @property
    def loader(self) -> Path:
        return self.bin_dir / LOADER

    @property
    def binary(self) -> Path:
        return self.bin_dir / BINARY


def bundle_at(path: Path) -> Optional[Bundle]:
    """The bundle a path names: a folder holding edgetpu_compiler_bin/, that folder itself, or
    Google's wrapper script beside it; None when it is none of these."""
    for d in (path, path / BIN, path.parent / BIN):
        if (d / LOADER).is_file() and (d / BINARY).is_file() and d.name == BIN:
            return Bundle(d)
    return None


def host_kind() -> Tuple[str, str]:
    """(system, machine) of this Python: ('Linux', 'aarch64'), ('Darwin', 'arm64')."""
    return platform.system(), platform.machine().lower()


def is_x86_64_linux(system: str, machine: str) -> bool:
    return system == "Linux" and machine in ("x86_64", "amd64")


def binfmt_x86_64(root: Root = None) -> Optional[str]:
    """The name of an enabled binfmt_misc registration for x86-64 ELF files, else None."""
    base = under(root, "/proc/sys/fs/binfmt_misc")
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return None
    for entry in entries:
        if entry.name in ("register", "status") or not entry.is_file():
            continue
        try:
            text = entry.read_text(errors="replace")
        except OSError:
            continue
        fields = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
        magic = fields.get("magic", "").strip().lower()
        mask = fields.get("mask", "").strip().lower()
        if text.startswith("enabled") and _magic_matches(magic, mask):
            return entry.name
    return None


def _magic_matches(magic: str, mask: str) -> bool:
    """The registration matches x86-64 executables (magic & mask == our header & mask)."""
    if not magic or len(magic) > len(X86_64_MAGIC):
        return False
    want = bytes.fromhex(X86_64_MAGIC)[:len(magic) // 2]
    got = bytes.fromhex(magic)
    m = bytes.fromhex(mask) if mask and len(mask) == len(magic) else b"\xff" * len(got)
    return all((a & k) == (b & k) for a, b, k in zip(got, want, m))


def choose_runner(env: Optional[Mapping[str, str]] = None, root: Root = None,
                  system: Optional[str] = None, machine: Optional[str] = None) -> CompilerRunner:
    """How the x86-64 files run here, or MissingDependency with the one thing to install."""
    env = os.environ if env is None else env
    sys_name, mach = host_kind()
    sys_name, mach = system or sys_name, (machine or mach).lower()
    wanted = (env.get(RUN_ENV) or "auto").strip().lower()
    if wanted not in ("auto",) + MODES:
        raise UsageError(f"{RUN_ENV}={wanted!r}: use auto, native, qemu or docker")
    if wanted == "native" or (wanted == "auto" and is_x86_64_linux(sys_name, mach)):
        return CompilerRunner("native")
    if wanted in ("qemu", "binfmt") or (wanted == "auto" and sys_name == "Linux"):
        found = _emulator(env, root)
        if found is None:
            raise MissingDependency(qemu_missing(mach, root))
        return found
    docker = shutil.which("docker", path=env.get("PATH"))
    if docker is None:
        raise MissingDependency(docker_missing(sys_name, mach))
    return CompilerRunner("docker", docker)


def _emulator(env: Mapping[str, str], root: Root) -> Optional[CompilerRunner]:
    for name in QEMU_NAMES:
        found = shutil.which(name, path=env.get("PATH"))
        if found:
            return CompilerRunner("qemu", found, "from PATH")
    reg = binfmt_x86_64(root)
    return CompilerRunner("binfmt", None, f"registration {reg}") if reg else None


def qemu_missing(machine: str, root: Root = None) -> str:
    """The error for ARM Linux without an x86-64 emulator: what to install on this system."""
    from edgeapp.core.install.plan import qemu_install_line
    from edgeapp.hw.osinfo import read_platform

    line = qemu_install_line(read_platform(sysroot(root)))
    return (f"the Edge TPU compiler is an x86-64 program and this is {machine} Linux: it runs "
            f"through QEMU user-mode emulation, which is not installed ({' or '.join(QEMU_NAMES)} "
            f"on PATH, or a binfmt_misc x86-64 registration); {line}")


def docker_missing(system: str, machine: str) -> str:
    where = {"Darwin": "macOS", "Windows": "Windows"}.get(system, f"{system} {machine}")
    return (f"the Edge TPU compiler is an x86-64 Linux program: on {where} edgeapp runs it in a "
            "linux/amd64 Docker container, and `docker` is not on PATH; install Docker Desktop "
            "(docs.docker.com/desktop) and start it, or compile on an x86-64 Linux machine")


def compiler_argv(runner: CompilerRunner, bundle: Bundle, args: Sequence[str], env: Optional[Mapping[str, str]] = None,
            folders: Sequence[str] = ()) -> List[str]:
    """The argv that runs the compiler of `bundle` with `args`, as Google's wrapper does.
    `folders`: what a container must mount (the model's and the output's), at the same paths."""
    if runner.mode == "docker":
        return _docker_argv(runner, bundle, args, env or os.environ, folders)
    inner = [str(bundle.loader), "--library-path", str(bundle.bin_dir), str(bundle.binary), *args]
    return ([runner.emulator] if runner.mode == "qemu" and runner.emulator else []) + inner


def _docker_argv(runner: CompilerRunner, bundle: Bundle, args: Sequence[str], env: Mapping[str, str],
                 folders: Sequence[str]) -> List[str]:
    argv = [runner.emulator or "docker", "run", "--rm", "--platform", "linux/amd64"]
    if hasattr(os, "getuid"):  # files the compiler writes belong to the user, not root
        argv += ["--user", f"{os.getuid()}:{os.getgid()}"]
    argv += ["-v", f"{bundle.bin_dir}:{CONTAINER_BIN}:ro"]
    seen = set()
    for folder in folders:
        real = os.path.abspath(folder)
        if real not in seen:
            seen.add(real)
            argv += ["-v", f"{real}:{real}"]
    if folders:
        argv += ["-w", os.path.abspath(folders[0])]
    image = env.get(IMAGE_ENV) or DOCKER_IMAGE
    return argv + [image, f"{CONTAINER_BIN}/{LOADER}", "--library-path", CONTAINER_BIN,
                   f"{CONTAINER_BIN}/{BINARY}", *args]
