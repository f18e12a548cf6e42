"""The pairing table (core/install/pairing.py): identifying a libedgetpu build, the decision over every
row, and the refusal of a known-crash pair before any probe child runs.

The end-to-end tests build small stand-in Edge TPU libraries with the C compiler (as
tests/libedgetpu_fixtures.py does): one answers edgetpu_version() with Google's 16.0 build label, one with an
unknown label. Every process that loads a stand-in appends "load <pid>" to $FAKE_EDGETPU_LOG
(a constructor), and creating its delegate appends "create <pid>" and segfaults, so the log
shows exactly which processes touched the library and whether a delegate was created.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from conftest import ROOT, default_runtime

from edgeapp.core.install.pairing import (
    ANY,
    COMMUNITY,
    CRASH,
    GOOGLE,
    GOOGLE_16_LABEL,
    TABLE,
    UNIDENTIFIED,
    UNKNOWN,
    WORKS,
    Build,
    decide,
    identify,
    version_tuple,
)
from edgeapp.core.install.plan import plan_for
from edgeapp.hw.osinfo import read_platform
from edgeapp.hw.verdicts import Pair, Verdict, VerdictCache

try:
    LITERT_VERSION = metadata.version("ai-edge-litert")
except metadata.PackageNotFoundError:  # Python <= 3.9: tflite-runtime instead; the table still knows it
    LITERT_VERSION = "2.3.0"
RUNTIME, RUNTIME_VERSION = default_runtime()  # what edgeapp runs here (end-to-end tests)
GOOGLE_16 = identify(("libedgetpu1-std", "16.0"), None)
COMMUNITY_2_17 = identify(("libedgetpu1-max", "16.0tf2.17.1-1"), None)
COMMUNITY_2_19 = identify(("libedgetpu1-std", "16.0tf2.19.1-1.bookworm"), None)


@pytest.mark.parametrize("package, label, builder, version, tf", [
    (("libedgetpu1-std", "16.0"), None, GOOGLE, "16.0", (2, 5)),
    (("libedgetpu1-max", "16.0tf2.17.1-1"), None, COMMUNITY, "16.0tf2.17.1-1", (2, 17)),
    (("libedgetpu1-std", "16.0TF2.19.1-1.bookworm"), None, COMMUNITY, "16.0TF2.19.1-1.bookworm", (2, 19)),
    (("libedgetpu1-std", "16.0pp3"), None, COMMUNITY, "16.0pp3", (2, 10)),  # feranick's early naming
    (("libedgetpu1-std", "16.0-0ppa1"), None, COMMUNITY, "16.0-0ppa1", (2, 8)),
    (("libedgetpu1-std", "15.0"), None, GOOGLE, "15.0", None),  # Google's, TensorFlow not on record
    (("libedgetpu1-std", "15.0"), GOOGLE_16_LABEL, GOOGLE, "16.0", (2, 5)),  # the label is decisive
    (None, GOOGLE_16_LABEL, GOOGLE, "16.0", (2, 5)),
    (None, GOOGLE_16_LABEL.replace(", ", ",  "), GOOGLE, "16.0", (2, 5)),  # spacing does not matter
    (None, "BuildLabel(COMPILER=14.2.0,DATE=Feb 22 2026,TIME=09:51:57), RuntimeVersion(14)",
     UNIDENTIFIED, "RuntimeVersion(14)", None),  # a self-built library: a real date, another compiler
    (None, None, UNIDENTIFIED, "", None),
])
def test_identify_the_build(package, label, builder, version, tf):
    build = identify(package, label)
    assert (build.builder, build.version, build.tf) == (builder, version, tf)


def test_describe_names_builder_version_and_tensorflow():
    assert GOOGLE_16.describe() == "libedgetpu 16.0 (Google's build for TensorFlow 2.5)"
    assert COMMUNITY_2_17.describe() == "libedgetpu 16.0tf2.17.1-1 (community build for TensorFlow 2.17)"
    assert identify(None, None).describe() == "libedgetpu of unknown version"


@pytest.mark.parametrize("build, runtime, version, verdict", [
    (GOOGLE_16, "tflite-runtime", "2.5.0.post1", WORKS),  # Coral's own pair (Mendel)
    (GOOGLE_16, "tflite-runtime", "2.11.1", WORKS),  # the last reported to work (edgetpu#812)
    (GOOGLE_16, "tflite-runtime", "2.10.0", UNKNOWN),
    (GOOGLE_16, "tflite-runtime", "2.12.0", CRASH),
    (GOOGLE_16, "tflite-runtime", "2.14.0", CRASH),
    (GOOGLE_16, "ai-edge-litert", "1.2.0", CRASH),
    (GOOGLE_16, "ai-edge-litert", LITERT_VERSION, CRASH),
    (GOOGLE_16, "ai-edge-litert", "unknown", CRASH),  # crashes at every version
    (GOOGLE_16, "tflite-runtime", "unknown", UNKNOWN),  # depends on the version: probe it
    (GOOGLE_16, "tensorflow", "2.11.0", UNKNOWN),
    (GOOGLE_16, "tensorflow", "2.16.1", CRASH),
    (COMMUNITY_2_17, "tflite-runtime", "2.17.1", WORKS),  # Frigate's pair
    (COMMUNITY_2_17, "tflite-runtime", "2.14.0", UNKNOWN),
    (COMMUNITY_2_17, "ai-edge-litert", LITERT_VERSION, UNKNOWN),
    (COMMUNITY_2_19, "ai-edge-litert", LITERT_VERSION, WORKS),  # LiteRT#3611
    (COMMUNITY_2_19, "tflite-runtime", "2.19.0", WORKS),
    (identify(("libedgetpu1-std", "15.0"), None), "ai-edge-litert", LITERT_VERSION, UNKNOWN),
    (identify(None, None), "ai-edge-litert", LITERT_VERSION, UNKNOWN),
])
def test_decision(build, runtime, version, verdict):
    assert decide(build, runtime, version).verdict == verdict


def test_every_row_decides_the_pairs_it_describes():
    """No row is shadowed by an earlier one, and each names its source."""
    for row in TABLE:
        assert row.source, row
        build = Build(row.builder, "x", row.tf_from, "test")
        version = row.tf_from if row.same_tf else (row.since if row.since != ANY else (1, 0))
        decision = decide(build, row.runtime, ".".join(map(str, version)))
        assert (decision.verdict, decision.source) == (row.verdict, row.source), row


def test_crash_summary_names_both_versions_and_the_source():
    line = decide(GOOGLE_16, "ai-edge-litert", "2.3.0").summary()
    assert line.startswith("libedgetpu 16.0 (Google's build for TensorFlow 2.5) is known to crash "
                           "under ai-edge-litert 2.3.0 (google-coral/edgetpu#812")


def test_version_tuple():
    assert version_tuple("2.5.0.post1") == (2, 5, 0) and version_tuple("2.14") == (2, 14)
    assert version_tuple("unknown") == () and version_tuple("") == ()


# --- end to end: a known-crash pair never reaches the probe ----------------------------------

STAND_IN_C = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void note(const char* what) {
  const char* p = getenv("FAKE_EDGETPU_LOG");
  FILE* f = p ? fopen(p, "a") : NULL;
  if (f) { fprintf(f, "%s %d\n", what, (int)getpid()); fclose(f); }
}

__attribute__((constructor)) static void loaded(void) { note("load"); }

const char* edgetpu_version(void) { return LABEL; }

void* tflite_plugin_create_delegate(char** keys, char** values, size_t n, void (*report)(const char*)) {
  note("create");
  if (getenv("FAKE_EDGETPU_CRASH")) raise(SIGSEGV);
  report("stand-in: no Edge TPU here");
  return NULL;
}

void tflite_plugin_destroy_delegate(void* delegate) {}
"""
LABELS = {"google16": GOOGLE_16_LABEL,
          "selfbuilt": "BuildLabel(COMPILER=14.2.0,DATE=Feb 22 2026,TIME=09:51:57), RuntimeVersion(14)"}


@pytest.fixture(scope="session")
def stand_ins(tmp_path_factory) -> dict:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None or sys.platform == "win32":
        pytest.skip("needs a C compiler (cc, gcc or clang) to build stand-in Edge TPU libraries")
    folder = tmp_path_factory.mktemp("stand_in_libedgetpu")
    (folder / "stand_in.c").write_text(STAND_IN_C)
    libs = {}
    for name, label in LABELS.items():
        libs[name] = folder / f"libedgetpu_{name}.so"
        subprocess.run([cc, "-shared", "-fPIC", f'-DLABEL="{label}"', "-o", str(libs[name]),
                        str(folder / "stand_in.c")], check=True)
    return libs


class Classify:
    """`edgeapp classify` in a subprocess with a stand-in library, its own log and cache."""

    def __init__(self, tmp_path: Path, library: Path, model: Path, image: Path) -> None:
        self.log, self.cache = tmp_path / "calls.log", tmp_path / "cache"
        self.library, self.model, self.image = library, model, image
        self.env = {**os.environ, "EDGEAPP_EDGETPU_LIB": str(library), "FAKE_EDGETPU_LOG": str(self.log),
                    "FAKE_EDGETPU_CRASH": "1", "EDGEAPP_CACHE_DIR": str(self.cache)}

    def __call__(self, *args: str):
        proc = subprocess.Popen([sys.executable, "-m", "edgeapp", "classify", str(self.model), str(self.image),
                                 "--format", "jsonl", "-k", "1", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=ROOT, env=self.env)
        out, err = proc.communicate(timeout=300)
        self.pid = proc.pid  # edgeapp itself: never loads the library before a child did
        return proc.returncode, [json.loads(ln) for ln in out.splitlines()], err

    def calls(self) -> list:
        text = self.log.read_text() if self.log.exists() else ""
        return [tuple(ln.split()) for ln in text.splitlines()]

    def pids(self) -> set:
        return {pid for _, pid in self.calls()}


def test_known_crash_pair_is_refused_before_any_child(tmp_path, stand_ins, compiled_pair, color_images):
    run = Classify(tmp_path, stand_ins["google16"], compiled_pair[0], color_images["red"])
    code, records, err = run()
    assert code == 0, err
    assert [(r["device"], r["classes"][0]["label"]) for r in records] == [("cpu", "red")]
    fix = plan_for(read_platform("/")).fix
    assert (f"Edge TPU unavailable (libedgetpu 16.0 (Google's build for TensorFlow 2.5) is known to crash "
            f"under {RUNTIME} {RUNTIME_VERSION} (google-coral/edgetpu#812") in err
    assert f"; fix: {fix}); running colors.tflite on CPU" in err
    assert [c for c, _ in run.calls()] == ["load"]  # loaded once, to read its label; no delegate
    assert len(run.pids()) == 1  # by the label reader alone: no delegate probe ever ran
    assert VerdictCache(run.cache).entries() == {}  # no pair probed, no pair verdict cached
    assert len([ln for ln in err.splitlines() if "crash" in ln]) == 1  # one line says it all

    code, records, err = run("--device", "edgetpu")  # asked for explicitly: exit 5, same line
    assert code == 5 and records == []
    assert "error: libedgetpu 16.0 (Google's build for TensorFlow 2.5) is known to crash" in err
    assert {c for c, _ in run.calls()} == {"load"}


def test_unknown_build_goes_through_the_probe(tmp_path, stand_ins, compiled_pair, color_images):
    """The same library with a label the table does not know: the probe child runs (and crashes)."""
    run = Classify(tmp_path, stand_ins["selfbuilt"], compiled_pair[0], color_images["red"])
    code, records, err = run()
    assert code == 0 and records[0]["device"] == "cpu", err
    assert "known to crash" not in err and "killed by SIGSEGV" in err
    assert "create" in {c for c, _ in run.calls()}  # the label reader and the probe, children both
    assert all(int(pid) != run.pid for pid in run.pids())
    assert [e["status"] for e in VerdictCache(run.cache).entries().values()] == ["crash"]


def test_a_cached_pass_outranks_the_table(tmp_path, stand_ins, compiled_pair, color_images):
    """Evidence from this machine beats reports from others: the delegate is loaded in-process."""
    run = Classify(tmp_path, stand_ins["google16"], compiled_pair[0], color_images["red"])
    run.env.pop("FAKE_EDGETPU_CRASH")
    VerdictCache(run.cache).put(Pair.of(RUNTIME, RUNTIME_VERSION, str(stand_ins["google16"])),
                                Verdict("pass", ""))
    code, records, err = run()
    assert code == 0 and records[0]["device"] == "cpu", err
    assert "known to crash" not in err and "stand-in: no Edge TPU here" in err
    assert [c for c, _ in run.calls()] == ["load", "create"] and len(run.pids()) == 1  # one child
    assert all(int(pid) != run.pid for pid in run.pids())  # tried on this model in a child first
