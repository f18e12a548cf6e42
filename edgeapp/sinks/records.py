"""Result records streamed as table, JSON lines or CSV, crash-safe and resumable.

Records go out as whole lines only, each `write` holding one or more of them, so a killed batch
leaves whole lines only; `--resume` first trims any partial last line, then skips the inputs
whose path is already in the file. Into a file or a pipe, records that come quickly are written
together (`RecordWriter.flush`): a write per record made a 2-core batch of small images 5 %
slower (the write hands the interpreter lock to the decoding threads and waits to get it back).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import signal
import sys
import threading
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, TextIO

from edgeapp.errors import UsageError

if TYPE_CHECKING:
    from edgeapp.tasks.base import TaskKind


class Format(str, Enum):
    table = "table"
    jsonl = "jsonl"
    csv = "csv"


TableFormatter = Callable[[dict], str]
EXTENSIONS = {".csv": Format.csv, ".jsonl": Format.jsonl, ".ndjson": Format.jsonl,
              ".json": Format.jsonl}


def format_for_path(path: Path) -> Optional[Format]:
    """The results format a file name asks for by its extension, if any."""
    return EXTENSIONS.get(Path(path).suffix.lower())

BATCH_FIELDS = ("path",), ("device", "model", "latency_ms", "error")  # around the task's columns
FRAME_FIELDS = ("frame", "timestamp", "source_ms"), ("device", "latency_ms", "frame_ms")
TRACK_ID = "track_id"  # each tracked item's id (flows/camera/tracking.py), a row's column


class Layout:
    """How one task's records read as CSV rows and table lines (batches, or camera frames)."""

    def __init__(self, kind: TaskKind, frames: bool = False, tracked: bool = False,
                 sourced: bool = False) -> None:
        """`tracked`: camera --track, whose objects carry a `track_id` column (after `rank`);
        `sourced`: camera frames of named sources, each record's `source` first."""
        self.kind, self.frames, self.sourced = kind, frames, sourced
        before, after = FRAME_FIELDS if frames else BATCH_FIELDS
        if sourced:
            before = ("source",) + tuple(before)
        self._base = before + after
        own = [c for c in kind.columns if c not in self._base]
        if tracked:
            own.insert(own.index("rank") + 1 if "rank" in own else 0, TRACK_ID)
        self.columns = list(before) + own + list(after)

    def rows(self, record: dict) -> list[dict]:
        base = {k: record.get(k) for k in self._base}
        return [{**base, **row} for row in self.kind.rows(record)] or [base]

    def table_line(self, record: dict) -> str:
        if self.frames:
            where = f"{record['source']}  " if self.sourced else ""
            return (where + f"frame {record['frame']}  {self.kind.summary_text(record)}  "
                    f"({record['latency_ms']:.1f} ms)")
        if record["error"]:
            return f"{record['path']}  ERROR: {record['error']}"
        return f"{record['path']}  {self.kind.summary_text(record)}"

    def writer(self, fmt: "Format", output: Optional[Path] = None, resume: bool = False,
               check_models: Optional[Callable[[set], None]] = None,
               overwrite: bool = True) -> "RecordWriter":
        return RecordWriter(fmt, self.columns, self.rows, self.table_line, output, resume,
                            check_models=check_models, chunks=not self.frames, overwrite=overwrite)


def check_output(fmt: "Format", output: Optional[Path], resume: bool, overwrite: bool = True) -> None:
    """What a results file's options mean together, checked before any model is opened.

    `overwrite` False: a results file that already holds something is refused unless resumed
    (forgetting --resume after a Ctrl-C would throw away hours of results)."""
    if resume and output is None:
        raise UsageError("--resume needs --output FILE (the file to resume)")
    if resume and Format(fmt) == Format.table:
        raise UsageError("--resume needs --format jsonl or csv (the table format cannot be resumed)")
    if output is None or resume or overwrite:
        return
    try:
        holds = output.is_file() and output.stat().st_size > 0
    except OSError:
        holds = False  # said when it is opened
    if holds:
        raise UsageError(f"{output} already holds results: add --resume to go on where they "
                         "stopped, or --overwrite to replace them")


# Records written together, at most: this many, or this many bytes, or the ones that came within
# this many seconds (records coming slower are written one by one, at once).
CHUNK_RECORDS, CHUNK_BYTES, CHUNK_SECONDS = 32, 1 << 16, 0.5


class RecordWriter:
    """Writes records to stdout or a file; `columns` is the CSV layout (one row per item).

    Into a file or a pipe, records coming quickly are written in chunks of whole lines (see
    CHUNK_RECORDS); a terminal gets each line at once. `written` counts the records written
    out; `flush()` (Ctrl-C's message, closing) writes the rest first. A run killed outright
    may leave its last chunk unwritten: `--resume` redoes those inputs.
    """

    def __init__(self, fmt: Format, columns: list[str], rows: Callable[[dict], list[dict]],
                 table: TableFormatter, output: Optional[Path] = None, resume: bool = False,
                 stream: Optional[TextIO] = None,
                 check_models: Optional[Callable[[set[str]], None]] = None, chunks: bool = True,
                 overwrite: bool = True) -> None:
        """`check_models(models)`, with --resume, gets the `model` fields already in the file
        before anything in it changes, and raises to refuse appending. `chunks` False: every
        record is written at once (the camera's frames, a live stream). `overwrite` False: an
        existing results file is refused unless resumed (see `check_output`)."""
        self.fmt, self.columns, self.rows, self.table = fmt, columns, rows, table
        self.output = output
        self.done: set[str] = set()
        self.written = 0  # records written by this run
        self._fd: Optional[int] = None
        self._stream = stream or sys.stdout
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._flushed_at = time.monotonic()
        check_output(fmt, output, resume, overwrite)
        if output is not None:
            if resume and output.exists():
                self.done = prepare_resume(output, fmt, columns, check_models)
            make_parent_folder(output)
            flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if resume else os.O_TRUNC)
            try:
                self._fd = os.open(output, flags, 0o644)
            except OSError as e:
                raise UsageError(f"cannot write {output}: {e.strerror}") from None
            if resume:
                os.lseek(self._fd, 0, os.SEEK_END)
        needs_header = fmt == Format.csv and (self._fd is None or os.fstat(self._fd).st_size == 0)
        if needs_header:
            self._emit(_csv_line(columns))
        self._chunked = chunks and (self._fd is not None or not _is_terminal(self._stream))

    def is_done(self, path: str) -> bool:
        return path in self.done or os.path.abspath(path) in self.done

    def write(self, record: dict) -> None:
        if self.fmt == Format.jsonl:
            try:
                data: str | bytes = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
            except UnicodeEncodeError:  # a non-UTF-8 file name: \udcXX escapes keep it valid JSON
                data = (json.dumps(record) + "\n").encode("ascii")
        elif self.fmt == Format.csv:
            data = "".join(_csv_line([_cell(r.get(c), c) for c in self.columns])
                           for r in self.rows(record))
        else:
            data = self.table(record) + "\n"
        if not self._chunked:
            with _ctrl_c_held():  # written and counted together: Ctrl-C's message says what is there
                self._emit(data)
                self.written += 1
            return
        data = _bytes(data)
        self._pending.append(data)
        self._pending_bytes += len(data)
        if len(self._pending) >= CHUNK_RECORDS or self._pending_bytes >= CHUNK_BYTES or \
                time.monotonic() - self._flushed_at >= CHUNK_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write the records not written yet, in one write; when that write does not fit (a full
        disk, a file size limit), as many of them as fit, whole, one by one."""
        if self._pending:
            with _ctrl_c_held():  # written and counted together: Ctrl-C's message says what is there
                try:
                    self._emit(b"".join(self._pending))
                    self.written += len(self._pending)
                except UsageError:
                    for data in self._pending:  # raises again at the first one that does not fit
                        self._emit(data)
                        self.written += 1
                finally:
                    self._pending.clear()
                    self._pending_bytes = 0
        self._flushed_at = time.monotonic()

    @property
    def kept(self) -> int:
        """Images already in the file when --resume opened it."""
        return len({os.path.abspath(p) for p in self.done})

    def _emit(self, text: str | bytes) -> None:
        """One write of whole lines (whole lines only, even if killed); file names that are not
        UTF-8 go out as the bytes they are on disk."""
        data = _bytes(text)
        try:
            if self._fd is not None:
                write_whole(self._fd, data)
            elif hasattr(self._stream, "buffer"):
                self._stream.flush()
                self._stream.buffer.write(data)
                self._stream.buffer.flush()
            else:
                self._stream.write(data.decode("utf-8", "replace"))
                self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            where = self.output or "stdout"
            raise UsageError(f"cannot write results to {where}: {e.strerror or e}; the results "
                             "written so far are kept") from None

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, kind, *exc) -> None:
        if kind is None:
            self.close()
            return
        try:  # what was produced before the error is kept; the error itself goes on
            self.close()
        except (OSError, UsageError):
            pass


def _bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def write_whole(fd: int, data: bytes) -> None:
    """Append `data` whole or not at all: a write that fails part-way (disk full, file size
    limit) is cut back to where it started, so the file never ends inside a record."""
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        try:
            os.ftruncate(fd, start)
            os.lseek(fd, start, os.SEEK_SET)
        except OSError:
            pass  # not a regular file (/dev/full): nothing was kept anyway
        raise


def append_line(path: Path, line: str) -> None:
    """Append one whole line to `path` (its folder made), or nothing: a write cut short (full
    disk) is truncated away, so the file stays one JSON document per line (bench --output, read
    by scripts/bench_report.py)."""
    make_parent_folder(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # novermin: int flags, not a union type
    try:
        write_whole(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def make_parent_folder(output: Path) -> None:
    """`-o results/today.csv` into a folder not made yet; a file where a folder should be
    (`-o photo.png/out.jsonl`) is said as such, not as mkdir's "File exists"."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        check_parent_folder(output)
        raise UsageError(f"cannot create the folder of {output}: {e.strerror or e}") from None


def check_parent_folder(output: Path) -> None:
    """Fail now where `make_parent_folder` would fail later (a file where a folder should be,
    a folder edgeapp may not write in), without creating anything: for files written after
    a long run (`bench --plot`)."""
    output = Path(output)
    blocker = next((a for a in reversed(output.parents) if a.exists() and not a.is_dir()), None)
    if blocker is not None:
        raise UsageError(f"cannot write {output}: {blocker} is a file, not a folder")
    existing = next((a for a in output.parents if a.exists()), None)
    if existing is not None and output.parent != existing and not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"cannot create the folder of {output}: {existing} is not writable")


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Ctrl-C waits until the block is done (it is raised right after), so no record is written
    without being counted. Where signals cannot be held (Windows, a worker thread): as is."""
    hold = getattr(signal, "pthread_sigmask", None)
    if hold is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = hold(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        hold(signal.SIG_SETMASK, previous)


# CSV float formats by column: a Unix timestamp needs its 10 integer digits and milliseconds
# (`.6g` printed 1.79542e+09), times in ms are kept to the microsecond; scores keep 6 digits.
CSV_FLOAT_FORMATS = {"timestamp": ".3f", "source_ms": ".3f", "latency_ms": ".3f", "frame_ms": ".3f"}


def _cell(value: object, column: str = "") -> Any:
    if isinstance(value, float):
        return format(value, CSV_FLOAT_FORMATS.get(column, ".6g"))
    return "" if value is None else value


def _csv_line(values: list) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(values)
    return buf.getvalue()


def trim_partial_line(path: Path) -> None:
    """Drop an unterminated last line (a write cut short by a kill)."""
    with open(path, "rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        pos = size - 1
        chunk = 65536
        while pos > 0:
            start = max(0, pos - chunk)
            f.seek(start)
            block = f.read(pos - start)
            nl = block.rfind(b"\n")
            if nl >= 0:
                f.truncate(start + nl + 1)
                return
            pos = start
        f.truncate(0)


# A write to a regular file that a kill cuts short stops at a page boundary of the file (the
# kernel copies page by page and checks for a fatal signal between pages; a failing write is
# cut back by write_whole). Pages are 4 KiB or a multiple of it.
TORN_WRITE_BOUNDARY = 4096


def prepare_resume(path: Path, fmt: Format, columns: list[str],
                   check_models: Optional[Callable[[set[str]], None]] = None) -> set[str]:
    """Make a results file safe to append to, and return the paths it already holds.

    JSONL: a cut-off last line is dropped. CSV: an image spans several rows written in one
    write; a kill in the middle of that write leaves a cut row, dropped with the rest of that
    image's rows, or, only when the file ends exactly on a page boundary
    (TORN_WRITE_BOUNDARY), whole rows that may be only some of the image's: its rows are then
    dropped too and the image redone. Otherwise the last image is complete and counted.
    A file that is not our own results file of this format is refused, never appended to.
    `check_models` sees the `model` fields of the file's records before it is changed.
    """
    check = check_models or (lambda models: None)
    if fmt == Format.jsonl:
        trim_partial_line(path)  # a cut-off record is no result, whichever model wrote it
        models: set[str] = set()
        done = _jsonl_paths(path, models)
        check(models)
    else:
        done = _csv_resume(path, columns, check)
    return done | {os.path.abspath(p) for p in done}


def _jsonl_paths(path: Path, models: set[str]) -> set[str]:
    done: set[str] = set()
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8", "surrogateescape"))
                p = record.get("path")
            except (ValueError, AttributeError):
                p = None
            else:
                if isinstance(record.get("model"), str):
                    models.add(record["model"])
            if not isinstance(p, str):
                raise UsageError(f"--resume: {path} is not an edgeapp JSONL results file (line {n}); "
                                 "choose another --output")
            done.add(p)
    return done


def _csv_resume(path: Path, columns: list[str], check_models: Callable[[set[str]], None]) -> set[str]:
    raw = path.read_bytes()
    if not raw:
        return set()
    ends: list[int] = []  # byte offset after each physical line handed to the csv reader
    lines = raw.splitlines(keepends=True)

    def feed():
        offset = 0
        for line in lines:
            offset += len(line)
            ends.append(offset)
            yield line.decode("utf-8", "surrogateescape")

    rows: list[tuple[list[str], int]] = []
    for row in csv.reader(feed()):
        rows.append((row, ends[-1]))
    if not rows or rows[0][0] != columns:
        raise UsageError(f"--resume: {path} is not an edgeapp CSV results file with columns "
                         f"{','.join(columns)}; choose another --output")
    body = rows[1:]
    if "model" in columns:
        at = columns.index("model")
        check_models({row[at] for row, _ in body if len(row) > at and row[at]})
    torn = not raw.endswith(b"\n") or len(raw) % TORN_WRITE_BOUNDARY == 0
    while body and (len(body[-1][0]) != len(columns) or not raw.endswith(b"\n")
                    and body[-1][1] == len(raw)):
        body.pop()  # a row cut short by a kill
    if torn and body:  # the last image may have only some of its rows: drop them all, redo it
        last = body[-1][0][0]
        while body and body[-1][0][0] == last:
            body.pop()
    cut = body[-1][1] if body else rows[0][1]
    with open(path, "rb+") as f:
        f.truncate(cut)
    return {row[0] for row, _ in body}
