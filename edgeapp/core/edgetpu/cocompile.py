"""Several models on one Edge TPU: how their parameters share the chip's cache.

One Edge TPU caches the parameters of the models compiled together in one `edgetpu_compiler`
call (they share a caching token, core/edgetpu/package.py); a model compiled apart evicts the
others' parameters, which are loaded again on the next switch. The compiler gives the cache to
the models in the order they were given: each takes what it needs of what is left, and what
does not fit is streamed from the host on every inference (Coral: "Run multiple models with a
single Edge TPU"). So the model run most often goes first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from edgeapp.core.edgetpu.specs import USABLE_CACHE_BYTES


@dataclass(frozen=True)
class CacheShare:
    """One model's part of the cache: cached on the chip, or streamed every inference."""

    on_chip_bytes: int
    off_chip_bytes: int


def share_cache(parameter_bytes: Sequence[int], capacity: int = USABLE_CACHE_BYTES) -> list[CacheShare]:
    """Each model's on-chip and off-chip parameter bytes when compiled together, in this order."""
    left = max(0, capacity)
    out = []
    for n in parameter_bytes:
        cached = min(max(0, n), left)
        left -= cached
        out.append(CacheShare(cached, max(0, n) - cached))
    return out


def compiled_together(tokens: Sequence[Sequence[int]]) -> bool:
    """Whether compiled models (their caching tokens, one list per model) were compiled in one
    call, so their parameters stay cached together; a model that caches nothing shares nothing."""
    firsts = [t[0] if t else None for t in tokens]
    return len(firsts) > 1 and None not in firsts and len(set(firsts)) == 1
