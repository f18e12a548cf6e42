"""Result records streamed as table, JSON lines or CSV, crash-safe and resumable.

Each record is written with one `write` on an append-mode file and flushed, so a killed batch
leaves whole lines only; `--resume` first trims any partial last line, then skips the inputs
whose path is already in the file.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional, TextIO

from .errors import UsageError


class Format(str, Enum):
    table = "table"
    jsonl = "jsonl"
    csv = "csv"


TableFormatter = Callable[[dict], str]


class RecordWriter:
    """Writes records to stdout or a file; `columns` is the CSV layout (one row per item)."""

    def __init__(self, fmt: Format, columns: list[str], rows: Callable[[dict], list[dict]],
                 table: TableFormatter, output: Optional[Path] = None, resume: bool = False,
                 stream: Optional[TextIO] = None) -> None:
        self.fmt, self.columns, self.rows, self.table = fmt, columns, rows, table
        self.output = output
        self.done: set[str] = set()
        self._fd: Optional[int] = None
        self._stream = stream or sys.stdout
        if resume and output is None:
            raise UsageError("--resume needs --output FILE (the file to resume)")
        if resume and fmt == Format.table:
            raise UsageError("--resume needs --format jsonl or csv")
        if output is not None:
            if resume and output.exists():
                trim_partial_line(output)
                self.done = completed_paths(output, fmt)
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

    def is_done(self, path: str) -> bool:
        return path in self.done or os.path.abspath(path) in self.done

    def write(self, record: dict) -> None:
        if self.fmt == Format.jsonl:
            text = json.dumps(record, ensure_ascii=False) + "\n"
        elif self.fmt == Format.csv:
            text = "".join(_csv_line([_cell(r.get(c)) for c in self.columns]) for r in self.rows(record))
        else:
            text = self.table(record) + "\n"
        self._emit(text)

    def _emit(self, text: str) -> None:
        if self._fd is not None:
            data = text.encode("utf-8")
            while data:  # one write for a line in practice; loop for the pathological case
                n = os.write(self._fd, data)
                data = data[n:]
        else:
            self._stream.write(text)
            self._stream.flush()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"
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


def completed_paths(path: Path, fmt: Format) -> set[str]:
    """Paths (as written and absolute) already present in a results file."""
    done: set[str] = set()
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        if fmt == Format.jsonl:
            for line in f:
                try:
                    p = json.loads(line).get("path")
                except (ValueError, AttributeError):
                    continue
                if isinstance(p, str):
                    done.add(p)
        else:
            for row in csv.DictReader(f):
                if row.get("path"):
                    done.add(row["path"])
    return done | {os.path.abspath(p) for p in done}
