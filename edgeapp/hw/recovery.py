"""The recovery ladder's hardware steps: what is done to an Edge TPU that a new worker could not
open, each step tried only when the one before did not bring it back.

restart (a new worker opens the device again: supervisor.py) → reset (USB: the
USBDEVFS_RESET ioctl on its /dev/bus/usb node; PCIe: remove the apex device and rescan the
bus through sysfs) → power (USB: `uhubctl` power-cycles its hub port, where installed and the
hub switches power per port) → the CPU twin (supervisor.py), the TPU tried again later.
`--recover none|restart|reset|power|all` caps it; the default, reset, stops before power.

The operations are one object (`HardwareOps`) so tests and the soak inject their own; every
path is read under the one sysroot (hw/sysroot.py). A step that needs permissions we lack
raises `NeedsRoot`, which the supervisor says once with the udev rule or group that grants it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from edgeapp.hw.devices import USB_VENDORS, pci_cards, usb_accelerators, usb_address
from edgeapp.hw.proc import log_command
from edgeapp.hw.sysroot import Root, under
from edgeapp.hw.worker import RECOVER

USBDEVFS_RESET = ord("U") << 8 | 20  # _IO('U', 20), linux/usbdevice_fs.h
UDEV_RULE = "/etc/udev/rules.d/99-edgetpu-accelerator.rules"
# What grants each step, said once when it lacks the permission.
GRANTS = {
    "reset": (f'USB reset needs write access to the device node: a udev rule such as '
              f'SUBSYSTEM=="usb", ATTRS{{idVendor}}=="{USB_VENDORS[0]}|{USB_VENDORS[1]}", '
              f'MODE="0664", GROUP="plugdev" in {UDEV_RULE}, and your user in plugdev'),
    "power": ('uhubctl needs write access to the hub: SUBSYSTEM=="usb", DRIVER=="hub", '
              'MODE="0664", GROUP="plugdev" in /etc/udev/rules.d/52-usb-hubs.rules (uhubctl\'s '
              'README), and your user in plugdev'),
    "rescan": "a PCIe remove and rescan writes /sys/bus/pci/...: run edgeapp as root for it",
}


class NeedsRoot(Exception):
    """A step lacks the permission it needs; `step` names it (GRANTS says how to grant it)."""

    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"{detail}; {GRANTS[step]}")
        self.step = step


class NotApplicable(Exception):
    """The step cannot act on this device (no node found, no uhubctl, a hub without per-port
    power switching)."""


def ladder(cap: str, device: str) -> List[str]:
    """The hardware steps after a restart, up to `cap`, for `device` (usb:N, pci:N, edgetpu)."""
    if cap not in RECOVER:
        raise ValueError(f"unknown --recover {cap!r}; choose one of: {', '.join(RECOVER)}")
    if cap in ("none", "restart") or device == "cpu":
        return []
    pci = device.startswith("pci")
    steps = ["rescan" if pci else "reset"]
    if cap in ("power", "all") and not pci:
        steps.append("power")
    return steps


@dataclass(frozen=True)
class UsbPlace:
    """Where a USB Accelerator sits: its sysfs name (2-1.3), its /dev node, its hub and port."""

    name: str
    node: str
    hub: str
    port: str


def usb_place(device: str, root: Root = None) -> Optional[UsbPlace]:
    """The USB Accelerator `device` names (usb:N in bus order; edgetpu or usb: the first)."""
    found = usb_accelerators(root)
    index = int(device.split(":")[1]) if device.count(":") == 1 and device.split(":")[1].isdigit() else 0
    if index >= len(found):
        return None
    path = found[index][0]
    address = usb_address(root, path)
    if address is None:
        return None
    name = Path(path).name
    if "." in name:
        hub, _, port = name.rpartition(".")
    else:
        hub, _, port = name.partition("-")
    return UsbPlace(name, f"/dev/bus/usb/{address[0]:03d}/{address[1]:03d}", hub, port)


class HardwareOps:
    """The real operations; a test or the soak passes its own object with the same methods."""

    def __init__(self, root: Root = None) -> None:
        self.root = root

    def usb_reset(self, device: str) -> str:
        """USBDEVFS_RESET on the device's node: the port is reset as if re-plugged."""
        place = usb_place(device, self.root)
        if place is None:
            raise NotApplicable(f"no USB Accelerator found for {device}")
        node = under(self.root, place.node)
        try:
            fd = os.open(str(node), os.O_WRONLY)
        except PermissionError as e:
            raise NeedsRoot("reset", f"cannot open {place.node} ({e.strerror})") from None
        except OSError as e:
            raise NotApplicable(f"cannot open {place.node} ({e.strerror})") from None
        try:
            fcntl.ioctl(fd, USBDEVFS_RESET, 0)
        except OSError as e:
            raise NotApplicable(f"USBDEVFS_RESET on {place.node} failed ({e.strerror})") from None
        finally:
            os.close(fd)
        return f"reset {place.node}"

    def power_cycle(self, device: str) -> str:
        """`uhubctl -l HUB -p PORT -a cycle`: power off and on the port the stick is in."""
        tool = shutil.which("uhubctl")
        if tool is None:
            raise NotApplicable("uhubctl is not installed (apt install uhubctl)")
        place = usb_place(device, self.root)
        if place is None:
            raise NotApplicable(f"no USB Accelerator found for {device}")
        argv = [tool, "-l", place.hub, "-p", place.port, "-a", "cycle", "-d", "2"]
        log_command(argv)
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=30)
        text = " ".join(done.stdout.split())
        if done.returncode != 0:
            if "permission" in text.lower() or "root" in text.lower():
                raise NeedsRoot("power", f"uhubctl: {text[:200]}")
            raise NotApplicable(f"uhubctl could not cycle hub {place.hub} port {place.port}: {text[:200]}")
        return f"power-cycled hub {place.hub} port {place.port}"

    def pci_rescan(self, device: str) -> str:
        """Remove the apex card's PCI device and rescan the bus (sysfs)."""
        cards = pci_cards(self.root)
        index = int(device.split(":")[1]) if ":" in device and device.split(":")[1].isdigit() else 0
        if index >= len(cards):
            raise NotApplicable(f"no PCIe Edge TPU found for {device}")
        address = cards[index][0]
        try:
            under(self.root, f"/sys/bus/pci/devices/{address}/remove").write_text("1")
            under(self.root, "/sys/bus/pci/rescan").write_text("1")
        except PermissionError as e:
            raise NeedsRoot("rescan", f"cannot write /sys/bus/pci ({e.strerror})") from None
        except OSError as e:
            raise NotApplicable(f"PCIe remove/rescan of {address} failed ({e.strerror})") from None
        return f"removed and rescanned PCI {address}"

    def apply(self, step: str, device: str) -> str:
        """Do `step` (reset, power, rescan) to `device`; what was done, in words."""
        return {"reset": self.usb_reset, "power": self.power_cycle, "rescan": self.pci_rescan}[step](device)
