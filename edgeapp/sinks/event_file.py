"""`camera --track --events FILE`: one JSON line per event, as well-behaved as a results file.

Its folder is made; a path that cannot be opened is a usage error when the run starts (before
the model loads); each line goes out in one write, whole or not at all (sinks/records.write_whole),
so a reader following the file never sees half a line; a write that fails (a full disk) is one
line naming the file, and the run stops as it does for records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List

from edgeapp.errors import UsageError
from edgeapp.sinks.records import make_parent_folder, write_whole


class EventFile:
    """Events as JSON lines into `path` (replaced when the run starts)."""

    def __init__(self, path: Path, name: str = "--events") -> None:
        self.path, self.name = Path(path), name
        self.written = 0
        make_parent_folder(self.path)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)  # novermin: int flags
        except OSError as e:
            raise UsageError(f"{name} {self.path}: cannot write it: {e.strerror or e}") from None

    def write(self, events: List[dict]) -> None:
        """Each event its own line, each line one write."""
        for event in events:
            data = (json.dumps(event) + "\n").encode("utf-8")
            try:
                write_whole(self._fd, data)
            except OSError as e:
                raise UsageError(f"{self.name} {self.path}: cannot write events: {e.strerror or e}; "
                                 "the events written so far are kept") from None
            self.written += 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
