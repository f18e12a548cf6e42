"""The commands that give this platform a working (libedgetpu, TFLite runtime) pair.

`edgeapp doctor` prints the plan; a known-crash pair is refused with the plan's one-line fix.
edgeapp prints these commands; it never downloads or installs system packages itself. Pure:
hw/osinfo.read_platform reads /etc/os-release, dpkg's architecture and the Python version.

Routes, by platform (Coral's package source is gone: no plan names it):
- Mendel (Coral Dev Board / Dev Board Mini): keep the pair Mendel installed (libedgetpu1-std 16.0
  + python3-tflite-runtime 2.5.0.post1) and disable Coral's apt sources on the board, which now
  fail `apt-get update`.
- Debian, Raspberry Pi OS, Ubuntu: a community libedgetpu deb built against a newer TensorFlow
  (feranick/libedgetpu GitHub releases) for the codename and architecture, plus the runtime from
  PyPI: ai-edge-litert (x86-64, arm64, Python >= 3.10), tflite-runtime 2.14.0 on 32-bit ARM (no
  ai-edge-litert wheel), and on Python <= 3.9 (Debian bullseye) the newest tflite-runtime wheel
  that installs there, paired through core/install/pairing.py's table (unknown pairs are probed).
- macOS, Windows, other Linux: no published working pair; the plan says so and what remains.
docs/install-sources.md says how each file named here is known to exist.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Tuple

from typing_extensions import TypedDict

from edgeapp.core.install.debian import parse_os_release
from edgeapp.core.install.pairing import COMMUNITY, GOOGLE, GOOGLE_16_TF, Build, decide

COMMUNITY_REPO = "https://github.com/feranick/libedgetpu"
COMMUNITY_RELEASES = COMMUNITY_REPO + "/releases"

# Community debs by (suite, Debian architecture) -> (release tag, TensorFlow version of the
# rebuild). Asset libedgetpu1-std_16.0tf<tf>-1.<suite>_<arch>.deb; each debuild makes the -std
# and -max packages of one architecture together (feranick/libedgetpu README). Names as public
# install scripts and Dockerfiles download them: 16.0TF2.19.1-1 bookworm_amd64, bookworm_arm64,
# trixie_arm64, ubuntu24.04_amd64, ubuntu24.04_arm64; Frigate (docker/main/install_deps.sh)
# 16.0TF2.17.1-1 bookworm_amd64/arm64. No armhf and no Ubuntu 22.04 asset of 16.0TF2.19.1-1
# appears in those sources; 16.0TF2.17.1-1 has bookworm_armhf (Raspberry Pi install scripts) and
# ubuntu22.04 (…ubuntu22.04_arm64.deb): those use 2.17.1. Bullseye: release v16.0TF2.15.1-1
# (tag with a "v") has bullseye_arm64, downloaded by two independent public install notes; no
# bullseye armhf or amd64 file name appears in any source we could read.
COMMUNITY_DEBS: Dict[Tuple[str, str], Tuple[str, str]] = {
    ("bookworm", "amd64"): ("16.0TF2.19.1-1", "2.19.1"),
    ("bookworm", "arm64"): ("16.0TF2.19.1-1", "2.19.1"),
    ("trixie", "arm64"): ("16.0TF2.19.1-1", "2.19.1"),
    ("ubuntu24.04", "amd64"): ("16.0TF2.19.1-1", "2.19.1"),
    ("ubuntu24.04", "arm64"): ("16.0TF2.19.1-1", "2.19.1"),
    ("bookworm", "armhf"): ("16.0TF2.17.1-1", "2.17.1"),
    ("ubuntu22.04", "amd64"): ("16.0TF2.17.1-1", "2.17.1"),
    ("ubuntu22.04", "arm64"): ("16.0TF2.17.1-1", "2.17.1"),
    ("bullseye", "arm64"): ("v16.0TF2.15.1-1", "2.15.1"),
}
# Python <= 3.9 has no ai-edge-litert: PyPI's tflite-runtime, the newest cp39 wheel each
# architecture installs on Debian bullseye (glibc 2.31). 2.14.0's ARM wheels are manylinux_2_34
# (glibc 2.34), so ARM takes 2.13.0 (manylinux2014); x86-64 has 2.14.0 as manylinux2014.
# (`pip download --python-version 3.9 --platform ... tflite-runtime==V` against PyPI.)
OLD_PYTHON_RUNTIME = {"arm64": "2.13.0", "armhf": "2.13.0", "amd64": "2.14.0"}
# Coral's apt sources, as Mendel and Coral's old guides wrote them, matched by host and path
# in a sed address (so the package names no repository URL to send anyone to).
DISABLE_CORAL_SOURCES = (r"sudo sed -i -E 's|^(deb .*cloud\.google\.com/apt)|# \1|' "
                         "/etc/apt/sources.list /etc/apt/sources.list.d/*.list")
QEMU_PACKAGE = "qemu-user"  # /usr/bin/qemu-x86_64 in Debian bookworm and trixie (checked with apt)
# PyPI's newest tflite-runtime, 2.14.0, has cp311 armv7l wheels (manylinux_2_34) and needs numpy 1.
ARMHF_RUNTIME = ("tflite-runtime", "2.14.0")
USB_ACCESS = "sudo usermod -aG plugdev $USER"
USB_ACCESS_NOTE = ("the package installs a udev rule giving group plugdev the USB Accelerator: after "
                   "usermod, log out and in again, then unplug and replug the accelerator")


@dataclass(frozen=True)
class Platform:
    """What the plan depends on: OS (from os-release), Debian architecture, Python."""

    system: str = "Linux"  # platform.system(): Linux, Darwin, Windows
    os_id: str = ""  # os-release ID: debian, raspbian, ubuntu, mendel
    id_like: Tuple[str, ...] = ()
    codename: str = ""  # VERSION_CODENAME: bookworm, trixie, jammy, eagle
    version_id: str = ""  # VERSION_ID: 12, 22.04
    pretty: str = ""
    arch: str = ""  # Debian architecture (amd64, arm64, armhf), else the machine name
    python: Tuple[int, int] = (3, 11)
    python_exe: str = "python3"  # how to call this Python in printed commands

    @classmethod
    def from_os_release(cls, text: str, *, system: str, arch: str, python: Tuple[int, int],
                        python_exe: str = "python3") -> "Platform":
        f = parse_os_release(text)
        return cls(system, f.get("ID", "").lower(), tuple(f.get("ID_LIKE", "").lower().split()),
                   f.get("VERSION_CODENAME", "").lower(), f.get("VERSION_ID", ""), f.get("PRETTY_NAME", ""),
                   arch, (int(python[0]), int(python[1])), python_exe)

    @property
    def debian_like(self) -> bool:
        return self.system == "Linux" and (self.os_id in ("debian", "raspbian", "ubuntu", "mendel")
                                           or bool({"debian", "ubuntu"} & set(self.id_like)))

    @property
    def suite(self) -> str:
        """How community debs name the distribution: the Debian codename, `ubuntu22.04` on Ubuntu."""
        if self.os_id == "ubuntu" or ("ubuntu" in self.id_like and self.version_id):
            return f"ubuntu{self.version_id}"
        return self.codename

    def describe(self) -> str:
        name = self.pretty or {"Darwin": "macOS"}.get(self.system, self.system or "unknown OS")
        return f"{name}, {self.arch or 'unknown architecture'}, Python {self.python[0]}.{self.python[1]}"


def debian_arch(machine: str, pointer_bits: int = 64) -> str:
    """Debian's name for a machine: aarch64 -> arm64; a 32-bit userland on a 64-bit kernel -> armhf."""
    m = (machine or "").lower()
    if m in ("x86_64", "amd64"):
        return "i386" if pointer_bits == 32 else "amd64"
    if m in ("aarch64", "arm64", "armv8l"):
        return "armhf" if pointer_bits == 32 or m == "armv8l" else "arm64"
    if m.startswith("armv7") or m.startswith("armv6"):
        return "armhf"
    if m in ("i386", "i486", "i586", "i686"):
        return "i386"
    return m


class PlatformJson(TypedDict):
    """A Platform's fields, and how it is said in words (`description`)."""
    system: str
    os_id: str
    id_like: List[str]
    codename: str
    version_id: str
    pretty: str
    arch: str
    python: List[int]
    python_exe: str
    description: str


class StepJson(TypedDict):
    what: str
    commands: List[str]


class PlanJson(TypedDict):
    """`doctor --install-plan --format json`: the platform, the route, the pair, the steps."""
    platform: PlatformJson
    route: str
    libedgetpu: str
    runtime: str
    verdict: str
    source: str
    steps: List[StepJson]
    notes: List[str]
    fix: str


@dataclass(frozen=True)
class Step:
    what: str  # why these commands, one line
    commands: Tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    platform: Platform
    route: str  # mendel, community-deb or none
    libedgetpu: str  # the Edge TPU runtime to have, or "" when no route
    runtime: str  # the TFLite runtime to have
    verdict: str  # the pairing table's verdict on that pair: works or unknown ("" without a route)
    source: str  # the table row's citation
    steps: Tuple[Step, ...]
    notes: Tuple[str, ...]
    fix: str  # one line: what turns a known-crash pair into this plan's pair

    def to_dict(self) -> PlanJson:
        d = asdict(self)
        d["platform"]["description"] = self.platform.describe()
        return d  # type: ignore[return-value]  # asdict: tuples stay tuples, JSON lists

    def headline(self) -> str:
        if self.route == "none":
            return f"plan for {self.platform.describe()}: no published Edge TPU runtime pair"
        known = {"works": f"reported to work ({self.source})",
                 "unknown": "not yet reported either way: edgeapp probes it on first Edge TPU use"}
        return (f"plan for {self.platform.describe()}: {self.libedgetpu} + {self.runtime}, "
                f"{known.get(self.verdict, self.verdict)}")

    def lines(self) -> List[str]:
        """The plan as text: a headline, then each step's commands verbatim under a `#` comment."""
        out = [self.headline()]
        for step in self.steps:
            out.append(f"  # {step.what}")
            out += [f"  {c}" for c in step.commands]
        out += [f"  note: {n}" for n in self.notes]
        return out


def plan_for(p: Platform) -> Plan:
    if p.system == "Darwin":
        return _macos(p)
    if not p.debian_like:
        return _no_route(p, f"edgeapp knows no Edge TPU runtime packages for {p.describe()}",
                         (f"build libedgetpu against TensorFlow 2.19 from {COMMUNITY_REPO} "
                          "(its Makefile) and point EDGEAPP_EDGETPU_LIB at the library, or run "
                          "edgeapp in a Debian/Ubuntu container",))
    if p.os_id == "mendel":
        return _mendel(p)
    return _community(p)


def _decided(build: Build, runtime: str, version: str) -> Tuple[str, str]:
    d = decide(build, runtime, version)
    return d.verdict, d.source


def _usb_step() -> Step:
    return Step("USB Accelerator access without root", (USB_ACCESS,))


def _mendel(p: Platform) -> Plan:
    """Mendel ships Coral's pair; the Coral package source it came from is gone, so
    the plan keeps what is there and stops `apt-get update` from failing on its sources."""
    verdict, source = _decided(Build(GOOGLE, "16.0", GOOGLE_16_TF, "plan"), "tflite-runtime", "2.5.0.post1")
    steps = (
        Step("Coral's apt sources on the board now fail `apt-get update` (the repository is gone): "
             "comment them out; the pair Mendel installed stays", (DISABLE_CORAL_SOURCES,)),
        Step("keep the system tflite-runtime: no PyPI build of it in edgeapp's environment",
             (f"{p.python_exe} -m pip uninstall -y tflite-runtime",)),
        _usb_step(),
    )
    notes = ("keep Mendel's libedgetpu1-std 16.0 and python3-tflite-runtime 2.5.0.post1: nothing "
             "publishes them any more, so do not remove them (reflashing Mendel brings them back)",
             "run edgeapp with the system python3, or from a venv made with "
             "`python3 -m venv --system-site-packages`, so it sees Mendel's tflite_runtime",
             USB_ACCESS_NOTE)
    return Plan(p, "mendel", "libedgetpu1-std 16.0 (preinstalled by Mendel)",
                "tflite-runtime 2.5.0.post1 (Mendel's python3-tflite-runtime)", verdict, source, steps,
                notes, f"{p.python_exe} -m pip uninstall -y tflite-runtime (Mendel's own "
                "python3-tflite-runtime pairs with its libedgetpu 16.0)")


def _runtime_for(p: Platform) -> Tuple[str, str, str]:
    """(runtime, version, why not) from PyPI for this architecture and Python."""
    if p.python <= (3, 9):
        version = OLD_PYTHON_RUNTIME.get(p.arch)
        if version is None:
            return "", "", f"no tflite-runtime wheels for {p.arch}"
        return "tflite-runtime", version, ""
    if p.arch == "armhf":
        runtime, version = ARMHF_RUNTIME
        if p.python != (3, 11):
            return "", "", (f"PyPI's tflite-runtime {version} has 32-bit ARM wheels only for "
                            f"Python 3.11, not {p.python[0]}.{p.python[1]}")
        return runtime, version, ""
    if p.arch in ("amd64", "arm64"):
        return "ai-edge-litert", "", ""
    return "", "", f"no TFLite runtime wheels for {p.arch}"


def _community(p: Platform) -> Plan:
    runtime, runtime_version, why = _runtime_for(p)
    if why:
        return _no_route(p, why, ("use Raspberry Pi OS Bookworm (Python 3.11) or a 64-bit OS",)
                         if p.arch == "armhf" else ())
    found = COMMUNITY_DEBS.get((p.suite, p.arch))
    if found is None:
        return _no_route(p, f"no community libedgetpu deb known for {p.suite or p.os_id}/{p.arch}",
                         (f"look for libedgetpu1-std_*.{p.suite}_{p.arch}.deb at {COMMUNITY_RELEASES}",))
    tag, tf = found
    version = f"16.0tf{tf}-1"
    deb = f"libedgetpu1-std_{version}.{p.suite}_{p.arch}.deb"
    url = f"{COMMUNITY_RELEASES}/download/{tag}/{deb}"
    tf_minor = tuple(int(x) for x in tf.split(".")[:2])
    verdict, source = _decided(Build(COMMUNITY, version, tf_minor, "plan"), runtime, runtime_version)
    if runtime == "ai-edge-litert":
        pip = f"{p.python_exe} -m pip install ai-edge-litert"
        runtime_text = "ai-edge-litert (PyPI)"
    else:
        pip = f"{p.python_exe} -m pip install 'tflite-runtime=={runtime_version}' 'numpy<2'"
        runtime_text = f"tflite-runtime {runtime_version} (PyPI)"
    steps = (
        Step("libusb and wget",
             ("sudo apt-get update", "sudo apt-get install -y libusb-1.0-0 wget")),
        Step(f"the Edge TPU runtime rebuilt for TensorFlow {tf} (replaces Coral's 16.0, built for 2.5)",
             (f"wget {url}", f"sudo apt-get install -y ./{deb}")),
        Step("the TFLite runtime, in edgeapp's Python environment", (pip,)),
        _usb_step(),
    )
    notes = [f"libedgetpu1-max_{version}.{p.suite}_{p.arch}.deb from the same release runs the Edge TPU "
             "at full clock (hotter)",
             USB_ACCESS_NOTE]
    if p.arch == "armhf":
        notes.insert(0, "on a Raspberry Pi, pip takes numpy and opencv-python from piwheels "
                        "(Raspberry Pi OS configures it)")
    if p.python <= (3, 9):
        notes.insert(0, f"Python {p.python[0]}.{p.python[1]} has no ai-edge-litert: tflite-runtime "
                        f"{runtime_version} is the newest PyPI wheel that installs here")
    return Plan(p, "community-deb", f"libedgetpu1-std {version} (community build for TensorFlow {tf}, "
                f"feranick/libedgetpu)", runtime_text, verdict, source, steps, tuple(notes),
                f"wget {url} && sudo apt-get install -y ./{deb}")


def _macos(p: Platform) -> Plan:
    return _no_route(
        p, "Coral's macOS runtime (libedgetpu 16.0, edgetpu_runtime_20210726.zip) is the TensorFlow 2.5 "
           "build, known to crash with ai-edge-litert, and PyPI has no macOS tflite-runtime to pair with it",
        ("the Edge TPU needs a libedgetpu built against TensorFlow 2.19 for macOS (feranick/libedgetpu: "
         "`CPU=darwin_arm64 make`), then EDGEAPP_EDGETPU_LIB=/path/to/libedgetpu.1.dylib",
         "until then edgeapp runs models on the CPU (ai-edge-litert)"),
        steps=(Step("libusb, which any libedgetpu needs on macOS", ("brew install libusb",)),))


def _no_route(p: Platform, why: str, notes: Tuple[str, ...], steps: Tuple[Step, ...] = ()) -> Plan:
    return Plan(p, "none", "", "", "", "", steps, (why,) + tuple(notes),
                f"{why}; edgeapp runs on the CPU (`edgeapp doctor` shows what remains)")


def qemu_install_line(p: Platform) -> str:
    """The one command that gives this ARM Linux system an x86-64 user-mode emulator."""
    if p.debian_like:
        return (f"install it with `sudo apt-get install {QEMU_PACKAGE}` (it brings /usr/bin/qemu-x86_64), "
                "then run the command again")
    return ("install QEMU's user-mode emulator for x86-64 (qemu-x86_64) with this system's package "
            "manager, then run the command again")
