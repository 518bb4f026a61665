"""One concurrency and rate budget for judge / remote-RM traffic, shared by every worker that uses it.

:class:`JudgeLimiter` holds the budget; :mod:`rewardkit.ray.limiter` runs it as a small named Ray
actor. Each worker registers the handle with :func:`set_limiter`; code that sends a judge request
wraps it in :func:`judge_slot`::

    async with judge_slot():          # or `with judge_slot():` from sync code
        await session.post(url, json=payload)

With no limiter set, :func:`judge_slot` does nothing and costs nothing, so a backend can call it
unconditionally. A slot is a *lease*: a worker that dies holding slots does not leak them (a
restarted worker frees its previous incarnation's leases; stale leases expire). Nothing here
imports Ray unless a limiter is set and used from sync code.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

from rewardkit.runtime.limits import TokenBucket


class JudgeLimiter:
    """Global budget: at most ``max_concurrency`` leases out at once and, when ``rate_per_s`` is set,
    at most ``rate_per_s`` acquisitions per second (token bucket holding up to ``burst`` tokens).

    Runs as an async Ray actor; also usable in-process (every method is a plain method/coroutine).
    """

    def __init__(
        self,
        max_concurrency: int,
        rate_per_s: float | None = None,
        burst: float | None = None,
        lease_timeout_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if rate_per_s is not None and rate_per_s <= 0:
            raise ValueError("rate_per_s must be > 0")
        self.max_concurrency = max_concurrency
        self.rate_per_s = rate_per_s
        self.burst = float(burst if burst is not None else max(1.0, rate_per_s or 1.0))
        self.lease_timeout_s = lease_timeout_s
        self._clock = clock
        self._bucket = None if rate_per_s is None else TokenBucket(rate_per_s, self.burst, clock)
        self._leases: dict[int, tuple[str, float]] = {}
        self._ids = itertools.count(1)
        self._cond: asyncio.Condition | None = None
        self._bucket_lock: asyncio.Lock | None = None
        self._stats = {"acquired": 0, "max_in_use": 0, "expired": 0, "waiting": 0}

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
            self._bucket_lock = asyncio.Lock()
        return self._cond

    def _expire(self) -> None:
        now = self._clock()
        stale = [k for k, (_, t) in self._leases.items() if now - t > self.lease_timeout_s]
        for k in stale:
            del self._leases[k]
        self._stats["expired"] += len(stale)

    async def acquire(self, holder: str = "") -> int:
        """Wait for a free slot (and a rate token); returns a lease id to pass to :meth:`release`."""
        cond = self._condition()
        async with cond:
            self._stats["waiting"] += 1
            try:
                while True:
                    self._expire()
                    if len(self._leases) < self.max_concurrency:
                        break
                    try:
                        await asyncio.wait_for(cond.wait(), timeout=1.0)
                    except asyncio.TimeoutError:
                        pass
            finally:
                self._stats["waiting"] -= 1
            lease = next(self._ids)
            self._leases[lease] = (holder, self._clock())
            self._stats["acquired"] += 1
            self._stats["max_in_use"] = max(self._stats["max_in_use"], len(self._leases))
        if self.rate_per_s is not None:
            try:
                await self.take(1)
            except BaseException:
                await self.release(lease)
                raise
        return lease

    async def release(self, lease: int) -> None:
        """Give a slot back (unknown or expired leases are ignored)."""
        cond = self._condition()
        async with cond:
            if self._leases.pop(lease, None) is not None:
                cond.notify()

    async def release_holder(self, holder: str) -> int:
        """Free every lease ``holder`` holds (a restarted worker frees its dead predecessor's); returns how many."""
        cond = self._condition()
        async with cond:
            mine = [k for k, (h, _) in self._leases.items() if h == holder]
            for k in mine:
                del self._leases[k]
            cond.notify(len(mine))
            return len(mine)

    async def take(self, n: float = 1.0) -> None:
        """Token bucket: wait until ``n`` tokens are available at ``rate_per_s`` and consume them
        (no-op without a rate). Callers are served first come, first served."""
        if self.rate_per_s is None:
            return
        if n > self.burst:
            raise ValueError(f"take({n}) asks for more than the bucket holds ({self.burst})")
        self._condition()
        assert self._bucket_lock is not None
        assert self._bucket is not None
        async with self._bucket_lock:
            while True:
                wait = self._bucket.try_take(n)
                if wait == 0.0:
                    return
                await asyncio.sleep(wait)

    def stats(self) -> dict[str, Any]:
        """In use now, most ever in use, leases granted, expired and callers waiting."""
        return {**self._stats, "in_use": len(self._leases), "max_concurrency": self.max_concurrency}

    def ping(self) -> bool:
        """Liveness probe."""
        return True


_current: tuple[Any, str] | None = None


def set_limiter(handle: Any, holder: str = "") -> None:
    """Make ``handle`` (a :class:`JudgeLimiter` actor handle, or ``None``) this process's judge budget."""
    global _current
    _current = None if handle is None else (handle, holder)


def get_limiter() -> Any:
    """The limiter actor handle set in this process, or ``None`` (e.g. for ``handle.take.remote(n)``)."""
    return None if _current is None else _current[0]


class judge_slot:  # noqa: N801 - used like a function: `async with judge_slot():`
    """Hold one slot of the shared judge budget for the duration of a request.

    A no-op when no limiter is set. Works as ``async with`` (awaits the actor without blocking
    the loop) and as ``with`` (blocks the calling thread).
    """

    def __init__(self) -> None:
        self._current = _current
        self._lease: int | None = None

    async def __aenter__(self) -> judge_slot:
        if self._current is not None:
            handle, holder = self._current
            ref = handle.acquire.remote(holder)
            try:
                self._lease = await ref
            except asyncio.CancelledError:
                # The limiter grants the lease anyway once a slot frees up; give it back then, or the
                # budget shrinks by one slot until the lease expires (a batch deadline cancels waiters).
                _release_when_granted(handle, ref)
                raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._lease is not None and self._current is not None:  # a lease implies a budget
            handle, _ = self._current
            lease, self._lease = self._lease, None
            await handle.release.remote(lease)

    def __enter__(self) -> judge_slot:
        if self._current is not None:
            import ray

            handle, holder = self._current
            self._lease = ray.get(handle.acquire.remote(holder))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lease is not None and self._current is not None:  # a lease implies a budget
            import ray

            handle, _ = self._current
            lease, self._lease = self._lease, None
            ray.get(handle.release.remote(lease))


def _release_when_granted(handle: Any, ref: Any) -> None:
    """Release the lease ``ref`` (a pending ``acquire``) resolves to, whenever it does."""

    def release(fut: Any) -> None:
        try:
            lease = fut.result()
        except BaseException:  # noqa: BLE001 - the limiter is gone or the call failed: nothing held
            return
        try:
            handle.release.remote(lease)
        except Exception:  # noqa: BLE001 - Ray shutting down: the lease expires on its own
            pass

    ref.future().add_done_callback(release)
