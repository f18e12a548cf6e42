"""What a Linux system's setup files mean for the Edge TPU: a Raspberry Pi's config.txt, the
kernel's page size, the modules built for a kernel, udev rules. Pure: hw/boardinfo.py reads.

A PCIe/M.2 Edge TPU on a Raspberry Pi 5 needs the external PCIe connector switched on
(`dtparam=pciex1`), the compatibility overlay without MSI parent (`dtoverlay=pciex1-compat-pi5,
no-mip`) and, for the apex driver, a kernel with 4K pages (`kernel=kernel8.img`; the Pi 5's
default kernel_2712 uses 16K) (raspberrypi/linux#6154, google-coral/edgetpu#808).
The apex/gasket driver comes from source now (the Coral package source that shipped gasket-dkms
1.0-18 is gone): google/gasket-driver's master has the fixes for Linux 6.4 (class_create) and 6.8
(eventfd_signal) and builds a gasket-dkms deb with `debuild`; feranick/gasket-driver publishes
built debs (release 1.0-18.4: gasket-dkms_1.0-18.4_all.deb) that public guides fall back to where
Google's source no longer builds (Linux 6.12 dropped no_llseek). docs/install-sources.md.
"""

from __future__ import annotations

import re
from typing import List, Optional, Set, Tuple

PI5_PCIE_LINES = ("dtparam=pciex1", "dtoverlay=pciex1-compat-pi5,no-mip")
PI5_4K_KERNEL_LINE = "kernel=kernel8.img"
GOOGLE_GASKET = "https://github.com/google/gasket-driver"
COMMUNITY_GASKET = "https://github.com/feranick/gasket-driver"
COMMUNITY_GASKET_DEB = "gasket-dkms_1.0-18.4_all.deb"
COMMUNITY_GASKET_URL = f"{COMMUNITY_GASKET}/releases/download/1.0-18.4/{COMMUNITY_GASKET_DEB}"
GASKET_BUILD = ("sudo apt-get install -y git devscripts debhelper dkms dh-dkms && "
                f"git clone {GOOGLE_GASKET}.git && cd gasket-driver && debuild -us -uc -tc -b && "
                "sudo dpkg -i ../gasket-dkms_1.0-18_all.deb")
USB_RULE = 'SUBSYSTEM=="usb",ATTRS{{idVendor}}=="{vendor}",ATTRS{{idProduct}}=="{product}",GROUP="plugdev"'

# Sections of config.txt that apply to a Raspberry Pi 5 ([all], [pi5], none); others are skipped.
_PI5_SECTIONS = ("all", "pi5", "board-type=0x17", "cm5")


def active_config_lines(text: str, sections: Tuple[str, ...] = _PI5_SECTIONS) -> List[str]:
    """The config.txt lines a Pi 5 applies: comments dropped, spaces squeezed, lines under a
    conditional section for other boards ([pi4], [cm4] ...) left out."""
    out, applies = [], True
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            applies = line[1:-1].strip().lower() in sections
            continue
        if applies:
            out.append(re.sub(r"\s+", "", line))
    return out


def missing_pcie_lines(config_text: Optional[str]) -> List[str]:
    """The Pi 5 PCIe lines config.txt lacks (`dtparam=pciex1=on` and the `nvme` alias count)."""
    lines = active_config_lines(config_text or "")
    have_param = any(re.fullmatch(r"dtparam=(pciex1|nvme)(=on)?", ln) for ln in lines)
    have_overlay = any(ln.startswith("dtoverlay=pciex1-compat-pi5") and "no-mip" in ln.split(",")[1:]
                       for ln in lines)
    return [line for line, ok in zip(PI5_PCIE_LINES, (have_param, have_overlay)) if not ok]


def page_size_kib(smaps: Optional[str], release: Optional[str]) -> Optional[int]:
    """The kernel's page size in KiB: from `KernelPageSize:` of /proc/self/smaps, else the Pi 5
    kernel's name (`...-rpi-2712` uses 16K, `...-rpi-v8` 4K)."""
    m = re.search(r"^KernelPageSize:\s+(\d+)\s*kB", smaps or "", re.M)
    if m:
        return int(m.group(1))
    if release and release.endswith("2712"):
        return 16
    if release and release.endswith(("-v8", "-v7", "-v7l")):
        return 4
    return None


def kernel_major_minor(release: Optional[str]) -> Optional[Tuple[int, int]]:
    m = re.match(r"(\d+)\.(\d+)", release or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def module_names(modules_dep: str) -> Set[str]:
    """Module names listed in a kernel's modules.dep (`updates/dkms/apex.ko.xz: ...` -> apex)."""
    names = set()
    for line in modules_dep.splitlines():
        path = line.split(":", 1)[0].strip()
        if path:
            base = path.rsplit("/", 1)[-1]
            names.add(re.sub(r"\.ko(\.(xz|zst|gz))?$", "", base))
    return names


def gasket_fix(release: Optional[str]) -> str:
    """How to get apex/gasket modules for this kernel (it needs the kernel's headers)."""
    version = kernel_major_minor(release)
    if version is not None and version >= (6, 12):
        return (f"Linux {version[0]}.{version[1]}: install the community gasket-dkms deb "
                f"(`wget {COMMUNITY_GASKET_URL} && sudo apt-get install -y dkms ./{COMMUNITY_GASKET_DEB}`; "
                f"Google's source needs patches past 6.12), with this kernel's headers, then reboot")
    return (f"build the driver from Google's source with DKMS (`{GASKET_BUILD}`), with this "
            "kernel's headers installed, then reboot")


def rule_vendors(rule_lines: List[str], vendors: Tuple[str, ...]) -> Set[str]:
    """Which USB vendor ids the udev rule lines name."""
    text = " ".join(rule_lines).lower()
    return {v for v in vendors if v in text}


def usb_rule(vendor: str, product: str) -> str:
    """A udev rule line giving the plugdev group one Coral USB id."""
    return USB_RULE.format(vendor=vendor, product=product)
