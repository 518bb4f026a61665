"""Limits shared across threads and event loops: a slot :class:`Limiter` and a :class:`TokenBucket`."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable

from rewardkit.runtime.deadlines import queue_clock


class Limiter:
    """At most ``n`` holders at a time across every thread and event loop of this process.

    Time spent waiting for a slot is kept off the deadline of
    :func:`~rewardkit.runtime.deadlines.wait_for_unqueued`.
    """

    def __init__(self, n: int):
        self.n = max(1, int(n))
        self._lock = threading.Lock()
        self._busy = 0
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = (
            collections.deque()
        )

    @property
    def busy(self) -> int:
        """Slots in use now."""
        return self._busy

    async def acquire(self) -> None:
        """Wait for a slot (first come, first served); time spent queued is excluded from the sample's deadline."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._busy < self.n and not self._waiters:
                self._busy += 1
                return
            fut = loop.create_future()
            self._waiters.append((loop, fut))
        clock = queue_clock()
        if clock is not None:
            clock.enter()
        try:
            await fut
        except asyncio.CancelledError:
            with self._lock:
                if (loop, fut) in self._waiters:
                    self._waiters.remove((loop, fut))
                    raise
            # We were granted a slot while being cancelled: hand it on.
            self.release()
            raise
        finally:
            if clock is not None:
                clock.leave()

    def release(self) -> None:
        """Give a slot back, handing it straight to the longest waiter if any."""
        with self._lock:
            while self._waiters:
                loop, fut = self._waiters.popleft()
                if loop.is_closed():
                    continue
                loop.call_soon_threadsafe(_grant, fut)
                return  # the slot passes to the waiter; _busy is unchanged
            self._busy -= 1

    @contextlib.asynccontextmanager
    async def hold(self):
        """``async with limiter.hold():`` holds one slot for the block."""
        await self.acquire()
        try:
            yield
        finally:
            self.release()


def _grant(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class TokenBucket:
    """A token bucket: ``rate_per_s`` tokens refill evenly up to ``burst``; thread-safe.

    Two ways to spend: :meth:`try_take` takes ``n`` tokens only when they are there (else says how
    long until they are); :meth:`reserve` takes them now, letting the level go negative, and says how
    long to wait, so that waiting callers are served in order. :meth:`refund` gives tokens back
    (or, negative, takes more) once a reservation's real cost is known.
    """

    def __init__(self, rate_per_s: float, burst: float, clock: Callable[[], float] = time.monotonic):
        if rate_per_s <= 0:
            raise ValueError("rate_per_s must be > 0")
        self.rate = float(rate_per_s)
        self.capacity = float(burst)
        self.level = self.capacity
        self.clock = clock
        self.updated = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self.clock()
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now

    def try_take(self, n: float) -> float:
        """Take ``n`` tokens if the bucket holds them (return 0.0), else return the seconds until it does."""
        with self._lock:
            self._refill()
            if self.level >= n:
                self.level -= n
                return 0.0
            return (n - self.level) / self.rate

    def reserve(self, cost: float) -> float:
        """Take ``cost`` tokens now (the level may go negative); return the seconds to wait before using them."""
        with self._lock:
            self._refill()
            self.level -= cost
            return 0.0 if self.level >= 0 else -self.level / self.rate

    def refund(self, amount: float) -> None:
        """Give back (or, negative, take more of) a reservation once the real cost is known."""
        with self._lock:
            self.level = min(self.capacity, self.level + amount)
