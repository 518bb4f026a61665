"""Per-sample deadlines that do not count time spent queued for a slot of a :class:`~rewardkit.runtime.limits.Limiter`."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from typing import Any


class _QueueClock:
    """Time a scorer call has spent queued for a :class:`Limiter` slot (overlapping waits count once)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.waiting = 0
        self.since = 0.0

    def enter(self) -> None:
        if self.waiting == 0:
            self.since = time.monotonic()
        self.waiting += 1

    def leave(self) -> None:
        self.waiting -= 1
        if self.waiting == 0:
            self.total += time.monotonic() - self.since

    def queued(self) -> float:
        return self.total + (time.monotonic() - self.since if self.waiting else 0.0)


_queue_clock: contextvars.ContextVar[_QueueClock | None] = contextvars.ContextVar(
    "rewardkit_queue_clock", default=None
)


def queue_clock() -> _QueueClock | None:
    """The queue clock of the :func:`wait_for_unqueued` call this code runs under, if any."""
    return _queue_clock.get()


async def wait_for_unqueued(make: Callable[[], Awaitable[Any]], timeout: float | None) -> Any:
    """Await ``make()`` under a deadline of ``timeout`` seconds that does not count the time it spends
    queued for a sandbox slot (:class:`Limiter`); raise :class:`asyncio.TimeoutError` past it.

    Executors use it for per-sample deadlines: with many code samples in flight, a sample waiting
    its turn for one of the few sandboxes has not hung, and must not fail with ``timeout``.
    """
    if timeout is None:
        return await make()
    clock = _QueueClock()
    token = _queue_clock.set(clock)
    try:
        task = asyncio.ensure_future(make())  # runs in a copy of this context: it sees the clock
    finally:
        _queue_clock.reset(token)
    start = time.monotonic()
    try:
        while True:
            left = start + timeout + clock.queued() - time.monotonic()
            if left <= 0 and not clock.waiting:
                break
            await asyncio.wait({task}, timeout=max(left, 0.05))
            if task.done():
                return task.result()
    except BaseException:
        task.cancel()
        raise
    task.cancel()
    # A scorer that swallows the cancellation is left behind rather than waited for.
    await asyncio.wait({task}, timeout=_CANCEL_GRACE_S)
    raise asyncio.TimeoutError if task.done() else LeftRunning


_CANCEL_GRACE_S = 1.0


class LeftRunning(asyncio.TimeoutError):
    """The deadline passed and the scorer ignored its cancellation: it is still running."""
