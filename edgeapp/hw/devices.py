"""Find Edge TPUs without creating an interpreter, and inspect the Edge TPU library.

Two sources: libedgetpu's C API (`edgetpu_list_devices`, through ctypes) when the library is
installed, else the kernel's files: USB accelerators in /sys/bus/usb/devices by vendor:product,
PCIe/M.2 cards as /dev/apex_N. Every file path is read under `root`, so tests (and containers)
can point this at a fake tree. Loading the library here is safe: none of these calls touch a
TFLite runtime, which is where a mismatched libedgetpu build crashes (see probe.py).
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from edgeapp.hw.proc import log_command

# The USB accelerator shows 1a6e:089a (Global Unichip) until libedgetpu uploads its firmware on
# first use, then re-enumerates as 18d1:9302 (Google). PCIe/M.2 cards are PCI 1ac1:089a.
USB_IDS = {("1a6e", "089a"): "USB Accelerator (firmware not loaded yet)",
           ("18d1", "9302"): "USB Accelerator"}
PCI_ID = ("0x1ac1", "0x089a")
USB2_MBPS = 480.0


@dataclass(frozen=True)
class EdgeTpu:
    """One Edge TPU: `device` is the string to pass as --device."""

    type: str  # "usb" or "pci"
    path: str  # sysfs folder of a USB device, /dev/apex_N of a PCIe card
    device: str  # usb:N / pci:N
    source: str  # "libedgetpu" or "sysfs"
    name: str
    usb_id: Optional[str] = None  # vendor:product
    speed_mbps: Optional[float] = None
    temperature_c: Optional[float] = None

    def to_dict(self) -> dict:
        return asdict(self)


def under(root: str | Path, path: str) -> Path:
    """`path` (absolute, as on the real system) inside the tree at `root`."""
    return Path(root) / path.lstrip("/")


def read_text(path: Path) -> Optional[str]:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def usb_accelerators(root: str | Path = "/") -> list[tuple[str, str, Optional[float]]]:
    """(sysfs path, vendor:product, link speed in Mb/s) of each Coral USB device, in bus order."""
    base = under(root, "/sys/bus/usb/devices")
    found = []
    for d in sorted(base.glob("*")) if base.is_dir() else []:
        ident = ((read_text(d / "idVendor") or "").lower(), (read_text(d / "idProduct") or "").lower())
        if ident in USB_IDS:
            order = (_int(read_text(d / "busnum")), _int(read_text(d / "devnum")), d.name)
            found.append((order, f"/sys/bus/usb/devices/{d.name}", ":".join(ident),
                          _float(read_text(d / "speed"))))
    return [(path, ident, speed) for _, path, ident, speed in sorted(found)]


def apex_nodes(root: str | Path = "/") -> list[str]:
    """/dev/apex_N device nodes (made by the gasket/apex driver for PCIe/M.2 cards)."""
    dev = under(root, "/dev")
    nodes = [p.name for p in dev.glob("apex_*")] if dev.is_dir() else []
    return [f"/dev/{n}" for n in sorted(nodes, key=lambda n: (_int(n.rpartition("_")[2]), n))]


def apex_temperature(root: str | Path, node: str) -> Optional[float]:
    """Die temperature in °C from /sys/class/apex/apex_N/temp (millidegrees), if readable."""
    milli = _float(read_text(under(root, f"/sys/class/apex/{Path(node).name}/temp")))
    return None if milli is None else milli / 1000.0


def pci_cards(root: str | Path = "/") -> list[tuple[str, Optional[str]]]:
    """(PCI address, bound driver or None) of each Coral PCIe/M.2 card, even without a driver."""
    base = under(root, "/sys/bus/pci/devices")
    cards = []
    for d in sorted(base.glob("*")) if base.is_dir() else []:
        if (read_text(d / "vendor"), read_text(d / "device")) == PCI_ID:
            driver = d / "driver"
            cards.append((d.name, os.path.basename(os.readlink(driver)) if driver.is_symlink() else None))
    return cards


def scan_sysfs(root: str | Path = "/") -> list[EdgeTpu]:
    """Edge TPUs as the kernel sees them; numbered as libedgetpu numbers them (usb:N, pci:N)."""
    tpus = [EdgeTpu("usb", path, f"usb:{i}", "sysfs", USB_IDS[tuple(ident.split(":"))], ident, speed)
            for i, (path, ident, speed) in enumerate(usb_accelerators(root))]
    tpus += [EdgeTpu("pci", node, f"pci:{i}", "sysfs", "PCIe/M.2 Edge TPU",
                     temperature_c=apex_temperature(root, node))
             for i, node in enumerate(apex_nodes(root))]
    return tpus


# --- libedgetpu through ctypes -------------------------------------------------------------

class _Device(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("path", ctypes.c_char_p)]  # edgetpu_c.h: edgetpu_device


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


_SYMBOLS = ("tflite_plugin_create_delegate", "edgetpu_version", "edgetpu_list_devices")


def open_library(name: str) -> tuple[ctypes.CDLL, str]:
    """Load the Edge TPU library (OSError when absent) and return it with its real file path."""
    lib = ctypes.CDLL(name)
    return lib, library_file(lib, name)


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


def library_version(lib: ctypes.CDLL) -> Optional[str]:
    """libedgetpu's `edgetpu_version()`, e.g. `BuildLabel(...), RuntimeVersion(14)`."""
    fn = getattr(lib, "edgetpu_version", None)
    if fn is None:
        return None
    fn.restype, fn.argtypes = ctypes.c_char_p, []
    raw = fn()
    return raw.decode(errors="replace") if raw else None


def short_version(version: Optional[str]) -> Optional[str]:
    """`RuntimeVersion(14)` out of the long build label (what pycoral's version check compares)."""
    if not version:
        return None
    m = re.search(r"RuntimeVersion\(\d+\)", version)
    return m.group(0) if m else version


def library_devices(lib: ctypes.CDLL, root: str | Path = "/") -> Optional[list[EdgeTpu]]:
    """Devices from `edgetpu_list_devices`, or None when the library does not export it."""
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
    usb = {path: (ident, speed) for path, ident, speed in usb_accelerators(root)}
    tpus, index = [], {"usb": 0, "pci": 0}
    for kind, path in raw:
        t = "usb" if kind == 1 else "pci"  # edgetpu_device_type: 0 PCI, 1 USB
        ident, speed = usb.get(path, (None, None))
        name = (USB_IDS.get(tuple(ident.split(":"))) if ident else None) or \
            ("USB Accelerator" if t == "usb" else "PCIe/M.2 Edge TPU")
        tpus.append(EdgeTpu(t, path, f"{t}:{index[t]}", "libedgetpu", name, ident, speed,
                            apex_temperature(root, path) if t == "pci" else None))
        index[t] += 1
    return tpus


def list_edge_tpus(root: str | Path = "/", library: Optional[str] = None) -> list[EdgeTpu]:
    """Every Edge TPU: through libedgetpu when `library` loads and lists devices, else sysfs."""
    if library:
        try:
            lib, _ = open_library(library)
        except OSError:
            lib = None
        listed = library_devices(lib, root) if lib is not None else None
        if listed is not None:
            return listed
    return scan_sysfs(root)


def _int(text: Optional[str]) -> int:
    try:
        return int(text or "")
    except ValueError:
        return sys.maxsize


def _float(text: Optional[str]) -> Optional[float]:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def dpkg_owner(path: str, search_path: Optional[str] = None) -> Optional[tuple[str, str]]:
    """(package, version) that installed `path`, when dpkg knows it (libedgetpu1-std vs -max)."""
    import shutil
    import subprocess

    tool = shutil.which("dpkg-query", path=search_path)
    if tool is None:
        return None
    try:
        log_command([tool, "-S", path])
        owner = subprocess.run([tool, "-S", path], capture_output=True, text=True, timeout=20)
        if owner.returncode != 0 or ":" not in owner.stdout:
            return None
        package = owner.stdout.split(":")[0].strip()  # "libedgetpu1-std:amd64: /usr/lib/..."
        log_command([tool, "-W", "-f=${Version}", package])
        version = subprocess.run([tool, "-W", "-f=${Version}", package], capture_output=True,
                                 text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return package, version or "unknown"
