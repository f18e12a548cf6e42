"""Which libedgetpu builds work with which TFLite runtimes: what is known, as data, and the
decision edgeapp takes from it before the delegate probe (hw/probe.py).

Why a pair crashes: the Edge TPU delegate hands the interpreter `TfLiteRegistration` structs laid
out by the TensorFlow headers libedgetpu was compiled with. TensorFlow appends fields to that
struct ("New values should be added only to the end of structs", tensorflow/lite/core/c/common.h)
and did so in 2022-2023; a runtime built after that reads past the end of an older library's
struct and segfaults. Google's last libedgetpu, 16.0 (July 2021), was built against TensorFlow
2.5.0 (google-coral/libedgetpu workspace.bzl, release-grouper: TENSORFLOW_COMMIT a4dfb8d1..., the
same commit string is inside ../shared/libedgetpu/k8/libedgetpu.so.1.0). ai-edge-litert is built
from TensorFlow sources newer than those changes, so it is on the crashing side with that build,
as tflite-runtime >= 2.12 is; community rebuilds of libedgetpu against TensorFlow >= 2.13
(feranick/libedgetpu, Debian versions `16.0tfX.Y.Z-N`) are on the working side.

Verdicts: `works` (reported working), `crash` (reported crashing: refused before any child
process runs) and `unknown` (no report: the probe decides). A `works` pair is still probed once:
the table names a build by what it claims (a package version, a build label); the probe tests
the file itself. Pure data and functions: callers read the package database and the library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

WORKS, CRASH, UNKNOWN = "works", "crash", "unknown"
GOOGLE, COMMUNITY, UNIDENTIFIED = "google", "community", "unidentified"

Version = Tuple[int, ...]

# What Google's libedgetpu 16.0 answers to edgetpu_version(), the same on every Linux build:
# x86-64 (../shared/libedgetpu/k8, from google-coral/pycoral libedgetpu_bin/direct/k8), arm64
# (Coral's apt libedgetpu 16.0, printed in mattn/go-tflite#52) and armv7l (Raspberry Pi OS,
# google-coral/edgetpu#660). Community builds carry their own compiler and a real date.
GOOGLE_16_LABEL = "BuildLabel(COMPILER=6.3.0 20170516,DATE=redacted,TIME=redacted), RuntimeVersion(14)"
GOOGLE_16_TF = (2, 5)

# Debian versions of feranick/libedgetpu rebuilds made before the `16.0tfX.Y.Z` naming
# (its debian/changelog: 16.0-0ppa1 "Build against TF v2.8.4", 16.0pp2 v2.9.3, 16.0pp3 v2.10.1).
_EARLY_COMMUNITY = (("16.0-0ppa1", (2, 8)), ("16.0pp2", (2, 9)), ("16.0pp3", (2, 10)))
_TF_IN_VERSION = re.compile(r"tf(\d+)\.(\d+)", re.I)  # 16.0tf2.17.1-1, 16.0TF2.19.1-1.bookworm
_GOOGLE_VERSION = re.compile(r"^\d+(\.\d+)?(-\d+)?$")  # Coral's own: 16.0, 15.0, 14.1, 12.1-1 ...


@dataclass(frozen=True)
class Build:
    """One libedgetpu build, as far as it can be told apart from others."""

    builder: str  # google, community or unidentified
    version: str  # as users name it: the Debian version, else the label's RuntimeVersion(N), else ""
    tf: Optional[Tuple[int, int]]  # the TensorFlow (major, minor) whose headers it was built with
    evidence: str  # how we know: "Debian package libedgetpu1-std 16.0", "edgetpu_version() build label"

    def describe(self) -> str:
        """`libedgetpu 16.0 (Google's build for TensorFlow 2.5)` and the like, for one-line messages."""
        name = f"libedgetpu {self.version}" if self.version else "libedgetpu of unknown version"
        tf = f" for TensorFlow {self.tf[0]}.{self.tf[1]}" if self.tf else ""
        if self.builder == GOOGLE:
            return f"{name} (Google's build{tf})"
        if self.builder == COMMUNITY:
            return f"{name} (community build{tf})"
        return name


def identify(package: Optional[Tuple[str, str]], build_label: Optional[str]) -> Build:
    """The build, from the Debian package owning the library (name, version), else its build label."""
    from_package = None
    if package:
        name, version = package
        evidence = f"Debian package {name} {version}"
        tf = _TF_IN_VERSION.search(version)
        if tf:
            return Build(COMMUNITY, version, (int(tf.group(1)), int(tf.group(2))), evidence)
        for prefix, early in _EARLY_COMMUNITY:
            if version.startswith(prefix):
                return Build(COMMUNITY, version, early, evidence)
        if version == "16.0":  # Coral's 16.0 (libedgetpu debian/changelog, 2021-07-09)
            return Build(GOOGLE, version, GOOGLE_16_TF, evidence)
        builder = GOOGLE if _GOOGLE_VERSION.match(version) else UNIDENTIFIED
        from_package = Build(builder, version, None, evidence)
    label = " ".join((build_label or "").split())
    if label == GOOGLE_16_LABEL:
        evidence = "edgetpu_version() build label" + (f"; {from_package.evidence}" if from_package else "")
        return Build(GOOGLE, "16.0", GOOGLE_16_TF, evidence)
    if from_package:
        return from_package
    short = re.search(r"RuntimeVersion\(\d+\)", label)
    return Build(UNIDENTIFIED, short.group(0) if short else "", None,
                 "edgetpu_version() build label not known" if label else "no package, no build label")


@dataclass(frozen=True)
class Row:
    """Builds of `builder` made with TensorFlow in [tf_from, tf_to) under `runtime` in [since, until)."""

    builder: str
    tf_from: Tuple[int, int]
    tf_to: Optional[Tuple[int, int]]
    runtime: str
    since: Version
    until: Optional[Version]
    verdict: str
    source: str  # the short citation users see
    same_tf: bool = False  # only a runtime of the TensorFlow (major, minor) the build was made with


ANY: Version = (0,)

TABLE: Tuple[Row, ...] = (
    # Coral's own pair: Mendel 5.x ships libedgetpu1-std 16.0 with python3-tflite-runtime 2.5.0.post1;
    # google-coral/edgetpu#660: Raspberry Pi OS bullseye, the 16.0 build label, tflite_runtime
    # 2.5.0.post1 and pycoral 2.0.0 classify on the Edge TPU.
    Row(GOOGLE, (2, 5), (2, 6), "tflite-runtime", (2, 5), (2, 6), WORKS, "Coral's pair; google-coral/edgetpu#660"),
    # google-coral/edgetpu#812 (feranick, tested every release to 2.15): "The last version of
    # TensorFlow Lite to support EdgeTPU is 2.11.1. Any later version leads to a segmentation fault."
    # 2.6-2.10 have no clear report (edgetpu#821 saw segfaults "from 2.10" on a Pi): unknown.
    Row(GOOGLE, (2, 5), (2, 6), "tflite-runtime", (2, 11), (2, 12), WORKS, "google-coral/edgetpu#812"),
    # Same report; also tensorflow/tensorflow#62371 (2.14, Raspberry Pi 5), oberluz/pycoral#13
    # (tflite_runtime 2.13 with Coral's libedgetpu), ultralytics/ultralytics#14618.
    Row(GOOGLE, (2, 5), (2, 6), "tflite-runtime", (2, 12), None, CRASH,
        "google-coral/edgetpu#812, tensorflow/tensorflow#62371"),
    # The full TensorFlow carries the same interpreter: mattn/go-tflite#52 links TensorFlow 2.15's
    # TFLite C library with Coral's apt libedgetpu 16.0 (the label above): SIGSEGV creating the
    # interpreter with the delegate.
    Row(GOOGLE, (2, 5), (2, 6), "tensorflow", (2, 12), None, CRASH, "google-coral/edgetpu#812, mattn/go-tflite#52"),
    # ai-edge-litert (first release 1.0.1, 2024) is built from TensorFlow sources after 2.16, past
    # the struct changes in the module docstring, so it reads past the old struct as tflite-runtime
    # >= 2.12 does; edgetpu#812's "any later version".
    Row(GOOGLE, (2, 5), (2, 6), "ai-edge-litert", ANY, None, CRASH,
        "google-coral/edgetpu#812: runtimes newer than TF 2.11 segfault with it"),
    # google-ai-edge/LiteRT#3611 (2025-09-18), feranick: libedgetpu "now supports tensorflow up to
    # version 2.19.1 ... with such updated libraries in place, ai-edge-litert is perfectly
    # compatible with edgeTPU".
    Row(COMMUNITY, (2, 19), None, "ai-edge-litert", ANY, None, WORKS, "google-ai-edge/LiteRT#3611"),
    # feranick publishes each libedgetpu 16.0TF2.x with tflite_runtime 2.x wheels (feranick/TFlite-builds)
    # as a set; Frigate installs libedgetpu1-max 16.0tf2.17.1-1 with tflite_runtime 2.17.1
    # (blakeblackshear/frigate docker/main/install_deps.sh); tensorflow/tensorflow#62371 and
    # EdjeElectronics/TensorFlow-Lite-Object-Detection-on-Android-and-Raspberry-Pi#180 report these
    # rebuilds fixing the segfault.
    Row(COMMUNITY, (2, 8), None, "tflite-runtime", ANY, None, WORKS,
        "matched rebuild (feranick/libedgetpu + TFlite-builds; Frigate ships 2.17.1)", same_tf=True),
)


@dataclass(frozen=True)
class Decision:
    verdict: str
    build: Build
    runtime: str
    runtime_version: str
    source: str = ""

    def summary(self) -> str:
        pair = f"{self.build.describe()} under {self.runtime} {self.runtime_version}"
        if self.verdict == CRASH:
            return f"{self.build.describe()} is known to crash under {self.runtime} " \
                   f"{self.runtime_version} ({self.source})"
        if self.verdict == WORKS:
            return f"{pair}: reported to work ({self.source})"
        return f"{pair}: no report on this pair"


def version_tuple(text: str) -> Version:
    """(2, 5, 0) from `2.5.0.post1`; () when there is no number."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text or "")
    return tuple(int(p) for p in m.group(1).split(".")[:3]) if m else ()


def decide(build: Build, runtime: str, runtime_version: str) -> Decision:
    """The first row of TABLE that holds for the pair, else unknown.

    An unknown runtime version ("" or "unknown") only matches rows that hold for every version.
    """
    version = version_tuple(runtime_version)
    for row in TABLE:
        if row.builder != build.builder or row.runtime != runtime or build.tf is None:
            continue
        if not _within(build.tf, row.tf_from, row.tf_to):
            continue
        if not version:
            if row.since != ANY or row.until is not None or row.same_tf:
                continue
        elif not _within(version, row.since, row.until):
            continue
        if row.same_tf and version[:2] != build.tf:
            continue
        return Decision(row.verdict, build, runtime, runtime_version, row.source)
    return Decision(UNKNOWN, build, runtime, runtime_version)


def _within(value: Tuple[int, ...], low: Tuple[int, ...], high: Optional[Tuple[int, ...]]) -> bool:
    return low <= value and (high is None or value < high)
