"""`edgeapp devices` against fake sysfs trees laid out like the kernel's (built by
tests/fake_roots.py), and on this machine."""

from __future__ import annotations

import json

from fake_roots import add_apex, two_accelerators_and_a_mouse

from edgeapp.hw.devices import list_edge_tpus, scan_sysfs


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
