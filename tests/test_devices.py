"""`edgeapp devices` against fake sysfs trees laid out like the kernel's, and on this machine.

The builders here (`add_usb`, `add_apex`) are reused by test_doctor.py and test_probe.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from edgeapp.hw.devices import list_edge_tpus, scan_sysfs

PCI_PARENT = "sys/devices/pci0000:00/0000:00:14.0"


def _write(path: Path, text: str) -> None:
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
        _write(real / attr, value)
    _write(real / f"{name}:1.0" / "bInterfaceClass", "ff")
    links = root / "sys/bus/usb/devices"
    links.mkdir(parents=True, exist_ok=True)
    for target in (real, real / f"{name}:1.0"):
        os.symlink(os.path.relpath(target, links), links / target.name)
    return real


def add_apex(root: Path, n: int, millidegrees: int | None = 52300) -> None:
    """/dev/apex_N (a plain file standing in for the node) and /sys/class/apex/apex_N/temp."""
    _write(root / "dev" / f"apex_{n}", "")
    real = root / "sys/devices/pci0000:00/0000:00:1c.0/0000:01:00.0/apex" / f"apex_{n}"
    if millidegrees is not None:
        _write(real / "temp", str(millidegrees))
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


def test_sysfs_usb_accelerators_in_bus_order_with_link_speed(tmp_path):
    tpus = scan_sysfs(two_accelerators_and_a_mouse(tmp_path))
    assert [(t.device, t.usb_id, t.speed_mbps, t.path) for t in tpus] == [
        ("usb:0", "1a6e:089a", 480.0, "/sys/bus/usb/devices/1-3"),
        ("usb:1", "18d1:9302", 5000.0, "/sys/bus/usb/devices/2-1"),
    ]
    assert {t.type for t in tpus} == {"usb"} and {t.source for t in tpus} == {"sysfs"}
    assert "firmware not loaded" in tpus[0].name and "firmware" not in tpus[1].name


def test_sysfs_pcie_cards_numbered_by_node_with_temperature(tmp_path):
    for n, temp in ((10, 61000), (2, 48500), (0, None)):
        add_apex(tmp_path, n, temp)
    tpus = scan_sysfs(tmp_path)
    assert [(t.device, t.path, t.temperature_c) for t in tpus] == [
        ("pci:0", "/dev/apex_0", None), ("pci:1", "/dev/apex_2", 48.5), ("pci:2", "/dev/apex_10", 61.0)]
    assert {t.type for t in tpus} == {"pci"}


def test_no_library_and_empty_tree_means_no_devices(tmp_path):
    assert list_edge_tpus(tmp_path, str(tmp_path / "libedgetpu.so.1")) == []


def test_devices_command_on_a_fake_tree(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEAPP_EDGETPU_LIB", str(tmp_path / "absent" / "libedgetpu.so.1"))
    two_accelerators_and_a_mouse(tmp_path)
    add_apex(tmp_path, 0)
    table = cli("devices", "--root", tmp_path)
    assert table.exit_code == 0, table.stderr
    lines = [ln for ln in table.stdout.splitlines() if not ln.lstrip().startswith("warning:")]
    assert [ln.split()[0] for ln in lines] == ["usb:0", "usb:1", "pci:0"]
    assert "warning: USB 2 link" in table.stdout  # under usb:0, the accelerator on USB 2
    assert "480 Mb/s (USB 2" in lines[0] and "5000 Mb/s" in lines[1] and "52.3 °C" in lines[2]
    listed = json.loads(cli("devices", "--root", tmp_path, "--format", "json").stdout)["devices"]
    assert [(d["device"], d["type"], d["path"]) for d in listed] == [
        ("usb:0", "usb", "/sys/bus/usb/devices/1-3"), ("usb:1", "usb", "/sys/bus/usb/devices/2-1"),
        ("pci:0", "pci", "/dev/apex_0")]


def test_devices_command_on_this_machine(cli):
    """No Edge TPU here: it says so on stderr and exits 0; JSON gives an empty list."""
    found = list_edge_tpus("/", "libedgetpu.so.1")
    result = cli("devices", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert len(json.loads(result.stdout)["devices"]) == len(found)
    if not found:
        assert "no Edge TPU found" in result.stderr
