"""The kernel's log since boot, for doctor's reset history: /dev/kmsg (the ring buffer, read
without blocking), else /var/log/kern.log's last boot. Read under the one sysroot (tests give
a fake tree); None when neither can be read (dmesg_restrict without root, a container)."""

from __future__ import annotations

import os
from typing import List, Optional

from edgeapp.hw.sysroot import Root, is_real, under


def kernel_lines(root: Root = None) -> Optional[List[str]]:
    """The kernel's messages since boot, oldest first, without their kmsg prefixes."""
    got = _kmsg(root)
    if got is not None:
        return got
    try:
        text = under(root, "/var/log/kern.log").read_text(errors="replace")
    except OSError:
        return None
    from edgeapp.core.edgetpu.resets import since_boot

    return since_boot(text.splitlines())


def _kmsg(root: Root) -> Optional[List[str]]:
    """/dev/kmsg's records ("prio,seq,time,flags;message"): each one a read; at its end a real
    one says EAGAIN (opened non-blocking), a fake tree's file ends."""
    path = under(root, "/dev/kmsg")
    flags = os.O_RDONLY | (os.O_NONBLOCK if is_real(root) else 0)
    try:
        fd = os.open(str(path), flags)
    except OSError:
        return None
    lines: List[str] = []
    try:
        if not is_real(root):
            with os.fdopen(os.dup(fd), "r", errors="replace") as f:
                records = f.read().splitlines()
        else:
            records = []
            while True:
                try:
                    chunk = os.read(fd, 8192)
                except BlockingIOError:
                    break
                except OSError:  # EPIPE: overwritten records; go on with the next
                    continue
                if not chunk:
                    break
                records.append(chunk.decode("utf-8", "replace").rstrip("\n"))
    finally:
        os.close(fd)
    for record in records:
        head, sep, message = record.partition(";")
        if sep and head.count(",") >= 2:
            lines.append(message.split("\n")[0])
        elif record and not record.startswith(" "):  # continuation lines start with a space
            lines.append(record)
    return lines
