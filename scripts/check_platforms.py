#!/usr/bin/env python3
"""Prove that edgeapp installs on the platforms its users have, with pip's own resolver.

For each platform (its Python, CPU and C library), this runs
`pip install --dry-run --report --only-binary=:all: --python-version --platform ...` on edgeapp's
wheel, against the package index YOUR pip is configured for (pip.conf, PIP_* variables), and
prints what would be installed: the TFLite runtime, numpy, OpenCV, Typer/Click, or why nothing
resolves. Nothing is installed. Needs pip >= 22.2 and network access to that index.

pip evaluates environment markers (`python_version`, `platform_machine`, ...) and the
Requires-Python of downloaded metadata for the Python running it, even with
--python-version/--platform; so pip runs in a child process where both are those of the target
platform (see PIP_FOR_TARGET). Everything else is plain pip.

The Coral Dev Board keeps Coral's system packages (python3-tflite-runtime 2.5.0.post1,
python3-pycoral 2.0, Debian's numpy 1.16.2): they are offered to the resolver as already
there, pinned, so a requirement that would replace them fails the row instead of passing.

    python scripts/check_platforms.py                 # Markdown table
    python scripts/check_platforms.py --json          # one JSON object per platform
    python scripts/check_platforms.py --extras convert --only "Ubuntu 24.04"
    python scripts/check_platforms.py --piwheels      # also ask piwheels (32-bit Raspberry Pi)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PIWHEELS = "https://www.piwheels.org/simple"
RUNTIMES = ("ai-edge-litert", "tflite-runtime", "tensorflow")
OPENCV = ("opencv-python", "opencv-python-headless", "opencv-contrib-python")


@dataclass(frozen=True)
class Platform:
    name: str
    python: str  # full version, as that OS ships it
    machine: str  # platform.machine()
    glibc: Optional[Tuple[int, int]] = None  # Linux: wheels up to manylinux_<glibc>
    macos: Optional[Tuple[int, int]] = None  # macOS: wheels up to macosx_<macos>
    system: Dict[str, Tuple[str, List[str]]] = field(default_factory=dict)  # apt's: name -> (version, Requires-Dist)
    piwheels: bool = False  # its users have piwheels as an extra index (Raspberry Pi OS does)
    note: str = ""

    @property
    def py(self) -> str:
        return ".".join(self.python.split(".")[:2])

    def platform_tags(self) -> List[str]:
        """pip does not expand manylinux_2_N or old macOS versions by itself: list them all."""
        if self.macos:
            return [f"macosx_{self.macos[0]}_{self.macos[1]}_{self.machine}"]  # pip expands macOS
        tags = [f"manylinux_2_{minor}_{self.machine}" for minor in range(self.glibc[1], 16, -1)]
        legacy = {"x86_64": ["manylinux2014", "manylinux2010", "manylinux1"], "aarch64": ["manylinux2014"],
                  "armv7l": ["manylinux2014"]}
        tags += [f"{name}_{self.machine}" for name in legacy.get(self.machine, [])]
        if self.piwheels:
            tags.append(f"linux_{self.machine}")  # piwheels' builds carry the plain linux tag
        return tags

    def marker_environment(self) -> Dict[str, str]:
        darwin = self.macos is not None
        return {
            "implementation_name": "cpython",
            "implementation_version": self.python,
            "os_name": "posix",
            "platform_machine": self.machine,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Darwin" if darwin else "Linux",
            "platform_version": "",
            "python_full_version": self.python,
            "python_version": self.py,
            "sys_platform": "darwin" if darwin else "linux",
        }


# Coral's Mendel Linux 5.x (Debian 10): what `apt` put there, with the requirements those
# packages declare (pycoral 2.0.0's setup.py; tflite-runtime 2.5's).
MENDEL_SYSTEM = {
    "tflite-runtime": ("2.5.0.post1", ["numpy>=1.16.0"]),
    "pycoral": ("2.0.0", ["numpy>=1.16.0", "Pillow>=4.0.0", "tflite-runtime==2.5.0.post1"]),
    "numpy": ("1.16.2", []),
}

PLATFORMS = [
    Platform("Coral Dev Board (Mendel 5)", "3.7.3", "aarch64", glibc=(2, 28), system=MENDEL_SYSTEM,
             note="Coral's apt packages kept"),
    Platform("Debian 11 bullseye x86-64", "3.9.2", "x86_64", glibc=(2, 31)),
    Platform("Ubuntu 22.04 x86-64", "3.10.12", "x86_64", glibc=(2, 35)),
    Platform("Ubuntu 24.04 x86-64", "3.12.3", "x86_64", glibc=(2, 39)),
    Platform("Raspberry Pi OS Bookworm 64-bit", "3.11.2", "aarch64", glibc=(2, 36)),
    Platform("Raspberry Pi OS Trixie 64-bit", "3.13.5", "aarch64", glibc=(2, 41)),
    Platform("macOS 14 arm64", "3.12.8", "arm64", macos=(14, 0)),
    Platform("Raspberry Pi OS Bookworm 32-bit (armv7l)", "3.11.2", "armv7l", glibc=(2, 36), piwheels=True),
]

# The child: pip with the target's marker environment, and the target's Python also for the
# Requires-Python of downloaded metadata (pip checks only the index's data-requires-python
# against --python-version, the metadata against the Python running pip: an index without
# that attribute, e.g. a local mirror, would otherwise give Python 3.7 a wheel for >= 3.10).
PIP_FOR_TARGET = r"""
import inspect, json, sys
env = json.loads(sys.argv[1])
from pip._vendor.packaging import markers
markers.default_environment = lambda: dict(env)
try:  # the report's "environment" field names the target too
    from pip._internal.models import installation_report
    installation_report.default_environment = markers.default_environment
except (ImportError, AttributeError):
    pass
from pip._internal.cli.req_command import RequirementCommand
make_resolver = RequirementCommand.make_resolver
if "py_version_info" in inspect.signature(make_resolver).parameters:
    target = tuple(int(p) for p in env["python_full_version"].split("."))
    def for_target(*args, **kwargs):
        kwargs["py_version_info"] = target
        return make_resolver(*args, **kwargs)
    RequirementCommand.make_resolver = staticmethod(for_target)
from pip._internal.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def pip_version() -> Tuple[int, ...]:
    from importlib.metadata import version

    return tuple(int(p) for p in version("pip").split(".")[:2] if p.isdigit())


def build_wheel(out: Path) -> Path:
    """edgeapp's own wheel (metadata is all the resolver needs from it)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
                          capture_output=True, text=True)
    wheels = sorted(out.glob("edgeapp-*.whl"))
    if proc.returncode != 0 or not wheels:
        sys.exit(f"check_platforms: could not build edgeapp's wheel:\n{proc.stderr[-2000:]}")
    return wheels[-1]


def fake_system_wheels(system: Dict[str, Tuple[str, List[str]]], out: Path) -> Path:
    """Metadata-only wheels standing for apt-installed packages (py3-none-any: any platform)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, (version, requires) in system.items():
        dist = name.replace("-", "_")
        info = f"{dist}-{version}.dist-info"
        meta = "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
            name, version, "".join(f"Requires-Dist: {r}\n" for r in requires))
        with zipfile.ZipFile(out / f"{dist}-{version}-py3-none-any.whl", "w") as z:
            z.writestr(f"{info}/METADATA", meta)
            z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: check_platforms\n"
                                        "Root-Is-Purelib: true\nTag: py3-none-any\n")
            z.writestr(f"{info}/RECORD", "")
    return out


def why_not(stderr: str, platform: Platform, piwheels_used: bool) -> str:
    """pip's reason, in one line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    missing = [ln.split("for ", 1)[1].split()[0] for ln in lines
               if ln.startswith("ERROR: No matching distribution found for")]
    conflict = [ln for ln in lines if ln.startswith("The user requested") or " depends on " in ln]
    if missing:
        reason = f"no wheel of {missing[0]} for this platform"
        if platform.piwheels and not piwheels_used:
            reason += " on this index: piwheels needed"
        return reason
    if conflict:
        return "conflict: " + "; ".join(conflict[:3])
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["pip failed"])[0][:300]


def resolve(platform: Platform, wheel: Path, extras: str, piwheels: bool, work: Path) -> dict:
    spec = f"edgeapp[{extras}] @ {wheel.as_uri()}" if extras else str(wheel)
    cmd = [sys.executable, "-c", PIP_FOR_TARGET, json.dumps(platform.marker_environment()),
           "install", "--dry-run", "--quiet", "--report", str(work / "report.json"), "--ignore-installed",
           "--target", str(work / "target"), "--only-binary=:all:", "--implementation", "cp",
           "--python-version", platform.python]
    for tag in platform.platform_tags():
        cmd += ["--platform", tag]
    if platform.system:
        links = fake_system_wheels(platform.system, work / "system")
        (work / "system.txt").write_text("".join(f"{n}=={v}\n" for n, (v, _) in platform.system.items()))
        cmd += ["--find-links", str(links), "--constraint", str(work / "system.txt")]
    use_piwheels = piwheels and platform.piwheels
    if use_piwheels:
        cmd += ["--extra-index-url", PIWHEELS]
    cmd.append(spec)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    row = {"platform": platform.name, "python": platform.python, "machine": platform.machine,
           "resolved": proc.returncode == 0, "note": platform.note}
    if proc.returncode != 0:
        row["why_not"] = why_not(proc.stderr, platform, use_piwheels)
        return row
    report = json.loads((work / "report.json").read_text())
    got = {}
    for item in report["install"]:
        meta = item["metadata"]
        name = meta["name"].lower().replace("_", "-")
        url = item.get("download_info", {}).get("url", "")
        source = "system" if platform.system and url.startswith((work / "system").as_uri()) else "index"
        got[name] = {"version": meta["version"], "source": source}
    row["packages"] = got
    row["environment"] = report.get("environment", {})
    return row


def cell(row: dict, names) -> str:
    for name in names:
        got = row["packages"].get(name)
        if got:
            text = f"{name} {got['version']}" if len(names) > 1 else got["version"]
            return text + (" (apt)" if got["source"] == "system" else "")
    return "—"


def markdown(rows: List[dict], extras: str) -> str:
    head = ("| platform | Python | TFLite runtime | numpy | OpenCV | Typer | Click | resolved |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- |\n")
    out = []
    for r in rows:
        if not r["resolved"]:
            out.append(f"| {r['platform']} | {r['python']} | | | | | | no: {r['why_not']} |")
            continue
        note = f" ({r['note']})" if r["note"] else ""
        out.append(f"| {r['platform']} | {r['python']} | {cell(r, RUNTIMES)} | {cell(r, ['numpy'])} | "
                   f"{cell(r, OPENCV)} | {cell(r, ['typer'])} | {cell(r, ['click'])} | yes{note} |")
    title = f"edgeapp[{extras}]" if extras else "edgeapp"
    return (f"{title}, resolved by pip {'.'.join(map(str, pip_version()))} for each platform "
            "(—: not installed; the newest Typer does not require Click):\n\n" + head + "\n".join(out))


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--extras", default="", help="resolve edgeapp[EXTRAS] (e.g. convert)")
    ap.add_argument("--only", action="append", default=[], help="platforms whose name contains this (repeatable)")
    ap.add_argument("--piwheels", action="store_true", help=f"add {PIWHEELS} for the Raspberry Pi OS rows that use it")
    ap.add_argument("--wheel", type=Path, help="an already built edgeapp wheel (default: build one from this tree)")
    ap.add_argument("--json", action="store_true", help="one JSON object per platform instead of the table")
    args = ap.parse_args(argv)
    if pip_version() < (22, 2):
        sys.exit("check_platforms: needs pip >= 22.2 (--dry-run --report): python -m pip install -U pip")
    platforms = [p for p in PLATFORMS if not args.only or any(o.lower() in p.name.lower() for o in args.only)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgeapp-platforms-") as tmp:
        wheel = args.wheel.resolve() if args.wheel else build_wheel(Path(tmp) / "dist")
        for i, platform in enumerate(platforms):
            work = Path(tmp) / f"p{i}"
            work.mkdir()
            print(f"resolving for {platform.name} ...", file=sys.stderr, flush=True)
            rows.append(resolve(platform, wheel, args.extras, args.piwheels, work))
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(markdown(rows, args.extras))
    # armv7l without piwheels is expected not to resolve: numpy/OpenCV publish no armv7l wheels.
    failed = [r for r, p in zip(rows, platforms) if not r["resolved"] and not (p.piwheels and not args.piwheels)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
