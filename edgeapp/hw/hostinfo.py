"""What a reader needs to trust benchmark figures: CPU, cores, frequency governor, runtimes.

Reads /proc and /sys under an injectable `root` (default: the one sysroot, hw/sysroot.py; tests
use fake trees); nothing here fails: missing files give None.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import List, Optional

from typing_extensions import TypedDict

from edgeapp.hw.sysroot import Root, sysroot

_USB_SPEEDS = {"1.5": "USB 1 (1.5 Mb/s)", "12": "USB 1 (12 Mb/s)", "480": "USB 2 (480 Mb/s)",
               "5000": "USB 3 (5 Gb/s)", "10000": "USB 3 (10 Gb/s)", "20000": "USB 3 (20 Gb/s)"}


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def cpu_model(root: Root = None) -> Optional[str]:
    """`model name` (x86), else the board model (Raspberry Pi), else `Hardware`/`CPU part`."""
    r = sysroot(root)
    text = _read(r / "proc/cpuinfo") or ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            fields.setdefault(key.strip().lower(), value.strip())
    if "model name" in fields:
        return fields["model name"]
    board = (_read(r / "proc/device-tree/model") or "").rstrip("\x00") or fields.get("model")
    if board:
        return board
    return fields.get("hardware") or (f"CPU part {fields['cpu part']}" if "cpu part" in fields
                                      else platform.processor() or None)


# The widest vector extension first: TensorFlow's and TFLite's kernels pick their code path
# (and so their float rounding) by it at run time, so a float training or a calibration is
# reproducible only on CPUs that report the same one.
_VECTOR_ISAS = (("avx512", ("avx512f",)), ("avx2", ("avx2", "fma")), ("avx", ("avx",)),
                ("sse4.2", ("sse4_2",)), ("sve", ("sve",)), ("asimd", ("asimd",)), ("neon", ("neon",)))


def cpu_vector_isa(root: Root = None) -> Optional[str]:
    """The widest SIMD extension /proc/cpuinfo lists (`avx512`, `avx2`, ... on x86-64,
    `sve`/`asimd`/`neon` on ARM), or None when it lists none."""
    flags = set()
    for line in (_read(sysroot(root) / "proc/cpuinfo") or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    for name, needs in _VECTOR_ISAS:
        if all(n in flags for n in needs):
            return name
    return None


def cpu_count(root: Root = None) -> Optional[int]:
    """Logical CPUs listed in /proc/cpuinfo (falls back to os.cpu_count())."""
    text = _read(sysroot(root) / "proc/cpuinfo")
    if text:
        n = sum(1 for line in text.splitlines() if line.split(":")[0].strip() == "processor")
        if n:
            return n
    return os.cpu_count()


def usable_cores() -> int:
    """CPUs this process may run on (affinity, cgroups' cpusets): the `--threads auto` range."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def decode_workers(workers: Optional[int]) -> int:
    """--workers, else one decoding thread per usable core (at least 2): with the invoke off
    the CPU (Edge TPUs) or on its own threads, decoding is what has to keep up."""
    return workers if workers is not None else max(2, usable_cores())


def governor(root: Root = None) -> Optional[str]:
    return _read(sysroot(root) / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")


def governor_warning(gov: Optional[str]) -> Optional[str]:
    """A warning when the governor may clock the CPU down mid-benchmark."""
    if gov is None or gov == "performance":
        return None
    return (f"CPU frequency governor is '{gov}', not 'performance': latencies may vary with clock "
            "changes (sudo cpupower frequency-set -g performance)")


def max_mhz(root: Root = None) -> Optional[float]:
    khz = _read(sysroot(root) / "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    try:
        return int(khz) / 1000 if khz else None
    except ValueError:
        return None


def usb_link(speed_mbps: Optional[float]) -> Optional[str]:
    """`USB 3 (5 Gb/s)` for a sysfs link speed in Mb/s."""
    if speed_mbps is None:
        return None
    text = f"{speed_mbps:g}"
    return _USB_SPEEDS.get(text, f"{text} Mb/s")


class UsbLink(TypedDict):
    """A Coral USB Accelerator's link: its sysfs folder name, what it is, its speed."""
    path: str
    type: str
    speed_mbps: Optional[str]  # as sysfs writes it: "480", "5000"
    link: Optional[str]  # "USB 3 (5 Gb/s)"


class HostInfo(TypedDict):
    """The machine a benchmark ran on (bench's `host`)."""
    cpu: Optional[str]
    cores: Optional[int]
    usable_cores: int
    max_mhz: Optional[float]
    governor: Optional[str]
    governor_warning: Optional[str]
    machine: str
    os: str
    python: str


def usb_accelerator_links(root: Root = None) -> List[UsbLink]:
    """Coral USB Accelerators seen in sysfs (devices.usb_accelerators), with their link speed."""
    from edgeapp.hw.devices import USB_IDS
    from edgeapp.hw.devices import usb_accelerators as scan

    out: List[UsbLink] = []
    for path, ident, speed in scan(root):
        text = None if speed is None else f"{speed:g}"
        out.append({"path": Path(path).name, "type": USB_IDS[tuple(ident.split(":"))], "speed_mbps": text,
                    "link": _USB_SPEEDS.get(text or "", text)})
    return out


def edgetpu_runtime_version(library: str) -> Optional[str]:
    """libedgetpu's own version string (its C API `edgetpu_version`), None when unavailable."""
    from edgeapp.hw.libedgetpu import label_of

    return label_of(library)


def host_info(root: Root = None) -> HostInfo:
    """The `host` object of bench's JSON."""
    gov = governor(root)
    return {
        "cpu": cpu_model(root),
        "cores": cpu_count(root),
        "usable_cores": usable_cores(),
        "max_mhz": max_mhz(root),
        "governor": gov,
        "governor_warning": governor_warning(gov),
        "machine": platform.machine(),
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def available_memory(root: Root = None) -> Optional[int]:
    """Bytes the kernel says a new process can use without swapping (MemAvailable), or None."""
    for line in (_read(sysroot(root) / "proc/meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            parts = line.split()
            try:
                return int(parts[1]) * (1024 if len(parts) > 2 and parts[2].lower() == "kb" else 1)
            except (IndexError, ValueError):
                return None
    return None
