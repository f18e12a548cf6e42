"""The board and kernel under the sysroot, as far as the Edge TPU cares: Raspberry Pi model and
config.txt, the running kernel, its page size and modules, containers and their USB device
nodes. Every read goes through hw/sysroot.py, so doctor's tests build fake trees; what the
contents mean is core/install/linux_setup.py.
"""

from __future__ import annotations

import os
from typing import List, Optional, Tuple

from edgeapp.core.install.linux_setup import module_names, page_size_kib
from edgeapp.hw.sysroot import Root, is_real, read_at, read_text, under

BOOT_CONFIGS = ("/boot/firmware/config.txt", "/boot/config.txt")  # Bookworm and later, then older


def board_model(root: Root = None) -> Optional[str]:
    """The device tree's model (`Raspberry Pi 5 Model B Rev 1.0`), None on PCs."""
    text = read_at(root, "/proc/device-tree/model")
    return text.rstrip("\x00").strip() if text else None


def is_pi5(root: Root = None) -> bool:
    model = board_model(root) or ""
    return "Raspberry Pi 5" in model or "Compute Module 5" in model


def boot_config(root: Root = None) -> Tuple[str, Optional[str]]:
    """(path, text) of the Raspberry Pi firmware's config.txt (text None when absent)."""
    for path in BOOT_CONFIGS:
        text = read_at(root, path)
        if text is not None:
            return path, text
    return BOOT_CONFIGS[0], None


def kernel_release(root: Root = None) -> Optional[str]:
    """`uname -r` of the system at the root (/proc/sys/kernel/osrelease)."""
    release = read_at(root, "/proc/sys/kernel/osrelease")
    if release is None and is_real(root):
        release = os.uname().release
    return release


def page_size(root: Root = None) -> Optional[int]:
    """The kernel's page size in KiB (None when unknown)."""
    found = page_size_kib(read_at(root, "/proc/self/smaps"), kernel_release(root))
    if found is None and is_real(root):
        found = os.sysconf("SC_PAGE_SIZE") // 1024
    return found


def modules_for(root: Root, release: str) -> Optional[set]:
    """Module names built for kernel `release` (its modules.dep, else its updates/ and extra/
    folders); None when that kernel has no modules folder."""
    base = under(root, f"/lib/modules/{release}")
    if not base.is_dir():
        return None
    dep = read_text(base / "modules.dep")
    names = module_names(dep) if dep else set()
    for sub in ("updates", "extra", "kernel/drivers/staging/gasket"):
        folder = base / sub
        if folder.is_dir():
            names |= module_names("\n".join(str(p) for p in folder.rglob("*.ko*")))
    return names


def kernels_with(root: Root, module: str) -> List[str]:
    """Kernel releases under /lib/modules that have `module` built."""
    base = under(root, "/lib/modules")
    releases = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    return [r for r in releases if module in (modules_for(root, r) or set())]


def gasket_dkms_installed(root: Root = None) -> bool:
    """Coral's (or a community) gasket-dkms is registered with DKMS."""
    if under(root, "/var/lib/dkms/gasket").is_dir():
        return True
    src = under(root, "/usr/src")
    return src.is_dir() and any(p.name.startswith("gasket-") for p in src.iterdir())


def container(root: Root = None) -> Optional[str]:
    """`docker`, `podman`, `lxc`, `kubernetes` when running inside one, else None."""
    if under(root, "/.dockerenv").exists():
        return "docker"
    if under(root, "/run/.containerenv").exists():
        return "podman"
    cgroup = (read_at(root, "/proc/1/cgroup") or "").lower()
    for word, name in (("kubepods", "kubernetes"), ("docker", "docker"), ("lxc", "lxc"),
                       ("containerd", "containerd")):
        if word in cgroup:
            return name
    env = (read_at(root, "/proc/1/environ") or "").replace("\x00", "\n")
    for line in env.splitlines():
        if line.startswith("container="):
            return line.split("=", 1)[1] or "container"
    return None


def usb_node(bus: int, dev: int) -> str:
    return f"/dev/bus/usb/{bus:03d}/{dev:03d}"


def usb_nodes_on_bus(root: Root, bus: int) -> Optional[List[str]]:
    """Device nodes in /dev/bus/usb/BBB (None: the folder is not there at all)."""
    folder = under(root, f"/dev/bus/usb/{bus:03d}")
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else None


def usb_devices_on_bus(root: Root, bus: int) -> int:
    """USB devices (not interfaces) the kernel lists on `bus`."""
    base = under(root, "/sys/bus/usb/devices")
    count = 0
    for d in base.iterdir() if base.is_dir() else []:
        if ":" not in d.name and read_text(d / "busnum") == str(bus) and (d / "devnum").exists():
            count += 1
    return count
