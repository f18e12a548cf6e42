"""What Python 3.7 lacks, in one place: the Coral Dev Board (Mendel Linux) runs Python 3.7.

tests/test_min_python.py keeps the rest of the package 3.7-clean; the `# novermin` lines are
the newer Python's own versions, taken only where they exist.
"""

import operator
import sys
from functools import reduce
from typing import Iterable

if sys.version_info >= (3, 8):
    from functools import cached_property  # novermin
else:  # pragma: no cover - Python 3.7
    class cached_property:  # noqa: N801 - functools' name
        """functools.cached_property: computed once, then kept in the instance's __dict__."""

        def __init__(self, func):
            self.func = func
            self.attrname = None
            self.__doc__ = func.__doc__

        def __set_name__(self, owner, name):
            self.attrname = name

        def __get__(self, instance, owner=None):
            if instance is None:
                return self
            value = instance.__dict__[self.attrname] = self.func(instance)
            return value


def __getattr__(name: str):  # PEP 562: `metadata` imported by whoever asks for it
    """`metadata`: importlib.metadata (the backport on 3.7). Imported on first use: it brings
    the email parser, which the commands that never read a distribution's metadata don't need."""
    if name != "metadata":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if sys.version_info >= (3, 8):
        from importlib import metadata  # novermin
    else:  # pragma: no cover - Python 3.7
        import importlib_metadata as metadata  # the backport (a dependency on Python < 3.8)
    globals()["metadata"] = metadata
    return metadata


def prod(values: Iterable[int]) -> int:
    """math.prod (3.8) for integers: 1 for no values."""
    return reduce(operator.mul, values, 1)


__all__ = ["cached_property", "metadata", "prod"]  # noqa: F822 - metadata: from __getattr__
