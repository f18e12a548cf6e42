"""--device as users write it: one device, a list of Edge TPUs, or all; and the device names
libedgetpu understands (`usb:0`, `pci:1`, `:0`).

Parsing is pure; `find_tpus`/`resolve_tpus` enumerate the Edge TPUs present (libedgetpu's list,
else sysfs) and `indexed` turns `usb`, `edgetpu` or `auto` into the first matching TPU's indexed
name, which libedgetpu needs before it honours options such as `Performance`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from edgeapp.errors import DeviceUnavailable, UsageError
from edgeapp.hw.libedgetpu import clock_mode, edgetpu_library
from edgeapp.hw.sysroot import Root

_DEVICE_RE = re.compile(r"^(auto|cpu|edgetpu|usb|pci|usb:\d+|pci:\d+|:\d+)$")


@dataclass(frozen=True)
class DeviceSpec:
    """A parsed --device string: kind is auto, cpu or edgetpu; `option` is libedgetpu's."""

    text: str
    kind: str
    option: Optional[str]  # "usb", "usb:0", "pci", "pci:1", ":0", or None for any TPU


def parse_device(text: str) -> DeviceSpec:
    t = (text or "auto").strip().lower()
    if not _DEVICE_RE.match(t):
        raise UsageError(f"invalid device {text!r}: use auto, cpu, edgetpu, usb, usb:N, pci, pci:N or :N")
    if t in ("auto", "cpu"):
        return DeviceSpec(t, t, None)
    return DeviceSpec(t, "edgetpu", None if t == "edgetpu" else t)


_NAMED_TPU_RE = re.compile(r"^(usb:\d+|pci:\d+|:\d+)$")


@dataclass(frozen=True)
class DeviceChoice:
    """A parsed --device: one device, or several Edge TPUs for a data-parallel or pipelined run.

    `single` is set for one device (auto, cpu, edgetpu, usb:1...). Otherwise `tpus` names the
    TPUs of a list (`usb:0,pci:0`), or `every` stands for `all` (every Edge TPU found); the CPU
    is never one of them. `auto` in a list (`all,auto`) lets the CPU twin take over when no TPU
    is left.
    """

    text: str
    single: Optional[DeviceSpec] = None
    tpus: tuple = ()
    every: bool = False
    fallback: bool = False

    @property
    def several(self) -> bool:
        return self.single is None


def parse_devices(text: Optional[str]) -> DeviceChoice:
    """--device as the inference commands take it: one device, a list of TPUs, or all."""
    t = (text or "auto").strip().lower()
    parts = [p.strip() for p in t.split(",")]
    if len(parts) == 1 and parts[0] != "all":
        return DeviceChoice(t, single=parse_device(t))
    if not all(parts):
        raise UsageError(f"invalid device list {text!r}: an entry is empty")
    fallback = "auto" in parts
    tpus = [p for p in parts if p != "auto"]
    if "cpu" in tpus:
        raise UsageError(f"invalid device list {text!r}: the CPU is never mixed into a multi-TPU run; "
                         "add auto to let the CPU twin take over when no Edge TPU is left")
    if "all" in tpus:
        if len(tpus) > 1:
            raise UsageError(f"invalid device list {text!r}: all already names every Edge TPU")
        return DeviceChoice(t, every=True, fallback=fallback)
    for p in tpus:
        if not _NAMED_TPU_RE.match(p):
            parse_device(p)  # the usual message for a bad name
            raise UsageError(f"invalid device list {text!r}: name each Edge TPU (usb:N, pci:N or :N), "
                             f"not {p!r}")
    if not tpus:
        raise UsageError(f"invalid device list {text!r}: no Edge TPU named")
    if len(set(tpus)) != len(tpus):
        raise UsageError(f"invalid device list {text!r}: a TPU is named twice")
    return DeviceChoice(t, tpus=tuple(tpus), fallback=fallback)


def find_tpus(root: Root = None) -> list[str]:
    """The --device names of every Edge TPU found (libedgetpu's list, else sysfs)."""
    from edgeapp.hw.devices import list_edge_tpus

    return [t.device for t in list_edge_tpus(root, library=edgetpu_library())]


def resolve_tpus(choice: DeviceChoice, root: Root = None) -> list[str]:
    """The TPU names a multi-device choice stands for; `all` enumerates them now."""
    if not choice.every:
        return list(choice.tpus)
    found = find_tpus(root)
    if not found and not choice.fallback:
        raise DeviceUnavailable("--device all: no Edge TPU found; plug one in and check "
                                "`edgeapp devices` (or add auto: all,auto runs the CPU twin then)")
    return found


def indexed(spec: DeviceSpec, root: Root = None) -> DeviceSpec:
    """The same Edge TPU named by its index (`usb` -> `usb:0`; `edgetpu`/`auto` -> the first TPU
    found): libedgetpu forwards options such as `Performance` only with an indexed device.
    Unchanged for the CPU, an already indexed name, or when no TPU is found (the delegate then
    fails, or `auto` falls back, as without options)."""
    if spec.kind == "cpu" or (spec.option and ":" in spec.option):
        return spec
    found = find_tpus(root)
    if spec.option in ("usb", "pci"):
        found = [name for name in found if name.startswith(spec.option + ":")]
    if not found:
        return spec
    return DeviceSpec(spec.text, spec.kind, found[0])


def device_type(name: Optional[str], root: Root = None) -> Optional[str]:
    """`usb` or `pci` for an indexed name (`:N` looked up in the list of TPUs found), else None."""
    if not name:
        return None
    if name.startswith(("usb", "pci")):
        return name[:3]
    if name.startswith(":"):
        found = find_tpus(root)
        index = int(name[1:])
        return found[index][:3] if index < len(found) else None
    return None


def tuned(spec: DeviceSpec, performance: Optional[str] = None, usb_queue: Optional[int] = None,
          root: Root = None) -> tuple[DeviceSpec, dict]:
    """(the device to open, the delegate options) for --performance and the USB queue length.

    The device becomes indexed (libedgetpu ignores options otherwise). `max` on a USB
    Accelerator driven by the std build is refused with one line naming libedgetpu1-max: that
    build would drop it to `high` without a word."""
    from edgeapp.core.edgetpu.clock import PERFORMANCE_LEVELS, check_usb_queue, delegate_options, refusal

    if performance is None and usb_queue is None:
        return spec, {}
    if performance is not None and performance not in PERFORMANCE_LEVELS:
        raise UsageError(f"--performance {performance}: choose one of {', '.join(PERFORMANCE_LEVELS)}")
    problem = check_usb_queue(usb_queue)
    if problem:
        raise UsageError(problem)
    spec = indexed(spec, root)
    if performance == "max" and device_type(spec.option, root) == "usb":
        mode, evidence = clock_mode(edgetpu_library(), root)
        why = refusal(mode, performance, evidence)
        if why:
            raise UsageError(why)
    return spec, delegate_options(performance, usb_queue)


def wants_worker(isolate: Optional[bool], device_kind: str, compiled: bool) -> bool:
    """Whether an engine runs in a worker process (hw/worker/): as --isolate/--no-isolate say; by
    default whenever an Edge TPU is used: asked for by name, or, for `auto` and a compiled model,
    one the kernel lists (sysfs: libedgetpu is left to the worker, which owns the device)."""
    if isolate is not None:
        return isolate
    if device_kind == "cpu" or not compiled:
        return False
    if device_kind == "edgetpu":
        return True
    from edgeapp.hw.devices import scan_sysfs

    return bool(scan_sysfs())
