"""`edgeapp doctor`: what is installed, what is plugged in, the one-sentence fix for each gap, and
the plan (core/install/plan.py): the commands that give this platform a working runtime pair.

Every check reads files under `root` and tools on the PATH of `env`, so tests run it against
fake system trees. Python packages are looked up without importing them (a TFLite runtime is
imported in a child process, TensorFlow not at all), so doctor stays fast and cannot be killed
by a broken native wheel. The checks of the devices themselves (their state, udev rules,
containers, kernel modules, a Raspberry Pi 5's PCIe settings) are in flows/doctor/devices.py.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Optional

from edgeapp.core.compat import metadata
from edgeapp.core.install.debian import parse_os_release
from edgeapp.core.install.pairing import CRASH, UNIDENTIFIED, WORKS, Build, decide, identify
from edgeapp.core.install.plan import DISABLE_CORAL_SOURCES, Plan, plan_for
from edgeapp.core.userdirs import cache_dir
from edgeapp.errors import EdgeappError, MissingDependency
from edgeapp.flows.doctor.devices import FAIL, OK, WARN, Check, device_checks
from edgeapp.hw.compiler import ENV_VAR, find_compiler, read_version
from edgeapp.hw.libedgetpu import (
    build_label,
    dpkg_owner,
    edgetpu_library,
    explain_load_error,
    libusb_fix,
    open_library,
    short_version,
)
from edgeapp.hw.osinfo import coral_apt_sources, read_platform
from edgeapp.hw.proc import isolated_python, log_command
from edgeapp.hw.runtime import available_runtimes, runtime_import_code, runtime_version
from edgeapp.hw.sysroot import read_text, under
from edgeapp.hw.verdicts import Pair, VerdictCache

PLAN_FIX = "see the plan below (`edgeapp doctor` prints the commands for this platform)"


def run_checks(root: str | Path = "/", env: Optional[Mapping[str, str]] = None,
               machine: Optional[str] = None, plan: Optional[Plan] = None) -> list[Check]:
    """All checks, in the order a user fixes things: Python side, library, devices, compiler."""
    env = os.environ if env is None else env
    machine = (machine or platform.machine()).lower()
    versions = installed_runtimes()
    checks = system_checks(root, machine)
    runtimes = runtime_checks(versions)
    checks += runtimes
    checks.append(numpy_check(_dist_version("numpy"), versions))
    checks.append(tensorflow_check())
    checks.append(opencv_check())
    checks.append(pycoral_check())
    checks += library_checks(env, versions, root, plan or install_plan(root, machine),
                             {c.name[len("runtime "):]: c for c in runtimes})
    checks.append(probe_cache_check(env))
    checks += device_checks(root, env)
    apt = apt_sources_check(root)
    checks += [apt] if apt else []
    checks.append(compiler_check(env, machine, root))
    return checks


def exit_ok(checks: list[Check]) -> bool:
    return not any(c.status == FAIL for c in checks)


# --- Python side ---------------------------------------------------------------------------

def install_plan(root: str | Path = "/", machine: Optional[str] = None,
                 python: Optional[tuple] = None, system: Optional[str] = None) -> Plan:
    """The commands that give the system at `root` a working Edge TPU runtime pair (printed, never run)."""
    return plan_for(read_platform(root, machine, python, system))


def system_checks(root: str | Path, machine: str) -> list[Check]:
    release = parse_os_release(read_text(under(root, "/etc/os-release")) or "")
    os_name = release.get("PRETTY_NAME") or f"{platform.system()} {platform.release()}"
    arch = Check("architecture", OK, machine)
    if machine in ("armv7l", "armv6l", "i686", "i386"):
        arch = Check("architecture", WARN, f"{machine} (32-bit): no ai-edge-litert wheels",
                     "edgeapp uses tflite-runtime here, which needs numpy<2")
    py = platform.python_version()
    python = Check("python", OK, f"{py} ({platform.python_implementation()}) at {sys.executable}")
    if sys.version_info < (3, 10):
        python = Check("python", WARN, f"{py}: ai-edge-litert needs Python 3.10+",
                       "edgeapp falls back to tflite-runtime; use Python 3.10+ for the faster runtime")
    return [Check("os", OK, os_name), arch, python]


def installed_runtimes() -> dict[str, str]:
    """TFLite runtimes installed (found, not imported) and their versions."""
    return {n: runtime_version(n) for n in available_runtimes()}


def runtime_checks(versions: Mapping[str, str]) -> list[Check]:
    """Import each light runtime in a child: a broken wheel fails there, not here."""
    checks = [import_check(name, version) for name, version in versions.items()
              if name != "tensorflow"]  # a 5-second import; see tensorflow_check and library_checks
    if not any(c.status == OK for c in checks) and "tensorflow" not in versions:
        checks.append(Check("runtime", FAIL, "no TFLite runtime installed",
                            "pip install ai-edge-litert (tflite-runtime on 32-bit ARM)"))
    return checks


def import_check(name: str, version: str) -> Check:
    """Runtime `name` imported in a child exactly as edgeapp imports it (its Interpreter too)."""
    cmd = isolated_python(runtime_import_code(name))  # -I: the cwd cannot shadow the runtime
    log_command(cmd)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if proc.returncode == 0:
        return Check(f"runtime {name}", OK, f"{version}, imports")
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return Check(f"runtime {name}", FAIL, f"{version} does not import: "
                 f"{lines[-1] if lines else proc.returncode}", f"pip install --force-reinstall {name}")


def numpy_check(numpy_version: Optional[str], runtimes: Mapping[str, str]) -> Check:
    """tflite-runtime wheels (the last is 2.14) are built against numpy 1: numpy 2 breaks them."""
    if numpy_version is None:
        return Check("numpy", FAIL, "not installed", "pip install numpy")
    major = _major(numpy_version)
    tflite = runtimes.get("tflite-runtime")
    if tflite and major >= 2:
        return Check("numpy", FAIL, f"{numpy_version}, but tflite-runtime {tflite} is built for numpy 1",
                     "pip install 'numpy<2' (or use ai-edge-litert)")
    return Check("numpy", OK, numpy_version)


def tensorflow_check() -> Check:
    if importlib.util.find_spec("tensorflow") is None:
        return Check("tensorflow", WARN, "not installed: `edgeapp convert` needs it",
                     "pip install 'edgeapp[convert]' (on a PC; inference does not need it)")
    return Check("tensorflow", OK, f"{runtime_version('tensorflow')} (for convert)")


def opencv_check(module: str = "cv2") -> Check:
    """OpenCV (camera, detect --annotate), imported in a child: on servers the desktop wheel
    installs fine and then fails to import for want of libGL."""
    if importlib.util.find_spec(module) is None:
        return Check("opencv", WARN, "not installed: `edgeapp camera` and `detect --annotate` need it",
                     "pip install opencv-python (opencv-python-headless on servers)")
    proc = subprocess.run([sys.executable, "-c", f"import {module}; print({module}.__version__)"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode == 0:
        return Check("opencv", OK, f"{proc.stdout.strip()} (camera, detect --annotate)")
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else f"exit {proc.returncode}"
    fix = ("pip uninstall -y opencv-python && pip install opencv-python-headless" if "libGL" in last
           else "pip install --force-reinstall opencv-python")
    return Check("opencv", FAIL, f"installed but does not import: {last}", fix)


# PyPI packages whose import name is `pycoral` and that are not Google's library (edgeapp needs
# none of them): `pycoral` 0.2.0 is a CLI for the Allen Coral Atlas (reef maps), `pycoral-pi5`
# ships only an aarch64 _pywrap_coral.so exporting one function, its __init__ importing from the
# wrong folder (issue seen on PyPI's files).
IMPOSTORS = {"pycoral": "PyPI's `pycoral` (a CLI for the Allen Coral Atlas reef maps, not Google's "
                        "Edge TPU library)",
             "pycoral-pi5": "PyPI's `pycoral-pi5` (one prebuilt _pywrap_coral.so whose package does "
                            "not import)"}


def pycoral_check() -> Check:
    """Google's pycoral has pycoral/utils/edgetpu.py; PyPI's `pycoral` and `pycoral-pi5` are
    other things under that name. edgeapp needs none of them."""
    not_needed = "edgeapp does not need pycoral: it loads the Edge TPU delegate itself"
    dists = [d for d in IMPOSTORS if _dist_version(d) is not None]
    spec = importlib.util.find_spec("pycoral")
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    google = any(list(Path(p, "utils").glob("edgetpu.*")) for p in places)
    if dists and not (google and dists == ["pycoral"] and _is_google_pycoral()):
        what = " and ".join(f"{IMPOSTORS[d]} {_dist_version(d)}" for d in dists)
        return Check("pycoral", WARN, f"{what} is installed: {not_needed}, and these shadow the name",
                     f"pip uninstall -y {' '.join(dists)}")
    if spec is None:
        return Check("pycoral", OK, f"not installed ({not_needed})")
    if google:
        version = _dist_version("pycoral") or "(version unknown)"
        return Check("pycoral", OK, f"Google's pycoral {version} at {places[0]} ({not_needed})")
    return Check("pycoral", WARN, f"the `pycoral` at {places[0] if places else spec.origin} is not "
                 f"Google's (no pycoral.utils.edgetpu), an unrelated package: {not_needed}",
                 "pip uninstall -y pycoral")


def _is_google_pycoral() -> bool:
    """Google's wheel (from its GitHub releases) is also named `pycoral` on disk: tell it by its
    metadata, which names Google."""
    try:
        meta = metadata.metadata("pycoral")
    except metadata.PackageNotFoundError:
        return False
    return "google" in " ".join(str(meta.get(k) or "") for k in ("Author", "Author-email", "Home-page")).lower()


# --- Edge TPU library and the probe verdicts -----------------------------------------------

def library_checks(env: Mapping[str, str], runtimes: Mapping[str, str], root: str | Path = "/",
                   plan: Optional[Plan] = None, imports: Optional[Mapping[str, Check]] = None) -> list[Check]:
    """The Edge TPU library: does it load, which build is it, and each runtime's pair with it.
    With `imports` (the runtime import checks by runtime name), a runtime not import-checked
    yet is checked here, and a pair whose runtime does not import is never called ok."""
    fix = plan.fix if plan is not None else PLAN_FIX
    name = edgetpu_library(env)
    try:
        lib, path = open_library(name)
    except OSError as e:
        why = explain_load_error(str(e), name)
        if why.startswith("no "):  # not installed
            return [Check("libedgetpu", WARN, f"{name} not found: no Edge TPU runtime, CPU only", fix)]
        return [Check("libedgetpu", FAIL, f"{name} does not load: {why}",  # installed, unusable
                      libusb_fix() if "libusb" in why else fix)]
    label = build_label(lib)
    owner = dpkg_owner(path, str(root))
    build = identify(owner, label)
    where = f"{path}, {owner[0]} {owner[1]}" if owner else path
    known = "" if build.builder == UNIDENTIFIED else f"; {build.describe()}"
    checks = [Check("libedgetpu", OK, f"{short_version(label) or 'version unknown'} at {where}{known}")]
    cache = VerdictCache(cache_dir(env))
    for runtime, version in runtimes.items():
        imported = None
        if imports is not None:
            imported = imports.get(runtime)
            if imported is None:  # TensorFlow: worth its slow import only when a pair needs it
                imported = import_check(runtime, version)
                checks.append(imported)
        if imported is not None and imported.status != OK:
            checks.append(Check(f"pair {runtime}", FAIL, f"{runtime} {version} cannot be used with "
                                "the Edge TPU: it does not import (see its runtime line)", imported.fix))
            continue
        checks.append(pair_check(Pair.of(runtime, version, path), build, cache, fix))
    return checks


def pair_check(pair: Pair, build: Build, cache: VerdictCache, fix: str = PLAN_FIX) -> Check:
    """The cached probe verdict of a (runtime, libedgetpu) pair, else the pairing table's."""
    name = f"pair {pair.runtime}"
    verdict = cache.get(pair)
    if verdict is not None and verdict.status == "pass":
        return Check(name, OK, f"{pair.runtime} {pair.runtime_version} passed the delegate probe "
                               f"({verdict.probed_at})")
    if verdict is not None:
        return Check(name, FAIL, verdict.message, fix)
    decision = decide(build, pair.runtime, pair.runtime_version)
    if decision.verdict == CRASH:  # refused before any probe: the Edge TPU is never used with it
        return Check(name, FAIL, decision.summary(), fix)
    said = decision.summary() if decision.verdict == WORKS or build.builder != UNIDENTIFIED \
        else f"{pair.runtime} {pair.runtime_version}"
    return Check(name, OK, f"{said}; not probed yet (edgeapp probes it on first Edge TPU use)")


def probe_cache_check(env: Mapping[str, str]) -> Check:
    """Every cached verdict edgeapp acts on: delegate-probe pairs and model-file checks, also of
    pairs no longer installed (`--format json` lists them); a warning while any refuses."""
    cache = VerdictCache(cache_dir(env))
    counts = cache.counts()
    refused = sum(n for c in counts.values() for s, n in c.items() if s != "pass")
    if refused:
        return Check("probe cache", WARN, cache.describe(),
                     "`edgeapp doctor --forget-probes` after fixing the runtime or the files")
    return Check("probe cache", OK, cache.describe())


# --- compiler ------------------------------------------------------------------------------

def compiler_check(env: Mapping[str, str], machine: str, root: str | Path = "/") -> Check:
    """The compiler `edgeapp compile` would run: the same lookup ($EDGETPU_COMPILER, PATH, the
    installed one), its version, and how it runs on this machine."""
    name = "edgetpu_compiler"
    try:
        tool = find_compiler(env=env)
    except MissingDependency as e:
        if env.get(ENV_VAR):  # set, but to nothing usable: `compile` would fail the same way
            return Check(name, FAIL, str(e).split(";")[0],
                         f"point ${ENV_VAR} at the edgetpu_compiler executable, or unset it")
        return Check(name, WARN, "not installed: needed to compile models for the Edge TPU "
                     "(`edgeapp check` predicts the mapping without it)", "edgeapp compiler install")
    where = f"{tool.path} ({tool.source})"
    try:
        runs = tool.runner(env, machine)
    except EdgeappError as e:  # ARM Linux without QEMU, macOS without Docker
        return Check(name, WARN, f"{tool.version or 'installed'} at {where}, but cannot run here",
                     str(e).split("; ", 1)[-1])
    try:
        version = read_version(tool, env) if runs.mode != "docker" else (tool.version or "?")
    except MissingDependency as e:
        return Check(name, FAIL, f"{where} does not run: {e}", "edgeapp compiler install")
    how = "" if runs.mode == "native" else f", runs {runs.describe()}"
    return Check(name, OK, f"{version} at {where}{how}")


def apt_sources_check(root: str | Path = "/") -> Optional[Check]:
    """Coral's apt sources left in /etc/apt: `apt-get update` fails on them since the repository
    went away (404/403). Only reported when there are some."""
    files = coral_apt_sources(root)
    if not files:
        return None
    return Check("apt sources", WARN, f"{', '.join(files)} still list Coral's package source, which is "
                 "gone (404/403): `apt-get update` fails on it", DISABLE_CORAL_SOURCES)


# --- helpers -------------------------------------------------------------------------------

def _dist_version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def _major(version: str) -> int:
    return (_version_tuple(version) or (0,))[0]
