"""Stand-in Edge TPU libraries that crash, hang, return NULL or load but claim no node (built
once per session with the C compiler), for the containment, probe and runtime tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FAKE_C = r"""
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* TfLiteDelegate from tensorflow/lite/core/c/common.h: Prepare claims nothing and succeeds. */
typedef struct { void* data; int (*prepare)(void*, void*); void* copy_from; void* copy_to;
                 void* free_handle; int64_t flags; void* opaque; } Delegate;
static int prepare(void* context, void* delegate) { return 0; }
static Delegate fake = {0, prepare, 0, 0, 0, 0, 0};

static void note(const char* what) {
  const char* p = getenv("FAKE_EDGETPU_LOG");
  FILE* f = p ? fopen(p, "a") : NULL;
  if (f) { fprintf(f, "%s %d\n", what, (int)getpid()); fclose(f); }
}

const char* edgetpu_version(void) {
  return "BuildLabel(COMPILER=fake,DATE=redacted,TIME=redacted),RuntimeVersion(14)";
}

/* edgetpu_c.h: one USB accelerator and one PCIe card. */
struct edgetpu_device { int type; const char* path; };
static struct edgetpu_device two[2] = {{1, "/sys/bus/usb/devices/2-1"}, {0, "/dev/apex_0"}};
struct edgetpu_device* edgetpu_list_devices(size_t* n) { *n = 2; return two; }
void edgetpu_free_devices(struct edgetpu_device* d) { note("free_devices"); }

void* tflite_plugin_create_delegate(char** keys, char** values, size_t n, void (*report)(const char*)) {
  note("create");
#if defined(CRASH)
  raise(SIGSEGV);
#elif defined(HANG)
  for (;;) sleep(1);
#elif defined(NULL_DELEGATE)
  report("fake: no Edge TPU here");
  return NULL;
#endif
  return &fake;
}

void tflite_plugin_destroy_delegate(void* delegate) {}
"""


KINDS = ("CRASH", "HANG", "NULL_DELEGATE", "LOADS")


@pytest.fixture(scope="session")
def fake_libs(tmp_path_factory) -> dict[str, Path]:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None or sys.platform == "win32":
        pytest.skip("needs a C compiler (cc, gcc or clang) to build stand-in Edge TPU libraries")
    folder = tmp_path_factory.mktemp("fake_libedgetpu")
    (folder / "fake.c").write_text(FAKE_C)
    libs = {}
    for kind in KINDS:
        libs[kind] = folder / f"libedgetpu_{kind.lower()}.so"
        subprocess.run([cc, "-shared", "-fPIC", f"-D{kind}", "-o", str(libs[kind]), str(folder / "fake.c")],
                       check=True)
    return libs
