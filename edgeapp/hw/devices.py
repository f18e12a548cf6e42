"""Find Edge TPUs without creating an interpreter; the one sysfs scanner for Coral devices.

Two sources: libedgetpu's C API (`edgetpu_list_devices`, through hw/libedgetpu.py) when the
library is installed, else the kernel's files: USB accelerators in /sys/bus/usb/devices by
vendor:product, PCIe/M.2 cards as /dev/apex_N. Every file path is read under `root` (default:
the one sysroot, hw/sysroot.py), so tests (and containers) can point this at a fake tree.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from typing_extensions import TypedDict

from edgeapp.core.edgetpu.thermal import ApexThermal, is_sensor_fault
from edgeapp.hw.libedgetpu import list_devices, open_library
from edgeapp.hw.sysroot import Root, read_text, under

# The one owner of Coral's device ids. The USB accelerator shows 1a6e:089a (Global Unichip) until
# libedgetpu uploads its firmware on first use, then re-enumerates as 18d1:9302 (Google).
# PCIe/M.2 cards are PCI 1ac1:089a.
USB_IDS = {("1a6e", "089a"): "USB Accelerator (firmware not loaded yet)",
           ("18d1", "9302"): "USB Accelerator"}
USB_STATES = {"1a6e:089a": "bootloader", "18d1:9302": "running"}  # the same ids as states
USB_VENDORS = tuple(sorted({vendor for vendor, _ in USB_IDS}))  # what udev rules match on
PCI_ID = ("0x1ac1", "0x089a")
USB2_MBPS = 480.0


class EdgeTpuJson(TypedDict):
    """An EdgeTpu's fields, as `devices --format json` lists it."""
    type: str
    path: str
    device: str
    source: str
    name: str
    usb_id: Optional[str]
    speed_mbps: Optional[float]
    temperature_c: Optional[float]


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

    def to_dict(self) -> EdgeTpuJson:
        return asdict(self)  # type: ignore[return-value]


def usb_accelerators(root: Root = None) -> list[tuple[str, str, Optional[float]]]:
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


def apex_nodes(root: Root = None) -> list[str]:
    """/dev/apex_N device nodes (made by the gasket/apex driver for PCIe/M.2 cards)."""
    dev = under(root, "/dev")
    nodes = [p.name for p in dev.glob("apex_*")] if dev.is_dir() else []
    return [f"/dev/{n}" for n in sorted(nodes, key=lambda n: (_int(n.rpartition("_")[2]), n))]


def apex_temperature(root: Root, node: str) -> Optional[float]:
    """Die temperature in °C from /sys/class/apex/apex_N/temp (millidegrees), if readable and
    not the sensor-fault reading (core/edgetpu/thermal.py)."""
    temp = apex_thermal(root, node).get("temp")
    return None if is_sensor_fault(temp) else temp


# The apex driver's thermal files (gasket-driver apex_driver.c), millidegrees C except *_en (0/1).
APEX_THERMAL_FILES = ("temp", "trip_point0_temp", "trip_point1_temp", "trip_point2_temp",
                      "hw_temp_warn1", "hw_temp_warn1_en", "hw_temp_warn2", "hw_temp_warn2_en")


def apex_thermal(root: Root, node: str) -> ApexThermal:
    """What /sys/class/apex/apex_N says about heat: temp, trip points and hardware warnings in
    °C (the *_en switches as 0/1); a file that is absent or unreadable is None."""
    folder = f"/sys/class/apex/{Path(node).name}"
    out: ApexThermal = {}
    for name in APEX_THERMAL_FILES:
        value = _float(read_text(under(root, f"{folder}/{name}")))
        out[name] = value if value is None or name.endswith("_en") else value / 1000.0
    return out


def usb_address(root: Root, path: str) -> Optional[tuple[int, int]]:
    """(bus, device number) of a USB device's sysfs folder: its /dev/bus/usb/BBB/DDD node."""
    folder = under(root, path)
    bus, dev = _int(read_text(folder / "busnum")), _int(read_text(folder / "devnum"))
    return None if sys.maxsize in (bus, dev) else (bus, dev)


def pci_cards(root: Root = None) -> list[tuple[str, Optional[str]]]:
    """(PCI address, bound driver or None) of each Coral PCIe/M.2 card, even without a driver."""
    base = under(root, "/sys/bus/pci/devices")
    cards = []
    for d in sorted(base.glob("*")) if base.is_dir() else []:
        if (read_text(d / "vendor"), read_text(d / "device")) == PCI_ID:
            driver = d / "driver"
            cards.append((d.name, os.path.basename(os.readlink(driver)) if driver.is_symlink() else None))
    return cards


def scan_sysfs(root: Root = None) -> list[EdgeTpu]:
    """Edge TPUs as the kernel sees them; numbered as libedgetpu numbers them (usb:N, pci:N)."""
    tpus = [EdgeTpu("usb", path, f"usb:{i}", "sysfs", USB_IDS[tuple(ident.split(":"))], ident, speed)
            for i, (path, ident, speed) in enumerate(usb_accelerators(root))]
    tpus += [EdgeTpu("pci", node, f"pci:{i}", "sysfs", "PCIe/M.2 Edge TPU",
                     temperature_c=apex_temperature(root, node))
             for i, node in enumerate(apex_nodes(root))]
    return tpus


# --- libedgetpu's C API --------------------------------------------------------------------

def library_devices(lib, root: Root = None) -> Optional[list[EdgeTpu]]:
    """Devices from `edgetpu_list_devices` of the opened library, or None when it lacks that API."""
    raw = list_devices(lib)
    if raw is None:
        return None
    usb = {path: (ident, speed) for path, ident, speed in usb_accelerators(root)}
    tpus, index = [], {"usb": 0, "pci": 0}
    for t, path in raw:
        ident, speed = usb.get(path, (None, None))
        name = (USB_IDS.get(tuple(ident.split(":"))) if ident else None) or \
            ("USB Accelerator" if t == "usb" else "PCIe/M.2 Edge TPU")
        tpus.append(EdgeTpu(t, path, f"{t}:{index[t]}", "libedgetpu", name, ident, speed,
                            apex_temperature(root, path) if t == "pci" else None))
        index[t] += 1
    return tpus


def list_edge_tpus(root: Root = None, library: Optional[str] = None) -> list[EdgeTpu]:
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
