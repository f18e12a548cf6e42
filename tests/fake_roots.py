"""Fake system roots (what EDGEAPP_SYSROOT points at): sysfs devices of USB accelerators and
PCIe cards with their thermal files, a Debian package database, os-release, a Raspberry Pi 5's
boot config."""

from __future__ import annotations

import os
from pathlib import Path

PCI_PARENT = "sys/devices/pci0000:00/0000:00:14.0"


def write_attr(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")  # sysfs attributes end with a newline


def add_usb(root: Path, name: str, usb_id: str, speed: str, busnum: int, devnum: int) -> Path:
    """A USB device folder under /sys/devices and its /sys/bus/usb/devices/NAME symlink,
    with an interface sub-device (NAME:1.0), which has no idVendor, as the kernel lists it."""
    hub = root / PCI_PARENT / f"usb{busnum}"
    real = hub if name == hub.name else hub / name
    vendor, product = usb_id.split(":")
    for attr, value in {"idVendor": vendor, "idProduct": product, "speed": speed,
                        "busnum": str(busnum), "devnum": str(devnum)}.items():
        write_attr(real / attr, value)
    write_attr(real / f"{name}:1.0" / "bInterfaceClass", "ff")
    links = root / "sys/bus/usb/devices"
    links.mkdir(parents=True, exist_ok=True)
    for target in (real, real / f"{name}:1.0"):
        os.symlink(os.path.relpath(target, links), links / target.name)
    return real


def add_apex(root: Path, n: int, millidegrees: int | None = 52300) -> None:
    """/dev/apex_N (a plain file standing in for the node) and /sys/class/apex/apex_N/temp."""
    write_attr(root / "dev" / f"apex_{n}", "")
    real = root / "sys/devices/pci0000:00/0000:00:1c.0/0000:01:00.0/apex" / f"apex_{n}"
    if millidegrees is not None:
        write_attr(real / "temp", str(millidegrees))
    real.mkdir(parents=True, exist_ok=True)
    cls = root / "sys/class/apex"
    cls.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(real, cls), cls / f"apex_{n}")


def two_accelerators_and_a_mouse(root: Path) -> Path:
    add_usb(root, "2-1", "18d1:9302", "5000", 2, 4)  # after firmware load, USB 3
    add_usb(root, "1-3", "1a6e:089a", "480", 1, 7)  # before firmware load, on a USB 2 port
    add_usb(root, "1-1", "046d:c52b", "12", 1, 2)  # a mouse
    add_usb(root, "usb1", "1d6b:0002", "480", 1, 1)  # the root hub
    return root


TRIPS = (85000, 90000, 95000)


def hot_card(root: Path, n: int, millidegrees: int, trips=TRIPS, warn=(100000, 0, 100000, 1)) -> None:
    """/dev/apex_N with the apex driver's thermal files, as gasket-driver lays them out."""
    add_apex(root, n, millidegrees)
    folder = root / "sys/class/apex" / f"apex_{n}"
    for i, t in enumerate(trips):
        write_attr(folder / f"trip_point{i}_temp", str(t))
    for name, value in zip(("hw_temp_warn1", "hw_temp_warn1_en", "hw_temp_warn2", "hw_temp_warn2_en"), warn):
        write_attr(folder / name, str(value))


def dpkg_owns(root: Path, package: str, library: Path, version: str = "16.0") -> None:
    """A Debian package database under `root` saying `package` installed `library`."""
    info = root / "var/lib/dpkg/info"
    info.mkdir(parents=True, exist_ok=True)
    (info / f"{package}:amd64.list").write_text(f"/.\n{library}\n")
    (root / "var/lib/dpkg/status").write_text(
        f"Package: {package}\nStatus: install ok installed\nArchitecture: amd64\nVersion: {version}\n\n")


def write_file(root: Path, path: str, text: str) -> Path:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def pi5(root: Path, config: str, release: str = "6.6.51+rpt-rpi-2712") -> Path:
    write_file(root, "/proc/device-tree/model", "Raspberry Pi 5 Model B Rev 1.0\x00")
    write_file(root, "/boot/firmware/config.txt", config)
    write_file(root, "/proc/sys/kernel/osrelease", release + "\n")
    return root


# /etc/os-release as each system ships it. Mendel 5.3 from Coral's enterprise-eagle-flashcard
# image (as quoted in saltstack's grains tests); the others as Debian, Raspberry Pi OS and Ubuntu
# write them.
OS_RELEASE = {
    "mendel-5.3": 'PRETTY_NAME="Mendel GNU/Linux 5 (Eagle)"\nNAME="Mendel GNU/Linux"\nID=mendel\n'
                  'ID_LIKE=debian\nHOME_URL="https://coral.ai/"\nVERSION_CODENAME=eagle\n',
    "bookworm": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
                'VERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n',
    "raspbian-bookworm": 'PRETTY_NAME="Raspbian GNU/Linux 12 (bookworm)"\nNAME="Raspbian GNU/Linux"\n'
                         'VERSION_ID="12"\nVERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=raspbian\n'
                         'ID_LIKE=debian\n',
    "trixie": 'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nNAME="Debian GNU/Linux"\nVERSION_ID="13"\n'
              'VERSION="13 (trixie)"\nVERSION_CODENAME=trixie\nID=debian\n',
    "bullseye": 'PRETTY_NAME="Debian GNU/Linux 11 (bullseye)"\nNAME="Debian GNU/Linux"\nVERSION_ID="11"\n'
                'VERSION="11 (bullseye)"\nVERSION_CODENAME=bullseye\nID=debian\n',
    "jammy": 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
             'VERSION="22.04.4 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n'
             'UBUNTU_CODENAME=jammy\n',
    "noble": 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
             'VERSION="24.04.1 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n'
             'UBUNTU_CODENAME=noble\n',
}


def stanza(package: str, arch: str, version: str) -> str:
    return (f"Package: {package}\nStatus: install ok installed\nPriority: optional\nArchitecture: {arch}\n"
            f"Version: {version}\nDescription: {package}\n continuation line\n")


def fake_system(root: Path, release: str, dpkg_arch: str | None, packages=()) -> Path:
    """A system tree: /etc/os-release, and /var/lib/dpkg/status when dpkg_arch is given."""
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text(OS_RELEASE[release])
    if dpkg_arch:
        (root / "var/lib/dpkg/info").mkdir(parents=True)
        stanzas = [stanza("dpkg", dpkg_arch, "1.21.22")] + [stanza(p, a, v) for p, a, v in packages]
        (root / "var/lib/dpkg/status").write_text("\n".join(stanzas))
    return root
