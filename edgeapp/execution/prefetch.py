"""Overlap input preparation (decode, resize) with inference.

Pillow releases the GIL while decoding and resizing, so a few threads prepare the next inputs
while the one interpreter runs on the current one. Results come back in input order.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable, Iterator, TypeVar, Union

from edgeapp.errors import InputError

T = TypeVar("T")
R = TypeVar("R")


def prefetch(items: Iterable[T], prepare: Callable[[T], R], workers: int = 2,
             depth: int = 0) -> Iterator[tuple[T, Union[R, InputError]]]:
    """Yield (item, prepare(item)) in order, preparing up to `depth` items ahead.

    An InputError from `prepare` is yielded in place of the result, so one bad input never
    stops the batch. With workers=0 everything runs in the caller's thread.
    """
    if workers <= 0:
        for item in items:
            yield item, _call(prepare, item)
        return
    from concurrent.futures import ThreadPoolExecutor  # not for a run without threads

    depth = depth or 2 * workers
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edgeapp-prep")
    pending: deque = deque()
    it = iter(items)
    try:
        for item in it:
            pending.append((item, pool.submit(_call, prepare, item)))
            if len(pending) >= depth:
                break
        while pending:
            item, future = pending.popleft()
            nxt = next(it, _END)
            if nxt is not _END:
                pending.append((nxt, pool.submit(_call, prepare, nxt)))
            yield item, future.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


_END = object()


def _call(prepare: Callable[[T], R], item: T) -> Union[R, InputError]:
    try:
        return prepare(item)
    except InputError as e:
        return e
