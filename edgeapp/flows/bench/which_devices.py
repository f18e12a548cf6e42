"""What `bench --device` measures: the device plan, read from the parsed choice.

Every command reads --device through `hw.device_choice.parse_devices`, so `all,auto`,
`ALL`, ` all` and `usb:0,auto` mean the same in bench as in classify or camera (the device
table of the docs): a list's TPUs, then the CPU twin when none of them could run (`,auto`).
bench adds one thing of its own: `all` also measures the CPU, side by side with every TPU.
An unusable TPU is then a row with its reason; an explicitly named one is an error (exit 5).

A benchmark that measured nothing is never a success: `check_measured` turns it into an error
naming why each device could not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, TypeVar

from edgeapp.errors import DeviceUnavailable
from edgeapp.hw.device_choice import DeviceChoice, find_tpus, parse_devices

Doc = TypeVar("Doc", bound=Mapping[str, object])  # a bench document (flows/bench/run.BenchDoc)


@dataclass(frozen=True)
class DevicePlan:
    """`devices` are measured one by one, in order. `lenient`: an Edge TPU that cannot be used
    is a row saying why (else the run fails, exit 5). `cpu_after`: the CPU twin is measured
    when no Edge TPU of the list could be (a list ending in `auto`)."""

    choice: DeviceChoice
    devices: tuple
    lenient: bool = False
    cpu_after: bool = False

    @property
    def text(self) -> str:
        """The --device text as parsed (lower case, no spaces around names)."""
        return self.choice.text

    @property
    def every(self) -> bool:
        """`all` (with or without auto): the CPU and every Edge TPU found."""
        return self.choice.every

    @property
    def tpu_optional(self) -> bool:
        """No Edge TPU at all is fine: auto, all, or a list ending in auto."""
        single = self.choice.single
        return self.choice.every or self.choice.fallback or (single is not None and single.kind == "auto")

    @property
    def cpu_only(self) -> bool:
        return self.choice.single is not None and self.choice.single.kind == "cpu"

    @property
    def one_tpu(self) -> bool:
        """One Edge TPU named (edgetpu, usb, usb:1, ...): never the CPU instead."""
        return self.choice.single is not None and self.choice.single.kind == "edgetpu"


def plan_devices(device: str) -> DevicePlan:
    """The devices `bench --device DEVICE` measures (a UsageError for a bad device string)."""
    choice = parse_devices(device)
    if choice.single is not None:
        return DevicePlan(choice, (choice.single.text,))
    if choice.every:
        return DevicePlan(choice, ("cpu", *(find_tpus() or ["edgetpu"])), lenient=True)
    return DevicePlan(choice, choice.tpus, lenient=choice.fallback, cpu_after=choice.fallback)


def measured(doc: Mapping[str, object]) -> bool:
    """Whether a bench document holds at least one measurement."""
    sections = [doc.get("parallel") or {}, doc.get("pipeline") or {}]
    return any(r.get("available") for r in doc.get("results", []) + sections)


def check_measured(doc: Doc, plan: DevicePlan) -> Doc:
    """The document as given, or a DeviceUnavailable naming why nothing could be measured."""
    if measured(doc):
        return doc
    reasons = [f"{r.get('device_name') or r['device']}: {r['reason']}" for r in doc.get("results", [])
               if r.get("reason")]
    for key in ("pipeline", "parallel"):
        if (doc.get(key) or {}).get("reason"):
            reasons.append(f"{key}: {doc[key]['reason']}")
    raise DeviceUnavailable(f"--device {plan.text}: nothing could be measured"
                            + (f" ({'; '.join(reasons)})" if reasons else ""))
