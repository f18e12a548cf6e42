"""The one module that opens the Edge TPU library (libedgetpu) with ctypes.

Which file (EDGEAPP_EDGETPU_LIB or the OS's name), where the loader would find it (without
loading it), opening it, its C API (`edgetpu_version`,
`edgetpu_list_devices`), which Debian package installed it, why it does not load, and whether
its build is known to crash under a TFLite runtime (core/install/pairing.py). Loading the library is
safe: none of this touches a TFLite runtime, which is where a mismatched build crashes.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import sys
import sysconfig
from pathlib import Path
from typing import List, Mapping, Optional, Tuple

from edgeapp.hw.sysroot import sysroot

EDGETPU_LIB_ENV = "EDGEAPP_EDGETPU_LIB"  # override the Edge TPU library (tests, custom builds)
_SYMBOLS = ("tflite_plugin_create_delegate", "edgetpu_version", "edgetpu_list_devices")


def edgetpu_library(env: Optional[Mapping[str, str]] = None) -> str:
    """The OS-specific Edge TPU runtime library name (or the EDGEAPP_EDGETPU_LIB override)."""
    override = (os.environ if env is None else env).get(EDGETPU_LIB_ENV)
    if override:
        return override
    return {"Darwin": "libedgetpu.1.dylib", "Windows": "edgetpu.dll"}.get(platform.system(),
                                                                        "libedgetpu.so.1")


def open_library(name: str) -> Tuple[ctypes.CDLL, str]:
    """Load the Edge TPU library (OSError when it cannot be) and return it with its real file path."""
    lib = ctypes.CDLL(name)
    return lib, library_file(lib, name)


def explain_load_error(message: str, library: str) -> str:
    """Why the library does not load, and the fix, in one line (from the loader's own message)."""
    text = " ".join((message or "").split())
    if "libusb" in text:
        return f"libusb-1.0 is missing ({libusb_fix()})"
    if os.path.exists(library):  # there, but not a loadable library for this machine
        return f"cannot load {library}: {text or 'unknown error'}"
    if library in text or "edgetpu" in text:
        return f"no {library}: install the Edge TPU runtime (`edgeapp doctor` prints the commands)"
    return f"cannot load {library}: {text}"


def libusb_fix() -> str:
    """How to install libusb-1.0, which libedgetpu links against (the loader names it when absent)."""
    return "brew install libusb" if sys.platform == "darwin" else "sudo apt-get install libusb-1.0-0"


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def library_file(lib: ctypes.CDLL, name: str) -> str:
    """The file the dynamic loader actually opened for `lib` (symlinks resolved)."""
    if sys.platform == "win32":
        buf = ctypes.create_unicode_buffer(1024)
        if ctypes.windll.kernel32.GetModuleFileNameW(ctypes.c_void_p(lib._handle), buf, 1024):
            return os.path.realpath(buf.value)
        return name
    dladdr = _dladdr()
    for symbol in _SYMBOLS:
        fn = getattr(lib, symbol, None)
        if fn is None or dladdr is None:
            continue
        info = _DlInfo()
        if dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode(errors="replace"))
    return os.path.realpath(name) if os.sep in name else name


def _dladdr():
    for candidate in (None, "libdl.so.2"):  # glibc < 2.34 keeps dladdr in libdl
        try:
            fn = ctypes.CDLL(candidate).dladdr
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        return fn
    return None


def build_label(lib: ctypes.CDLL) -> Optional[str]:
    """libedgetpu's `edgetpu_version()`, e.g. `BuildLabel(...), RuntimeVersion(14)`."""
    fn = getattr(lib, "edgetpu_version", None)
    if fn is None:
        return None
    fn.restype, fn.argtypes = ctypes.c_char_p, []
    raw = fn()
    return raw.decode(errors="replace") if raw else None


def short_version(label: Optional[str]) -> Optional[str]:
    """`RuntimeVersion(14)` out of the long build label (what pycoral's version check compares)."""
    if not label:
        return None
    m = re.search(r"RuntimeVersion\(\d+\)", label)
    return m.group(0) if m else label


def label_of(library: str) -> Optional[str]:
    """The build label of the library at `library`, None when it does not load or answer."""
    try:
        return build_label(open_library(library)[0])
    except Exception:  # a foreign library: never let it break a report
        return None


class _Device(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("path", ctypes.c_char_p)]  # edgetpu_c.h: edgetpu_device


def list_devices(lib: ctypes.CDLL) -> Optional[List[Tuple[str, str]]]:
    """(`usb` or `pci`, path) of each Edge TPU from `edgetpu_list_devices`; None without that API."""
    list_fn, free_fn = getattr(lib, "edgetpu_list_devices", None), getattr(lib, "edgetpu_free_devices", None)
    if list_fn is None:
        return None
    list_fn.restype, list_fn.argtypes = ctypes.POINTER(_Device), [ctypes.POINTER(ctypes.c_size_t)]
    count = ctypes.c_size_t(0)
    array = list_fn(ctypes.byref(count))
    raw = [(array[i].type, (array[i].path or b"").decode(errors="replace")) for i in range(count.value)]
    if array and free_fn is not None:
        free_fn.argtypes = [ctypes.POINTER(_Device)]
        free_fn(array)
    return [("usb" if kind == 1 else "pci", path) for kind, path in raw]  # edgetpu_device_type: 0 PCI, 1 USB


# --- which build is it ---------------------------------------------------------------------

def dpkg_owner(path: str, root=None) -> Optional[Tuple[str, str]]:
    """(package, version) of the installed Debian package that owns `path` (e.g. libedgetpu1-max, 16.0).

    Read from dpkg's database under `root` (info/*.list, status), as `dpkg-query -S` does; only
    packages named like *edgetpu* are searched. /lib and /usr/lib count as one (merged /usr).
    `root` None: the sysroot (hw/sysroot.py).
    """
    from edgeapp.core.install.debian import installed_version, parse_dpkg_status

    base = sysroot(root) / "var/lib/dpkg"
    info = base / "info"
    wanted = {_unmerged(path)}
    try:
        lists = sorted(info.glob("*edgetpu*.list")) if info.is_dir() else []
    except OSError:
        return None
    for listing in lists:
        try:
            files = listing.read_text(errors="replace").splitlines()
        except OSError:
            continue
        if not any(_unmerged(f.strip()) in wanted for f in files if f.strip()):
            continue
        package, _, arch = listing.name[: -len(".list")].partition(":")
        try:
            status = parse_dpkg_status((base / "status").read_text(errors="replace"))
        except OSError:
            status = []
        return package, installed_version(status, package, arch or None) or "unknown"
    return None


def _unmerged(path: str) -> str:
    return path[4:] if path.startswith("/usr/") else path


def identify_build(lib: ctypes.CDLL, path: str, root=None):
    """core.pairing.Build of the opened library: its Debian package, else its build label."""
    from edgeapp.core.install.pairing import identify

    return identify(dpkg_owner(path, root), build_label(lib))


def clock_mode(library: str, root=None) -> Tuple[Optional[str], str]:
    """(`std`, `max` or None, how we know) of the Edge TPU library `library` (core/edgetpu/clock.py):
    its Debian package under the sysroot, else its folder, else its build label."""
    from edgeapp.core.edgetpu.clock import build_mode

    try:
        lib, path = open_library(library)
    except OSError:
        return None, f"{library} does not load"
    owner = dpkg_owner(path, root)
    return build_mode(owner[0] if owner else None, path, build_label(lib))


def known_crash(lib: Optional[ctypes.CDLL], path: str, runtime: str, runtime_version: str,
                root=None, *, label: Optional[str] = None) -> Optional[str]:
    """One line naming both versions and this platform's fix when the pair is known to crash, else None.

    The build is the Debian package owning `path`, else its build label: read from `lib` when
    the library is open here, else `label` (the containment probe reads it in a child, since
    loading a crashing build here is what it guards against)."""
    from edgeapp.core.install.pairing import CRASH, decide, identify

    build = identify(dpkg_owner(path, root), build_label(lib) if lib is not None else label)
    decision = decide(build, runtime, runtime_version)
    if decision.verdict != CRASH:
        return None
    from edgeapp.core.install.plan import plan_for
    from edgeapp.hw.osinfo import read_platform

    return f"{decision.summary()}; fix: {plan_for(read_platform(sysroot(root))).fix}"


# --- where the loader would find the Edge TPU library, without loading it --------------------


def find_library_file(name: str) -> Optional[str]:
    """The file the dynamic loader would open for `name`, found without opening it (None: not found)."""
    if os.sep in name or (os.altsep and os.altsep in name):
        return os.path.realpath(name) if os.path.isfile(name) else None
    for folder in _library_dirs():
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return os.path.realpath(candidate)
    return None


def _library_dirs() -> List[str]:
    if sys.platform == "win32":
        return [os.path.dirname(sys.executable)] + os.environ.get("PATH", "").split(os.pathsep)
    if sys.platform == "darwin":
        env = os.environ.get("DYLD_LIBRARY_PATH", "").split(os.pathsep)
        return [d for d in env if d] + ["/usr/local/lib", "/opt/homebrew/lib", "/usr/lib"]
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    dirs += _ld_so_conf("/etc/ld.so.conf", set())
    multiarch = sysconfig.get_config_var("MULTIARCH")
    for base in ("/lib", "/usr/lib"):
        if multiarch:
            dirs.append(f"{base}/{multiarch}")
        dirs.append(base)
    dirs += ["/lib64", "/usr/lib64", "/usr/local/lib"]
    return dirs


def _ld_so_conf(path: str, seen: set) -> List[str]:
    """Folders named by the loader's configuration (include lines followed)."""
    import glob

    if path in seen:
        return []
    seen.add(path)
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    dirs: List[str] = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line.startswith("include"):
            pattern = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
            if pattern and not os.path.isabs(pattern):
                pattern = os.path.join(os.path.dirname(path), pattern)
            for conf in sorted(glob.glob(pattern)):
                dirs += _ld_so_conf(conf, seen)
        elif line:
            dirs.append(line)
    return dirs
