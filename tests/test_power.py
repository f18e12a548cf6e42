"""Power readers against fake sysfs trees (the kernel's layout) and recorded vcgencmd output;
host info against fake /proc and /sys."""

from __future__ import annotations

import os
import stat

import pytest

from edgeapp.core.edgetpu.specs import NOMINAL_WATTS
from edgeapp.hw import hostinfo, power

# `vcgencmd pmic_read_adc` as printed by a Raspberry Pi 5 Model B under load (Raspberry Pi OS
# bookworm): a rail's current and voltage come on separate lines, with different channel
# numbers; EXT5V_V and BATT_V are voltage-only.
PI5_PMIC = """ 3V7_WL_SW_A current(0)=0.09368929A
   3V3_SYS_A current(1)=0.08783370A
   1V8_SYS_A current(2)=0.18054710A
  DDR_VDD2_A current(3)=0.22543980A
  DDR_VDDQ_A current(4)=0.06666720A
   1V1_SYS_A current(5)=0.17566740A
    0V8_SW_A current(6)=0.37670900A
  VDD_CORE_A current(7)=6.22421000A
   3V3_DAC_A current(17)=0.00006105A
   3V3_ADC_A current(18)=0.00036630A
   0V8_AON_A current(16)=0.00305250A
      HDMI_A current(22)=0.02417580A
 3V7_WL_SW_V volt(8)=3.69977600V
   3V3_SYS_V volt(9)=3.31003300V
   1V8_SYS_V volt(10)=1.80512600V
  DDR_VDD2_V volt(11)=1.10476100V
  DDR_VDDQ_V volt(12)=0.60146460V
   1V1_SYS_V volt(13)=1.11025500V
    0V8_SW_V volt(14)=0.80146440V
  VDD_CORE_V volt(15)=0.86173300V
   3V3_DAC_V volt(20)=3.31318300V
   3V3_ADC_V volt(21)=3.30677300V
   0V8_AON_V volt(19)=0.80029220V
      HDMI_V volt(23)=5.08664000V
     EXT5V_V volt(24)=5.09066000V
      BATT_V volt(25)=0.00000000V
"""
PI5_PAIRS = {  # rail: (A, V) read off the lines above by hand
    "3V7_WL_SW": (0.09368929, 3.69977600), "3V3_SYS": (0.08783370, 3.31003300),
    "1V8_SYS": (0.18054710, 1.80512600), "DDR_VDD2": (0.22543980, 1.10476100),
    "DDR_VDDQ": (0.06666720, 0.60146460), "1V1_SYS": (0.17566740, 1.11025500),
    "0V8_SW": (0.37670900, 0.80146440), "VDD_CORE": (6.22421000, 0.86173300),
    "3V3_DAC": (0.00006105, 3.31318300), "3V3_ADC": (0.00036630, 3.30677300),
    "0V8_AON": (0.00305250, 0.80029220), "HDMI": (0.02417580, 5.08664000),
}
PI5_WATTS = sum(a * v for a, v in PI5_PAIRS.values())


def write(path, text) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def rapl_tree(root, zones: dict[str, tuple[str, int, int]]):
    """zones: directory name -> (name, energy_uj, max_energy_range_uj)."""
    for d, (name, energy, max_range) in zones.items():
        z = root / "sys/class/powercap" / d
        write(z / "name", name + "\n")
        write(z / "energy_uj", f"{energy}\n")
        write(z / "max_energy_range_uj", f"{max_range}\n")
    return root


def test_energy_delta_with_wrap_around():
    assert power.energy_delta_uj(1_000, 5_000, 262_143_328_850) == 4_000
    # The counter wrapped at max_energy_range_uj and restarted from 0.
    assert power.energy_delta_uj(262_143_000_000, 1_000_000, 262_143_328_850) == 328_850 + 1_000_000
    with pytest.raises(ValueError):
        power.energy_delta_uj(10, 5, 0)


def test_rapl_uses_package_zones_only(tmp_path):
    rapl_tree(tmp_path, {
        "intel-rapl:0": ("package-0", 100, 10**9),
        "intel-rapl:0:0": ("core", 50, 10**9),  # part of package 0: would count twice
        "intel-rapl:1": ("package-1", 200, 10**9),
        "intel-rapl:2": ("psys", 900, 10**9),  # the platform: overlaps the packages
    })
    zones = power.rapl_zones(tmp_path)
    assert [(z.path.name, z.name) for z in zones] == [("intel-rapl:0", "package-0"),
                                                    ("intel-rapl:1", "package-1")]
    assert zones[0].max_energy_range_uj == 10**9


def test_rapl_meter_measures_energy_delta_across_a_wrap(tmp_path):
    max_range = 262_143_328_850
    rapl_tree(tmp_path, {"intel-rapl:0": ("package-0", max_range - 2_000_000, max_range),
                         "intel-rapl:1": ("package-1", 7_000_000, max_range)})
    meter = power.open_meter("auto", "cpu", root=tmp_path)
    assert meter.source == "rapl" and "package-0" in meter.detail
    meter.start()
    # The "CPU" used 3 J on package 0 (wrapping) and 1.5 J on package 1.
    write(tmp_path / "sys/class/powercap/intel-rapl:0/energy_uj", "1000000\n")
    write(tmp_path / "sys/class/powercap/intel-rapl:1/energy_uj", "8500000\n")
    watts = meter.stop()
    assert meter.joules == pytest.approx(4.5)
    assert watts == pytest.approx(meter.joules / meter.seconds)


def test_unreadable_rapl_degrades_to_hwmon_with_a_note(tmp_path):
    rapl_tree(tmp_path, {"intel-rapl:0": ("package-0", 1, 10**9)})
    energy = tmp_path / "sys/class/powercap/intel-rapl:0/energy_uj"
    energy.unlink()
    energy.mkdir()  # unreadable as a number, even for root
    hw = tmp_path / "sys/class/hwmon/hwmon2"
    write(hw / "name", "ina219\n")
    write(hw / "power1_input", "3200000\n")  # µW
    meter = power.open_meter("auto", "cpu", root=tmp_path)
    assert meter.source == "hwmon"
    assert meter.notes and meter.notes[0].startswith("rapl:")
    meter.start()
    assert meter.stop() == pytest.approx(3.2)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_rapl_permission_denied_says_why(tmp_path):
    rapl_tree(tmp_path, {"intel-rapl:0": ("package-0", 1, 10**9)})
    energy = tmp_path / "sys/class/powercap/intel-rapl:0/energy_uj"
    energy.chmod(stat.S_IWUSR)
    meter = power.open_meter("rapl", "cpu", root=tmp_path)
    assert meter.source == "none"
    assert "root" in meter.notes[0]


def test_hwmon_sums_power_sensors_and_ignores_other_chips(tmp_path):
    base = tmp_path / "sys/class/hwmon"
    write(base / "hwmon0/name", "coretemp\n")
    write(base / "hwmon0/temp1_input", "45000\n")
    write(base / "hwmon1/name", "ina3221\n")
    write(base / "hwmon1/power1_input", "1500000\n")
    write(base / "hwmon1/power2_input", "250000\n")
    write(base / "hwmon3/name", "acpi_power\n")
    write(base / "hwmon3/power1_average", "4000000\n")  # only _average: used
    sensors = power.hwmon_power_sensors(tmp_path)
    assert sorted(s.chip for s in sensors) == ["acpi_power", "ina3221", "ina3221"]
    assert power.read_hwmon_watts(sensors) == pytest.approx(1.5 + 0.25 + 4.0)


def test_pmic_parser_pairs_rails_by_name():
    rails = power.parse_pmic_read_adc(PI5_PMIC)
    assert set(rails) == set(PI5_PAIRS)  # EXT5V and BATT have no current: no power
    assert rails["VDD_CORE"] == pytest.approx(6.22421 * 0.861733)
    assert sum(rails.values()) == pytest.approx(PI5_WATTS)
    assert power.parse_pmic_read_adc(PI5_PMIC.replace("\n", "\x00")) == rails
    assert power.parse_pmic_read_adc('error=1 error_msg="Command not registered"\n') == {}


def _stand_in(tmp_path, monkeypatch, script: str) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "vcgencmd"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")


def test_vcgencmd_meter_with_a_stand_in(tmp_path, monkeypatch):
    (tmp_path / "pmic.txt").write_text(PI5_PMIC)
    _stand_in(tmp_path, monkeypatch, f'[ "$1" = pmic_read_adc ] && cat "{tmp_path / "pmic.txt"}"\n')
    pi = tmp_path / "pi"  # no RAPL, no hwmon sensor: a Raspberry Pi 5
    (pi / "proc/device-tree").mkdir(parents=True)
    (pi / "proc/device-tree/model").write_text("Raspberry Pi 5 Model B Rev 1.0\x00")
    meter = power.open_meter("auto", "cpu", root=pi)
    assert meter.source == "vcgencmd"
    assert [n.split(":")[0] for n in meter.notes] == ["rapl", "hwmon"]
    meter.start()
    assert meter.stop() == pytest.approx(PI5_WATTS)


def test_auto_never_runs_a_vcgencmd_from_path_off_a_raspberry_pi(tmp_path, monkeypatch):
    ran = tmp_path / "ran"
    _stand_in(tmp_path, monkeypatch, f'touch "{ran}"\n')
    meter = power.open_meter("auto", "cpu", root=tmp_path / "pc")
    assert meter.source == "none" and not ran.exists()
    assert "vcgencmd: not run (not a Raspberry Pi)" in meter.notes


def test_vcgencmd_on_a_pi_without_pmic_degrades_to_none(tmp_path, monkeypatch):
    _stand_in(tmp_path, monkeypatch, 'echo \'error=1 error_msg="Command not registered"\'\nexit 255\n')
    meter = power.open_meter("vcgencmd", "cpu", root=tmp_path)
    assert meter.source == "none"
    assert "Command not registered" in meter.notes[0]
    meter.start()
    assert meter.stop() is None


def test_user_watts_nominal_and_none(tmp_path):
    user = power.open_meter("auto", "cpu", watts=4.5, root=tmp_path)
    assert (user.source, user.stop()) == ("user", 4.5)
    nominal = power.open_meter("auto", "edgetpu", root=tmp_path)
    assert (nominal.source, nominal.stop()) == ("nominal", NOMINAL_WATTS)
    off = power.open_meter("none", "cpu", root=tmp_path)
    assert (off.source, off.stop()) == ("none", None)
    nothing = power.open_meter("auto", "cpu", root=tmp_path)
    assert nothing.source == "none" and len(nothing.notes) == 3
    with pytest.raises(ValueError):
        power.open_meter("bogus", "cpu")


# -- hostinfo ----------------------------------------------------------------------------------

X86_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Core(TM) i7-8650U CPU @ 1.90GHz

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Core(TM) i7-8650U CPU @ 1.90GHz
"""
PI_CPUINFO = """processor\t: 0
BogoMIPS\t: 108.00
CPU part\t: 0xd0b

processor\t: 1
CPU part\t: 0xd0b

processor\t: 2
processor\t: 3
Revision\t: d04170
Model\t\t: Raspberry Pi 5 Model B Rev 1.0
"""


def test_hostinfo_x86_with_powersave_governor(tmp_path):
    write(tmp_path / "proc/cpuinfo", X86_CPUINFO)
    cpufreq = tmp_path / "sys/devices/system/cpu/cpu0/cpufreq"
    write(cpufreq / "scaling_governor", "powersave\n")
    write(cpufreq / "cpuinfo_max_freq", "4200000\n")
    info = hostinfo.host_info(tmp_path)
    assert info["cpu"] == "Intel(R) Core(TM) i7-8650U CPU @ 1.90GHz"
    assert info["cores"] == 2 and info["max_mhz"] == 4200.0
    assert info["governor"] == "powersave" and "performance" in info["governor_warning"]


def test_hostinfo_raspberry_pi(tmp_path):
    write(tmp_path / "proc/cpuinfo", PI_CPUINFO)
    write(tmp_path / "proc/device-tree/model", "Raspberry Pi 5 Model B Rev 1.0\x00")
    write(tmp_path / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "performance\n")
    info = hostinfo.host_info(tmp_path)
    assert info["cpu"] == "Raspberry Pi 5 Model B Rev 1.0"
    assert info["cores"] == 4
    assert info["governor_warning"] is None


def test_usb_accelerator_link_speed(tmp_path):
    usb = tmp_path / "sys/bus/usb/devices"
    for d, vid, pid, speed in [("2-1", "18d1", "9302", "5000"), ("1-1.2", "1a6e", "089a", "480"),
                               ("1-1", "1d6b", "0002", "480")]:
        write(usb / d / "idVendor", vid + "\n")
        write(usb / d / "idProduct", pid + "\n")
        write(usb / d / "speed", speed + "\n")
    found = hostinfo.usb_accelerator_links(tmp_path)
    assert [(u["path"], u["speed_mbps"]) for u in found] == [("1-1.2", "480"), ("2-1", "5000")]
    assert found[0]["link"].startswith("USB 2") and found[1]["link"].startswith("USB 3")
