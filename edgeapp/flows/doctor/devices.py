"""doctor's checks of the accelerator itself: each Edge TPU's state (link and firmware state of
a USB Accelerator, heat and clock of a PCIe card, the libedgetpu build's clock mode), udev
rules and container device maps for both USB ids, the apex/gasket kernel module against the
running kernel, and a Raspberry Pi 5's PCIe settings. Also `Check`, what every doctor check is.

Everything is read under `root` (hw/sysroot.py), so tests build fake trees for each state.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import asdict, dataclass
from typing import Mapping, Optional

from typing_extensions import TypedDict

from edgeapp.core.edgetpu.thermal import thermal_summary
from edgeapp.core.install.linux_setup import (
    PI5_4K_KERNEL_LINE,
    gasket_fix,
    missing_pcie_lines,
    rule_vendors,
    usb_rule,
)
from edgeapp.hw.boardinfo import (
    boot_config,
    container,
    gasket_dkms_installed,
    is_pi5,
    kernel_release,
    kernels_with,
    modules_for,
    page_size,
    usb_devices_on_bus,
    usb_node,
    usb_nodes_on_bus,
)
from edgeapp.hw.devices import USB2_MBPS, USB_IDS, USB_STATES, USB_VENDORS, pci_cards, scan_sysfs, usb_address
from edgeapp.hw.libedgetpu import clock_mode, edgetpu_library
from edgeapp.hw.sysroot import Root, is_real, read_text, under
from edgeapp.hw.tpu_state import tpu_state

OK, WARN, FAIL = "ok", "warn", "fail"
RULE_DIRS = ("/etc/udev/rules.d", "/lib/udev/rules.d", "/usr/lib/udev/rules.d")


class CheckJson(TypedDict):
    """One doctor check in JSON: its name, ok/warn/fail, what was found, how to fix it."""
    name: str
    status: str
    detail: str
    fix: str


@dataclass
class Check:
    name: str
    status: str  # ok, warn, fail
    detail: str
    fix: str = ""

    def to_dict(self) -> CheckJson:
        return asdict(self)  # type: ignore[return-value]


def device_checks(root: Root, env: Mapping[str, str]) -> list[Check]:
    """Each Edge TPU's state, then what lets users and containers reach them, then drivers."""
    tpus, cards = scan_sysfs(root), pci_cards(root)
    mode, evidence = clock_mode(edgetpu_library(env), root) if tpus else (None, "")
    states = [tpu_state(t, root, mode, evidence) for t in tpus]
    checks = [usb_check(s) if s["type"] == "usb" else pcie_check(s) for s in states]
    if any(s["type"] == "usb" for s in states) and mode is not None:
        checks.append(clock_mode_check(mode, evidence))
    history = reset_check(root, present=bool(states or cards))
    if history is not None:
        checks.append(history)
    usb = [s for s in states if s["type"] == "usb"]
    nodes = [s["path"] for s in states if s["type"] == "pci"]
    if not states and not cards:
        checks.append(Check("edge tpu", WARN, "none found (USB or PCIe/M.2): edgeapp runs on the CPU",
                            "plug in a Coral USB Accelerator (a PCIe/M.2 card: docs/install.md, "
                            "\"The Edge TPU runtime\")"))
    if platform.system() == "Linux" or not is_real(root):
        checks += udev_checks(root, env, present=bool(usb))
        checks += container_checks(root, usb, nodes, cards)
        checks.append(driver_check(root, nodes, cards))
        checks += module_checks(root, nodes, cards)
        if is_pi5(root) and not nodes:
            checks += pi5_checks(root, cards)
    return checks


def reset_check(root: Root, present: bool) -> Optional[Check]:
    """The Edge TPUs' resets since boot from the kernel's log, each cause with its fix; None
    when there is no device and no reset to speak of."""
    from edgeapp.core.edgetpu.resets import FIXES, resets, summary
    from edgeapp.hw.kernel_log import kernel_lines

    lines = kernel_lines(root)
    if lines is None:
        return Check("edge tpu resets", OK, "the kernel log cannot be read here (dmesg_restrict?)",
                     "run `sudo edgeapp doctor` to see the device's resets since boot") if present else None
    found = resets(lines)
    if not found:
        return Check("edge tpu resets", OK, "none since boot") if present else None
    causes = list(dict.fromkeys(r.cause for r in found))
    return Check("edge tpu resets", WARN, f"{summary(found)} (last: {found[-1].line[:120]})",
                 " | ".join(f"{c}: {FIXES[c]}" for c in causes))


def usb_check(s: dict) -> Check:
    """A USB Accelerator: its link speed and whether its firmware is loaded."""
    state = f"{s['usb_id']} ({s['usb_state']})" if s.get("usb_state") else s.get("usb_id") or "?"
    where = f"{state} at {s['path']}"
    speed = s.get("speed_mbps")
    if speed is None:
        return Check("usb accelerator", OK, f"{where}, link speed unknown")
    if speed <= USB2_MBPS:
        return Check("usb accelerator", WARN, f"{where} on USB 2 ({speed:g} Mb/s): 3-4x slower",
                     "plug it into a USB 3 port (blue) with a USB 3 cable")
    return Check("usb accelerator", OK, f"{where}, {speed:g} Mb/s")


def pcie_check(s: dict) -> Check:
    """A PCIe/M.2 card: temperature, trip points, the clock the driver runs it at, warnings."""
    thermal = s.get("thermal") or {}
    detail = s["path"] + (f", {thermal_summary(thermal)}" if thermal.get("reading_c") is not None else "")
    if thermal.get("sensor_fault"):
        return Check("pcie edge tpu", WARN, detail, "a reading like this has preceded PCIe hangs "
                     "(google-coral/edgetpu#843): reseat the card, check its power supply, reload the "
                     "driver (sudo modprobe -r apex && sudo modprobe apex) or reboot")
    if thermal.get("trips_reached"):
        return Check("pcie edge tpu", WARN, detail, f"improve cooling: past {thermal['trips_reached']} "
                     f"trip point(s) the driver runs it at {thermal['clock_mhz']:g} MHz, not 500")
    return Check("pcie edge tpu", OK, detail)


def clock_mode_check(mode: str, evidence: str) -> Check:
    if mode == "std":
        return Check("clock mode", OK, f"std build ({evidence}): USB Accelerators run at reduced "
                     "clock (high, 250 MHz; about 28% slower on Ultralytics' Raspberry Pi 5 table)",
                     "for full clock: sudo apt-get install libedgetpu1-max (it runs hotter)")
    return Check("clock mode", OK, f"max build ({evidence}): USB Accelerators run at full clock "
                 "(500 MHz); keep them cool")


def udev_rules(root: Root) -> list[tuple[str, str]]:
    """(file, line) of every udev rule that names a Coral USB vendor id."""
    found = []
    for d in RULE_DIRS:
        base = under(root, d)
        for f in sorted(base.glob("*.rules")) if base.is_dir() else []:
            for line in (read_text(f) or "").splitlines():
                if not line.lstrip().startswith("#") and any(v in line.lower() for v in USB_VENDORS):
                    found.append((f"{d}/{f.name}", line.strip()))
    return found


def udev_checks(root: Root, env: Mapping[str, str], present: bool) -> list[Check]:
    bad = FAIL if present else WARN  # only blocking when an accelerator is plugged in
    rules = udev_rules(root)
    if not rules:
        return [Check("udev rule", bad, "no udev rule for the Coral USB Accelerator (1a6e/18d1): "
                      "only root can use it",
                      "install the Edge TPU runtime as the plan below says (its libedgetpu1-std package "
                      "installs the rule), then unplug and replug")]
    files = sorted({f for f, _ in rules})
    checks = [Check("udev rule", OK, ", ".join(files))]
    named = rule_vendors([line for _, line in rules], USB_VENDORS)
    if named != set(USB_VENDORS):
        missing = [(v, p) for v, p in USB_IDS if v not in named]
        states = " and ".join(f"{v}:{p} ({USB_STATES[f'{v}:{p}']})" for v, p in missing)
        checks = [Check("udev rule", bad, f"{', '.join(files)} name only {', '.join(sorted(named))}: the "
                        f"accelerator is also {states}, which only root can open",
                        "add to /etc/udev/rules.d/99-edgetpu.rules: "
                        + " and ".join(usb_rule(v, p) for v, p in missing)
                        + "; then sudo udevadm control --reload and replug")]
    text = " ".join(line for _, line in rules)
    groups = sorted(set(re.findall(r'GROUP\s*:?=\s*"([^"]+)"', text)))
    if re.search(r'MODE\s*:?=\s*"0?666"', text) or "uaccess" in text:
        return checks + [Check("usb access", OK, "the rule lets every local user open the device")]
    user = env.get("USER") or env.get("LOGNAME") or (_login() if is_real(root) else "")
    if not groups:
        return checks
    if user == "root":
        return checks + [Check("usb access", OK, "running as root")]
    members = group_members(root, user)
    inside = [g for g in groups if g in members]
    if not inside:
        return checks + [Check("usb access", bad, f"user {user or '?'} is not in group {groups[0]}, "
                               "which the rule grants the device to",
                               f"sudo usermod -aG {groups[0]} {user or '$USER'}, then log out and in")]
    if is_real(root) and user == _login() and not _session_groups() & set(inside):
        return checks + [Check("usb access", WARN, f"{user} was added to {inside[0]} after logging in",
                               f"log out and in again (or run `newgrp {inside[0]}`)")]
    return checks + [Check("usb access", OK, f"{user} is in group {inside[0]}")]


def group_members(root: Root, user: str) -> set[str]:
    """Groups of `user` by /etc/group membership and by the primary gid in /etc/passwd."""
    if not user:
        return set()
    primary = None
    for line in (read_text(under(root, "/etc/passwd")) or "").splitlines():
        parts = line.split(":")
        if len(parts) > 3 and parts[0] == user:
            primary = parts[3]
    groups = set()
    for line in (read_text(under(root, "/etc/group")) or "").splitlines():
        parts = line.split(":")
        if len(parts) > 3 and (user in parts[3].split(",") or parts[2] == primary):
            groups.add(parts[0])
    return groups


def loaded_modules(root: Root) -> set[str]:
    names = {line.split()[0] for line in (read_text(under(root, "/proc/modules")) or "").splitlines()
             if line.strip()}
    return names | {m for m in ("apex", "gasket") if under(root, f"/sys/module/{m}").is_dir()}


def driver_check(root: Root, nodes: list[str], cards: list[tuple[str, Optional[str]]]) -> Check:
    """PCIe/M.2 cards need the gasket and apex kernel modules (gasket-dkms) to get /dev/apex_N."""
    loaded = sorted({"apex", "gasket"} & loaded_modules(root))
    if loaded == ["apex", "gasket"]:
        return Check("pcie driver", OK, "apex and gasket modules loaded")
    if cards or nodes:
        what = ", ".join(f"{addr} (driver: {drv or 'none'})" for addr, drv in cards) or ", ".join(nodes)
        return Check("pcie driver", FAIL if not nodes else WARN,
                     f"PCIe Edge TPU {what} but modules {', '.join(loaded) or 'apex/gasket'} "
                     f"{'loaded' if loaded else 'not loaded'}",
                     gasket_fix(kernel_release(root)))
    return Check("pcie driver", OK, "apex/gasket not loaded (only needed for PCIe/M.2 cards)")




def _login() -> str:
    import getpass

    return getpass.getuser()


def _session_groups() -> set[str]:
    """Groups of this process: a group added by usermod counts only after a new login."""
    import grp

    names = set()
    for gid in os.getgroups():
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return names


# --- kernel modules, Raspberry Pi 5, containers ---------------------------------------------

def module_checks(root: Root, nodes: list[str], cards: list) -> list[Check]:
    """apex/gasket built for the running kernel (`uname -r`), not only for an older one."""
    release = kernel_release(root)
    if not release or {"apex", "gasket"} <= loaded_modules(root):
        return []
    here = modules_for(root, release) or set()
    other = [r for r in kernels_with(root, "apex") if r != release]
    needed = bool(nodes or cards)
    if "apex" in here:
        if needed and not nodes:
            return [Check("kernel module", WARN, f"apex is built for {release} but not loaded",
                          "sudo modprobe apex (or reboot)")]
        return [Check("kernel module", OK, f"apex built for the running kernel {release}")]
    if other:
        return [Check("kernel module", FAIL if needed else WARN,
                      f"apex is built for {', '.join(other)}, not for the running kernel {release}: "
                      "gasket-dkms was not rebuilt for it", gasket_fix(release))]
    if needed or gasket_dkms_installed(root):
        return [Check("kernel module", FAIL if needed else WARN, f"no apex module for the running kernel "
                      f"{release}", gasket_fix(release))]
    return []


def pi5_checks(root: Root, cards: list) -> list[Check]:
    """A Raspberry Pi 5 without /dev/apex_N: the PCIe connector, its overlay, the page size."""
    path, text = boot_config(root)
    checks = []
    missing = missing_pcie_lines(text)
    if missing:
        checks.append(Check("pi 5 pcie", WARN if not cards else OK,
                            f"{path} lacks {', '.join(missing)}: a PCIe/M.2 Edge TPU is not seen",
                            f"add under [all] in {path}: {' / '.join(missing)}; then reboot"))
    else:
        checks.append(Check("pi 5 pcie", OK, f"{path} enables the PCIe connector for the Edge TPU"))
    size = page_size(root)
    if size is not None and size != 4:
        checks.append(Check("page size", FAIL if cards else WARN,
                            f"the kernel uses {size}K pages; the apex driver needs 4K",
                            f"add {PI5_4K_KERNEL_LINE} under [all] in {path}; then reboot"))
    elif size == 4:
        checks.append(Check("page size", OK, "4K pages (what the apex driver needs)"))
    return checks


def container_checks(root: Root, usb: list[dict], nodes: list[str], cards: list) -> list[Check]:
    """Inside a container: the USB bus mapped whole (the accelerator changes its device number
    when its firmware loads, 1a6e:089a -> 18d1:9302), and the apex nodes of PCIe cards."""
    kind = container(root)
    if kind is None:
        return []
    checks = []
    whole = "map the whole bus: docker run --device /dev/bus/usb (compose: devices: - /dev/bus/usb:/dev/bus/usb)"
    for s in usb:
        address = usb_address(root, s["path"])
        if address is None:
            continue
        bus, dev = address
        present = usb_nodes_on_bus(root, bus)
        node = usb_node(bus, dev)
        if present is None or f"{dev:03d}" not in present:
            checks.append(Check("container usb", FAIL, f"{kind}: {node} ({s['usb_id']}) is not in the "
                                "container", whole))
        elif len(present) < usb_devices_on_bus(root, bus):
            checks.append(Check("container usb", WARN, f"{kind}: only some of bus {bus:03d}'s nodes are "
                                f"mapped ({node}): after its firmware loads the accelerator comes back as "
                                "18d1:9302 under a new number, outside the container", whole))
        else:
            checks.append(Check("container usb", OK, f"{kind}: bus {bus:03d} mapped whole ({node})"))
    bound = [addr for addr, driver in cards if driver == "apex"]
    if bound and not nodes:
        checks.append(Check("container pcie", FAIL, f"{kind}: the host drives {', '.join(bound)} but no "
                            "/dev/apex_N is in the container", "docker run --device /dev/apex_0 (one per card)"))
    return checks
