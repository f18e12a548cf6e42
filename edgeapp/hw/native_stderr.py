"""Native libraries' routine chatter kept off the user's terminal.

TensorFlow writes straight to file descriptor 2 from C++, past Python's sys.stderr and past
TF_CPP_MIN_LOG_LEVEL for what it logs before absl is initialised: `WARNING: All log messages
before absl::InitializeLog() is called are written to STDERR`, then `I0000 ... port.cc:153]
oneDNN custom operations are on ...` (twice per import), and the converter's `fully_quantize:
0, inference_type: 6 ...`. `filtered_native_stderr` captures fd 2 around such a call and echoes
only the lines that are not routine, so warnings and errors still reach the user.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from typing import Iterator, List, Optional, TextIO

from edgeapp.hw.runtime_errors import NATIVE_NOISE

ROUTINE_PREFIXES = ("fully_quantize:", "WARNING: All log messages before absl::InitializeLog()",
                    "Estimated count of arithmetic ops",
                    "To enable the following instructions:",  # cpu_feature_guard's 2nd line
                    *NATIVE_NOISE)  # TFLite's "INFO: Created TensorFlow Lite XNNPACK delegate for CPU."
# absl/glog lines of severity I(nfo) or W(arning): `I0000 00:00:1795463749.232396  5526 port.cc:153] `
_ABSL_ROUTINE = re.compile(r"^[IW]\d{4} [\d:.]+ +\d+ \S+\.(?:cc|h):\d+\]")
# The GPU build of TensorFlow (which tf-keras pulls in beside tensorflow-cpu) on a machine without
# CUDA: `E0000 ... cuda_platform.cc:52] failed call to cuInit: ...`. Not an error for edgeapp.
_NO_GPU = re.compile(r"^E\d{4} [\d:.]+ +\d+ cuda_\w+\.cc:\d+\] failed call to cuInit")


def is_routine(line: str) -> bool:
    text = line.strip()
    return (not text or text.startswith(ROUTINE_PREFIXES) or bool(_ABSL_ROUTINE.match(text))
            or bool(_NO_GPU.match(text)))


@contextlib.contextmanager
def filtered_native_stderr() -> Iterator[None]:
    """Capture fd 2 for the block and echo its non-routine lines afterwards; Python's
    sys.stderr (our messages, a progress bar) keeps writing to the real stderr meanwhile."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to protect
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        python_stderr = sys.stderr
        direct = os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8", errors="replace")
        os.dup2(tmp.fileno(), 2)
        sys.stderr = direct
        try:
            yield
        finally:
            direct.flush()
            sys.stderr = python_stderr
            direct.close()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            for line in text.splitlines():
                if not is_routine(line):
                    sys.stderr.write(line + "\n")
            sys.stderr.flush()


@contextlib.contextmanager
def chatter_into(log: TextIO, stdout: Optional[TextIO] = None) -> Iterator[None]:
    """Everything a converter prints goes to the file `log`: Python's stdout (through `stdout`,
    a writer that may watch it, when given) and warnings, and native writes to fd 1 and 2;
    sys.stderr stays on the terminal (our progress bar, our lines)."""
    import warnings

    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = (os.dup(1), os.dup(2))
    except OSError:
        saved = None
    python = (sys.stdout, sys.stderr)
    direct = os.fdopen(os.dup(saved[1]), "w", buffering=1, encoding="utf-8", errors="replace") if saved else None
    log.flush()
    if saved:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stderr = direct
    sys.stdout = stdout or log
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = lambda msg, cat, fn, ln, *a: log.write(f"{cat.__name__}: {msg}\n")
            yield
    finally:
        log.flush()
        sys.stdout, sys.stderr = python
        if saved:
            direct.close()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


_LIBTIFF_HANDLERS = ("TIFFSetErrorHandler", "TIFFSetErrorHandlerExt", "TIFFSetWarningHandler",
                     "TIFFSetWarningHandlerExt")
_libtiff_quiet = False


def quiet_libtiff() -> int:
    """Keep libtiff's messages off the terminal: Pillow decodes compressed TIFFs with libtiff,
    whose default handlers print to file descriptor 2 ("ZIPDecode: Decoding error at scanline
    0, incorrect data check.", "JPEGLib: Quantization table 0x00 was not defined."), between
    edgeapp's lines. Pillow raises its own error all the same, which edgeapp reports as one line
    naming the file; so the handlers of every libtiff already in this process (Pillow's bundled
    one, or the system's it links) are set to none, once. Call it after Pillow's core is
    Returns how many libraries were quieted."""
    global _libtiff_quiet
    if _libtiff_quiet:
        return 0
    _libtiff_quiet = True
    import ctypes

    count = 0
    for path in _libtiff_candidates():
        try:  # only a library already loaded (RTLD_NOLOAD): never a second copy
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LOCAL", 0))
        except OSError:
            continue
        for name in _LIBTIFF_HANDLERS:
            setter = getattr(lib, name, None)
            if setter is not None:
                setter.argtypes, setter.restype = [ctypes.c_void_p], ctypes.c_void_p
                setter(None)
        count += 1
    return count


def _libtiff_candidates() -> list:
    """File names libtiff may be loaded from: a Pillow wheel's bundled copy, else the system's."""
    import ctypes.util
    from pathlib import Path

    try:
        import PIL
        from PIL import Image  # noqa: F401 - Pillow's core, which loads its libtiff
    except ImportError:
        return []
    here = Path(PIL.__file__).resolve().parent
    bundled = sorted(str(p) for folder in (here.parent / "pillow.libs", here / ".dylibs")
                     if folder.is_dir() for p in folder.glob("libtiff*"))
    system = ctypes.util.find_library("tiff")
    return bundled + ([system] if system else [])


@contextlib.contextmanager
def collected_native_stderr(lines: List[str]) -> Iterator[None]:
    """Collect what native code prints on fd 2 (runtimes log there) into `lines`.

    Routine INFO lines are dropped; anything else is echoed afterwards, so real native errors
    are never hidden, and callers can quote them in their one-line message.
    """
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        fault = _FaultReport(saved)
        try:
            sys.stderr.flush()
            fault.start()
            os.dup2(tmp.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            fault.stop()
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
        for line in text.splitlines():
            if line.strip() and not line.startswith(NATIVE_NOISE):
                lines.append(line)
                sys.stderr.write(line + "\n")


class _FaultReport:
    """While fd 2 is redirected, a native crash still reaches the user's terminal.

    faulthandler writes to the saved (real) stderr, so a runtime dying natively in this process
    never leaves the user without a line. Restored afterwards.
    """

    _lock = threading.Lock()

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.was_enabled = False
        self.active = False

    def fileno(self) -> int:
        return self.fd

    def start(self) -> None:
        import faulthandler

        with self._lock:
            try:
                self.was_enabled = faulthandler.is_enabled()
                faulthandler.enable(file=self)
                self.active = True
            except (ValueError, OSError, RuntimeError):
                pass

    def stop(self) -> None:
        import faulthandler

        with self._lock:
            if not self.active:
                return
            try:
                if self.was_enabled:
                    faulthandler.enable(file=sys.__stderr__ or sys.stderr)
                else:
                    faulthandler.disable()
            except (ValueError, OSError, RuntimeError, AttributeError):
                pass
