"""Power while benchmarking, and where the number comes from.

Sources, best first for the CPU (`--power auto`):
  rapl      Linux powercap (Intel RAPL, also AMD): `energy_uj` counters of the CPU packages read
            before and after the timed runs; the delta wraps at `max_energy_range_uj`.
  hwmon     `/sys/class/hwmon/hwmon*/power*_input` (µW), sampled during the runs.
  vcgencmd  Raspberry Pi 5 PMIC: `vcgencmd pmic_read_adc` rails, V·A summed, sampled.
Then `--watts W` from the user (a USB power meter, say) overrides everything ("user"), and the
Edge TPU gets Coral's nominal 2 W at 4 TOPS ("nominal") since no host sensor sees it.
An unreadable sensor (RAPL needs root on Linux ≥ 5.10) never fails a benchmark: it adds a note
and the next source is tried; with none left the source is "none" and power is null.

Every reader takes `root` (default: the one sysroot, hw/sysroot.py: $EDGEAPP_SYSROOT, else /)
so tests can point it at a fake sysfs tree.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from edgeapp.core.edgetpu.specs import NOMINAL_WATTS, PEAK_TOPS
from edgeapp.hw.sysroot import Root, sysroot

POWER_MODES = ("auto", "rapl", "hwmon", "vcgencmd", "none")
_SAMPLE_INTERVAL_S = 0.1


class SensorUnavailable(Exception):
    """This power source cannot be read here; the message says why (shown as a note)."""


# -- RAPL (powercap) ---------------------------------------------------------------------------

@dataclass(frozen=True)
class RaplZone:
    path: Path
    name: str
    max_energy_range_uj: int


def energy_delta_uj(start_uj: int, end_uj: int, max_energy_range_uj: int) -> int:
    """Energy between two readings of one RAPL counter, across at most one wrap-around."""
    if end_uj >= start_uj:
        return end_uj - start_uj
    if max_energy_range_uj <= 0:
        raise ValueError("counter went backwards and the wrap range is unknown")
    return max_energy_range_uj - start_uj + end_uj


def rapl_zones(root: Root = None) -> list[RaplZone]:
    """The top-level package zones (intel-rapl:N), whose sum is the CPU's whole energy.

    Sub-zones (intel-rapl:N:M: core, uncore, dram) are parts of a package and would count
    twice; a `psys` zone covers the platform and overlaps the packages, so it is used only
    when there is no package zone.
    """
    base = sysroot(root) / "sys/class/powercap"
    if not base.is_dir():
        raise SensorUnavailable("no powercap/RAPL interface (/sys/class/powercap is absent)")
    zones = []
    for d in sorted(base.glob("intel-rapl:*")):
        if d.name.count(":") != 1 or not (d / "energy_uj").exists():
            continue
        name = _read_text(d / "name") or d.name
        try:
            max_range = int(_read_text(d / "max_energy_range_uj") or 0)
        except ValueError:
            max_range = 0
        zones.append(RaplZone(d, name, max_range))
    packages = [z for z in zones if z.name.startswith("package")]
    chosen = packages or zones
    if not chosen:
        raise SensorUnavailable("no RAPL zone with energy_uj in /sys/class/powercap")
    return chosen


def read_energy_uj(zone: RaplZone) -> int:
    try:
        return int((zone.path / "energy_uj").read_text().strip())
    except PermissionError:
        raise SensorUnavailable(f"RAPL {zone.path / 'energy_uj'} is not readable (root only since "
                                "Linux 5.10: run as root or `sudo chmod a+r` it)") from None
    except (OSError, ValueError) as e:
        raise SensorUnavailable(f"RAPL {zone.path / 'energy_uj'}: {e}") from None


# -- hwmon -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HwmonSensor:
    path: Path  # .../hwmonN/power1_input
    chip: str  # the hwmon `name` file: ina219, amdgpu, ...


def hwmon_power_sensors(root: Root = None) -> list[HwmonSensor]:
    """power*_input (or power*_average when a chip has no _input) files of every hwmon chip."""
    base = sysroot(root) / "sys/class/hwmon"
    if not base.is_dir():
        raise SensorUnavailable("no hwmon interface (/sys/class/hwmon is absent)")
    sensors = []
    for chip in sorted(base.glob("hwmon*")):
        files = sorted(chip.glob("power*_input")) or sorted(chip.glob("power*_average"))
        name = _read_text(chip / "name") or chip.name
        sensors.extend(HwmonSensor(f, name) for f in files)
    if not sensors:
        raise SensorUnavailable("no hwmon power sensor (power*_input) on this machine")
    return sensors


def read_hwmon_watts(sensors: list[HwmonSensor]) -> float:
    total = 0.0
    for s in sensors:
        try:
            total += int(s.path.read_text().strip()) / 1e6  # microwatts
        except PermissionError:
            raise SensorUnavailable(f"hwmon {s.path} is not readable") from None
        except (OSError, ValueError) as e:
            raise SensorUnavailable(f"hwmon {s.path}: {e}") from None
    return total


# -- Raspberry Pi 5 PMIC (vcgencmd) --------------------------------------------------------------

_PMIC_LINE = re.compile(r"(\S+)_([AV])\s+(current|volt)\(\d+\)=([-+0-9.eE]+|nan)([AV])")


def parse_pmic_read_adc(text: str) -> dict[str, float]:
    """Rail -> watts from `vcgencmd pmic_read_adc` output.

    Lines read `  VDD_CORE_A current(7)=0.75012000A` and `  VDD_CORE_V volt(15)=0.86173300V`;
    the bracketed channel numbers differ between a rail's current and voltage, so rails are
    paired by name. Voltage-only channels (EXT5V_V, BATT_V) carry no power and are left out.
    """
    amps: dict[str, float] = {}
    volts: dict[str, float] = {}
    for m in _PMIC_LINE.finditer(text.replace("\x00", "\n")):
        rail, suffix, kind, value, unit = m.groups()
        try:
            v = float(value)
        except ValueError:
            continue
        if v != v:  # nan
            continue
        if kind == "current" and suffix == unit == "A":
            amps[rail] = v
        elif kind == "volt" and suffix == unit == "V":
            volts[rail] = v
    return {rail: amps[rail] * volts[rail] for rail in sorted(amps) if rail in volts}


def read_vcgencmd_watts(executable: Optional[str] = None) -> float:
    """Total PMIC rail power now, from one `vcgencmd pmic_read_adc` call."""
    from edgeapp.hw.proc import log_command  # its logging, only when a command runs

    exe = executable or shutil.which("vcgencmd")
    if not exe:
        raise SensorUnavailable("no vcgencmd (Raspberry Pi 5 PMIC readings need it)")
    try:
        log_command([exe, "pmic_read_adc"], once=True)
        proc = subprocess.run([exe, "pmic_read_adc"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SensorUnavailable(f"vcgencmd pmic_read_adc failed: {e}") from None
    rails = parse_pmic_read_adc(proc.stdout)
    if proc.returncode != 0 or not rails:
        why = (proc.stderr or proc.stdout).strip().splitlines()
        raise SensorUnavailable("vcgencmd pmic_read_adc gave no rail readings (not a Raspberry "
                                f"Pi 5?){': ' + why[0] if why else ''}")
    return sum(rails.values())


# -- meters ------------------------------------------------------------------------------------

@dataclass
class PowerMeter:
    """Measures average watts between start() and stop(); `source` names where they come from."""

    source: str  # rapl | hwmon | vcgencmd | user | nominal | none
    detail: str = ""
    notes: list[str] = field(default_factory=list)

    def start(self) -> None:
        pass

    def stop(self) -> Optional[float]:
        return None


@dataclass
class FixedMeter(PowerMeter):
    watts: float = 0.0

    def stop(self) -> Optional[float]:
        return self.watts


@dataclass
class RaplMeter(PowerMeter):
    zones: list[RaplZone] = field(default_factory=list)
    joules: Optional[float] = None  # energy and window of the last start()/stop()
    seconds: Optional[float] = None
    _start: list[int] = field(default_factory=list)
    _t0: float = 0.0

    def start(self) -> None:
        self._start = [read_energy_uj(z) for z in self.zones]
        self._t0 = time.perf_counter()

    def stop(self) -> Optional[float]:
        end = [read_energy_uj(z) for z in self.zones]
        self.seconds = time.perf_counter() - self._t0
        self.joules = sum(energy_delta_uj(s, e, z.max_energy_range_uj)
                          for s, e, z in zip(self._start, end, self.zones)) / 1e6
        return self.joules / self.seconds if self.seconds > 0 else None


@dataclass
class SampledMeter(PowerMeter):
    """Polls an instantaneous reading on a thread and averages the samples."""

    read: Callable[[], float] = lambda: 0.0
    interval_s: float = _SAMPLE_INTERVAL_S
    _samples: list[float] = field(default_factory=list)
    _stop_event: Optional[threading.Event] = None
    _thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._samples = [self.read()]
        self._stop_event = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        assert self._stop_event is not None
        while not self._stop_event.wait(self.interval_s):
            try:
                self._samples.append(self.read())
            except SensorUnavailable:
                return

    def stop(self) -> Optional[float]:
        if self._stop_event is not None:
            self._stop_event.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self._samples.append(self.read())
        except SensorUnavailable:
            pass
        return sum(self._samples) / len(self._samples) if self._samples else None


def _probe_rapl(root: Path) -> PowerMeter:
    zones = rapl_zones(root)
    for z in zones:
        read_energy_uj(z)
    names = ", ".join(z.name for z in zones)
    return RaplMeter("rapl", f"RAPL {names} (whole CPU package: every process on it counts)",
                     zones=zones)


def _probe_hwmon(root: Path) -> PowerMeter:
    sensors = hwmon_power_sensors(root)
    read_hwmon_watts(sensors)
    chips = ", ".join(sorted({s.chip for s in sensors}))
    return SampledMeter("hwmon", f"hwmon {chips} ({len(sensors)} power sensor(s), sampled)",
                        read=lambda: read_hwmon_watts(sensors))


def _probe_vcgencmd(_root: Path) -> PowerMeter:
    exe = shutil.which("vcgencmd")
    read_vcgencmd_watts(exe)
    return SampledMeter("vcgencmd", "Raspberry Pi 5 PMIC rails (vcgencmd pmic_read_adc, V·A "
                        "summed, sampled; excludes USB devices' own 5 V draw)",
                        read=lambda: read_vcgencmd_watts(exe), interval_s=0.25)


_PROBES = {"rapl": _probe_rapl, "hwmon": _probe_hwmon, "vcgencmd": _probe_vcgencmd}


def open_meter(mode: str = "auto", device: str = "cpu", *, watts: Optional[float] = None,
               root: Root = None) -> PowerMeter:
    """The power source for benchmarking on `device` ("cpu" or "edgetpu"); never raises for
    an unreadable sensor: the meter's notes say what was tried and why it failed."""
    if mode not in POWER_MODES:
        raise ValueError(f"unknown power mode {mode!r}: {', '.join(POWER_MODES)}")
    if watts is not None:
        if watts <= 0:
            raise ValueError("--watts must be more than 0")
        return FixedMeter("user", f"{watts:g} W given with --watts", watts=float(watts))
    if mode == "none":
        return PowerMeter("none", "power not measured (--power none)")
    if mode == "auto" and device == "edgetpu":
        return FixedMeter("nominal", f"Coral nominal {NOMINAL_WATTS:g} W at {PEAK_TOPS:g} TOPS "
                                     "(datasheet, not measured)", watts=NOMINAL_WATTS)
    notes = []
    for name in (("rapl", "hwmon", "vcgencmd") if mode == "auto" else (mode,)):
        if name == "vcgencmd" and mode == "auto" and not is_raspberry_pi(root):
            notes.append("vcgencmd: not run (not a Raspberry Pi)")  # never a PATH tool by chance
            continue
        try:
            meter = _PROBES[name](sysroot(root))
        except SensorUnavailable as e:
            notes.append(f"{name}: {e}")
            continue
        meter.notes = notes
        return meter
    return PowerMeter("none", "no readable power sensor; pass --watts W from a power meter",
                      notes=notes)


def is_raspberry_pi(root: Root = None) -> bool:
    """The board's device-tree model says Raspberry Pi (where vcgencmd is the firmware's tool)."""
    model = _read_text(sysroot(root) / "proc/device-tree/model") or ""
    return "Raspberry Pi" in model


def _read_text(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
