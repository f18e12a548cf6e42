"""Each Edge TPU's real state, read now: which libedgetpu build drives it (std or max), and per
device the link and firmware state of a USB Accelerator or the heat and clock of a PCIe card.

`devices`, `doctor`, `bench` and the camera's live view and MQTT all ask here; the meaning of
what is read (trip points, the sensor-fault reading, std vs max) is core/edgetpu/thermal.py and
core/edgetpu/clock.py. Everything is read under the sysroot (hw/sysroot.py).
"""

from __future__ import annotations

from typing import List, Optional

from edgeapp.core.edgetpu.clock import clock_at, usb_level
from edgeapp.core.edgetpu.thermal import PcieHeat, pcie_state, state_warnings
from edgeapp.hw.devices import USB_STATES, EdgeTpu, EdgeTpuJson, apex_thermal, list_edge_tpus
from edgeapp.hw.hostinfo import usb_link
from edgeapp.hw.libedgetpu import clock_mode, edgetpu_library
from edgeapp.hw.sysroot import Root


class TpuState(EdgeTpuJson, total=False):
    """One Edge TPU's listing plus its state: PCIe cards have `thermal`, USB Accelerators
    `usb_state`, `link` and `performance`."""
    clock_mode: Optional[str]  # std or max
    clock_mode_source: str
    thermal: PcieHeat
    clock_mhz: Optional[float]
    clock_basis: str
    throttling: Optional[bool]
    usb_state: Optional[str]
    link: Optional[str]
    performance: Optional[str]
    warnings: List[str]


def tpu_states(root: Root = None, library: Optional[str] = None,
               performance: Optional[str] = None) -> List[TpuState]:
    """The state of every Edge TPU found (libedgetpu's list, else sysfs)."""
    name = library or edgetpu_library()
    tpus = list_edge_tpus(root, name)
    mode, evidence = clock_mode(name, root) if tpus else (None, "")
    return [tpu_state(t, root, mode, evidence, performance) for t in tpus]


def tpu_state(tpu: EdgeTpu, root: Root = None, mode: Optional[str] = None, evidence: str = "",
              performance: Optional[str] = None) -> TpuState:
    """One Edge TPU's listing plus its state: `clock_mode` (std/max/None), `clock_mhz` (from the
    temperature for PCIe, from the build and --performance for USB), `throttling`, and
    `thermal` (PCIe) or `usb_state` and `link` (USB); `warnings` in words."""
    out: TpuState = {**tpu.to_dict()}  # type: ignore[misc]
    out.update(clock_mode=mode, clock_mode_source=evidence)
    if tpu.type == "pci":
        thermal = pcie_state(apex_thermal(root, tpu.path))
        out.update(temperature_c=thermal["temperature_c"], thermal=thermal,
                   clock_mhz=thermal["clock_mhz"], clock_basis="temperature and trip points",
                   throttling=thermal["throttling"])
    else:
        level = usb_level(mode, performance)
        out.update(usb_state=USB_STATES.get(tpu.usb_id or ""), link=usb_link(tpu.speed_mbps),
                   performance=level, clock_mhz=clock_at(level) if level else None,
                   clock_basis="libedgetpu build and --performance", throttling=None)
    out["warnings"] = state_warnings(out)
    return out


def state_of(name: str, root: Root = None, library: Optional[str] = None,
             performance: Optional[str] = None) -> Optional[TpuState]:
    """The state of the TPU an engine runs on (`usb:0`, `pci:1`; `edgetpu`, `usb` or `pci`: the
    first one of that kind, which is the one libedgetpu opens when it is free)."""
    states = tpu_states(root, library, performance)
    for s in states:
        if s["device"] == name:
            return s
    kind = name if name in ("usb", "pci") else None
    matching = [s for s in states if kind is None or s["type"] == kind]
    return matching[0] if matching and not name.startswith((":", "usb:", "pci:")) else None
