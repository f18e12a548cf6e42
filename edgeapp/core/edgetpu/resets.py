"""An Edge TPU's resets since boot, read from kernel log lines, and what each says about its
cause: the cable (USB link errors before a disconnect), the power (over-current, under-voltage),
heat (the apex driver's thermal shutdown) or unknown; each cause with its one-line fix.

Pure: the lines come from hw/kernel_log.py. A USB Accelerator is recognised by the ports the
kernel saw Coral's ids on ("New USB device found, idVendor=18d1, idProduct=9302"); a port's
disconnects count as resets of the accelerator, the first enumeration at boot does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, List, Optional, Set

CAUSES = ("cable", "power", "heat", "unknown")
FIXES = {
    "cable": "use a short, good USB 3 cable straight into the host's port (no extension, no "
             "front-panel port): link errors (-71/-110) came before the disconnect",
    "power": "power the Accelerator through a powered USB hub or a stronger supply: the port "
             "reported over-current or the board under-voltage",
    "heat": "cool the card (heatsink, airflow) or run it slower (--performance medium): the apex "
            "driver shut it down past its trip point",
    "unknown": "note the time, then look at `dmesg` around it; try another port or cable",
}
_NEW = re.compile(r"usb (\d+-[\d.]+): New USB device found, idVendor=(1a6e|18d1), idProduct=(089a|9302)", re.I)
_DISCONNECT = re.compile(r"usb (\d+-[\d.]+): USB disconnect")
_LINK_ERROR = re.compile(r"usb (\d+-[\d.]+): .*(error -71|error -110|device descriptor read|"
                         r"device not accepting address|cannot reset)", re.I)
_POWER = re.compile(r"over-current|overcurrent|under-?voltage", re.I)
_APEX_HEAT = re.compile(r"apex.*(thermal|temperature|shutdown|trip)", re.I)
_APEX_ERROR = re.compile(r"apex.*(error|timed? ?out|fail)", re.I)


@dataclass(frozen=True)
class Reset:
    """One reset of an Edge TPU: which device ("usb 2-1", "apex"), its cause, the line."""

    device: str
    cause: str
    line: str


def resets(lines: Iterable[str]) -> List[Reset]:
    """The resets these kernel log lines (one boot's, in order) show, each with its cause."""
    coral: Set[str] = set()
    link_errors: Set[str] = set()
    power_seen = False
    out: List[Reset] = []
    for line in lines:
        new = _NEW.search(line)
        if new:
            coral.add(new.group(1))
            continue
        if _POWER.search(line):
            power_seen = True
        link = _LINK_ERROR.search(line)
        if link:
            link_errors.add(link.group(1))
        gone = _DISCONNECT.search(line)
        if gone and gone.group(1) in coral:
            port = gone.group(1)
            cause = "power" if power_seen else "cable" if port in link_errors else "unknown"
            out.append(Reset(f"usb {port}", cause, line.strip()))
            link_errors.discard(port)
            power_seen = False
        elif _APEX_HEAT.search(line):
            out.append(Reset("apex", "heat", line.strip()))
        elif _APEX_ERROR.search(line):
            out.append(Reset("apex", "unknown", line.strip()))
    return out


def since_boot(lines: List[str]) -> List[str]:
    """The lines of the last boot of a log that spans several (kern.log)."""
    start = 0
    for i, line in enumerate(lines):
        if "Linux version" in line or "Booting Linux" in line:
            start = i
    return lines[start:]


def summary(found: List[Reset]) -> Optional[str]:
    """"3 reset(s) since boot: 2 cable, 1 power", or None without any."""
    if not found:
        return None
    counts = {c: sum(1 for r in found if r.cause == c) for c in CAUSES}
    return f"{len(found)} reset(s) since boot: " + ", ".join(f"{n} {c}" for c, n in counts.items() if n)
