"""How sizes are shown to people: one formatter for every table and message."""

from typing import Optional

_BINARY = (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024))


def format_bytes(n: Optional[int], unit: Optional[str] = None) -> str:
    """`7.06 MiB`, `512 B`; `unit` forces one (e.g. "MiB" to compare against a MiB limit)."""
    if n is None:
        return "?"
    for name, size in _BINARY:
        if name == unit or (unit is None and n >= size):
            return f"{n / size:.2f} {name}"
    return f"{n} B"


def counted(n: int, noun: str) -> str:
    """`1 thread`, `4 threads`: a count with its noun in the number it takes (regular plurals)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
