"""doctor's reset history: the kernel's log (/dev/kmsg, else kern.log's last boot, under a
fake root) read for an Edge TPU's resets since boot, each classified cable, power, heat or
unknown with its fix."""

from __future__ import annotations

import json

from fake_roots import add_usb, write_file

from edgeapp.core.edgetpu.resets import resets, since_boot
from edgeapp.hw.kernel_log import kernel_lines

FOUND = "usb 2-1: New USB device found, idVendor=18d1, idProduct=9302, bcdDevice= 1.00"
MOUSE = "usb 1-4: New USB device found, idVendor=046d, idProduct=c077, bcdDevice=72.00"


def kmsg(*messages: str) -> str:
    """Records as /dev/kmsg gives them: priority, sequence, microseconds, flags; message."""
    return "".join(f"6,{i},{i * 1000},-;{m}\n" for i, m in enumerate(messages))


def test_each_reset_is_classified_by_what_came_before_it():
    found = resets([
        FOUND, MOUSE,
        "usb 2-1: device descriptor read/64, error -71",
        "usb 2-1: USB disconnect, device number 3",  # link errors first: the cable
        FOUND,
        "usb usb2-port1: over-current condition",
        "usb 2-1: USB disconnect, device number 4",  # over-current first: the power
        FOUND,
        "usb 2-1: USB disconnect, device number 5",  # nothing said: unknown
        "usb 1-4: USB disconnect, device number 2",  # the mouse: not ours
        "apex 0000:01:00.0: Apex performance throttled: temperature above trip point, shutdown",
    ])
    assert [(r.device, r.cause) for r in found] == [
        ("usb 2-1", "cable"), ("usb 2-1", "power"), ("usb 2-1", "unknown"), ("apex", "heat")]


def test_kern_log_is_read_from_its_last_boot(tmp_path):
    write_file(tmp_path, "/var/log/kern.log", "\n".join([
        "Nov 1 kernel: Linux version 6.1.0", FOUND, "kernel: usb 2-1: USB disconnect, device number 9",
        "Nov 2 kernel: Linux version 6.1.0", "kernel: " + FOUND]))
    lines = kernel_lines(tmp_path)
    assert lines[0].endswith("Linux version 6.1.0") and len(lines) == 2
    assert resets(since_boot(lines)) == []


def test_doctor_reports_resets_with_their_fix(tmp_path, cli):
    root = tmp_path / "root"
    add_usb(root, "2-1", "18d1:9302", "5000", 2, 3)
    write_file(root, "/dev/kmsg", kmsg(FOUND, "usb 2-1: device not accepting address 4, error -71",
                                       "usb 2-1: USB disconnect, device number 3"))
    result = cli("doctor", "--root", root, "--format", "json")
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["edge tpu resets"]["status"] == "warn"
    assert checks["edge tpu resets"]["detail"].startswith("1 reset(s) since boot: 1 cable")
    assert "USB 3 cable" in checks["edge tpu resets"]["fix"]
    write_file(root, "/dev/kmsg", kmsg(FOUND))
    result = cli("doctor", "--root", root, "--format", "json")
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["edge tpu resets"]["detail"] == "none since boot"
