"""Adaptive concurrency: how many requests one server gets at once, found from its answers (AIMD).

:class:`ConcurrencyController` keeps a limit on the requests in flight to one server:

* a **congestion signal** cuts the limit to ``DECREASE`` times itself. Answers are counted in
  *waves*: a wave is ``limit`` answers to requests sent after the last cut (those sent before it
  say nothing about the new limit, as in TCP). A wave in which at least ``CONGESTED_SHARE`` of
  the answers were 429 or 503 is a congestion signal: the server is shedding load. A short burst
  of 429s among many successes is not: its requests wait out their ``Retry-After`` and are sent
  again, and cutting the limit for it would idle a healthy server (as in DCTCP, the reaction
  follows the share of congestion marks, not their mere presence);
* a **lost request** (one attempt timed out, or stalled past the stall threshold) changes nothing:
  a hung request says nothing about load, and halving on it would let a few stalls starve the
  server;
* each **success** grows the limit: while it is below the limit it had before the last cut, by
  ``REGAIN / limit`` (a round of successes regains ``REGAIN`` of the distance, so a burst of 429s
  costs a few round trips, not hundreds); above it, additively by ``1 / limit`` (one per round),
  up to ``maximum``. A cut while still recovering remembers ``MEMORY`` of the previous pre-cut
  limit, so the target decays towards what an overloaded server really takes;
* the limit never drops below ``floor`` (default ``FLOOR_FRACTION`` of ``maximum``), which keeps
  the server busy while it sheds load with 429s.

A request that stalls is :meth:`Slot.detach`-ed from the count after its stall threshold, so
stalled requests (which may take a whole request timeout to fail) do not hold slots that healthy
requests could use. :class:`AdaptiveLimit` is one controller with a first-come-first-served
queue, as an async context manager.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque

#: Multiplicative decrease on a congestion signal.
DECREASE = 0.5
#: Share of 429/503 answers in one wave that makes it a congestion signal.
CONGESTED_SHARE = 0.3
#: Default floor of the limit as a share of its maximum.
FLOOR_FRACTION = 0.25
#: Share of the distance to the limit before the last cut that one round of successes regains.
REGAIN = 0.5
#: A cut during recovery remembers this share of the previous pre-cut limit (if that is higher).
MEMORY = 0.9


class ConcurrencyController:
    """The limit and count of requests in flight to one server; use from one event loop."""

    def __init__(self, maximum: int, adaptive: bool = True, floor: int | None = None):
        self.maximum = maximum
        self.adaptive = adaptive
        self.floor = max(1, min(maximum, floor if floor is not None else math.ceil(maximum * FLOOR_FRACTION)))
        self.limit = float(maximum)
        self.in_use = 0
        self.lowest = float(maximum)
        self.lost = 0
        self.congested_count = 0
        self.before_cut = float(maximum)
        self._last_cut = -math.inf
        self._wave = 0  # answers in the current wave
        self._marked = 0  # of which 429/503

    def free(self) -> int:
        """Slots free now."""
        return max(1, int(self.limit)) - self.in_use

    def load(self) -> float:
        """In flight as a share of the limit (for least-loaded routing)."""
        return self.in_use / max(1.0, self.limit)

    def congested(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` (``time.monotonic()``) got a 429 or 503."""
        self.congested_count += 1
        self._count(sent_at, marked=True)

    def succeeded(self, sent_at: float | None = None) -> None:
        """A request (sent at ``sent_at``; default: now) got an answer."""
        if self.adaptive and self.limit < self.maximum and not self._marked:  # no growth in a marked wave
            step = max(1.0, REGAIN * (self.before_cut - self.limit))
            self.limit = min(float(self.maximum), self.limit + step / self.limit)
        self._count(time.monotonic() if sent_at is None else sent_at, marked=False)

    def _count(self, sent_at: float, marked: bool) -> None:
        if not self.adaptive or sent_at <= self._last_cut:
            return
        self._wave += 1
        self._marked += marked
        if self._wave < max(1, int(self.limit)):
            return
        if self._marked >= CONGESTED_SHARE * self._wave:
            self.before_cut = max(self.limit, MEMORY * self.before_cut)
            self.limit = max(float(self.floor), self.limit * DECREASE)
            self.lowest = min(self.lowest, self.limit)
            self._last_cut = time.monotonic()
        self._wave = self._marked = 0

    def lost_one(self) -> None:
        """A request timed out or stalled: counted, the limit unchanged."""
        self.lost += 1

    def take_lowest(self) -> float:
        """The lowest limit since the last call; then start over from the current one."""
        low, self.lowest = self.lowest, self.limit
        return low


class Slot:
    """One request's place in a controller; :meth:`release` is idempotent."""

    def __init__(self, ctl: ConcurrencyController, on_free=None):
        self.ctl = ctl
        self.sent_at = time.monotonic()
        self.held = True
        self.detached = False
        self._on_free = on_free

    def release(self) -> None:
        """Give the slot back (once)."""
        if self.held:
            self.held = False
            self.ctl.in_use -= 1
            if self._on_free is not None:
                self._on_free()

    def detach(self) -> None:
        """The request stalled: stop counting it against the limit (a lost request, no congestion)."""
        if self.held:
            self.detached = True
            self.ctl.lost_one()
            self.release()


class AdaptiveLimit(ConcurrencyController):
    """A :class:`ConcurrencyController` with a first-come-first-served queue: ``async with limit:``.

    ``overloaded`` and ``succeeded`` report outcomes; with ``adaptive=False`` it is a plain
    semaphore of ``maximum``. Cancelled waiters are skipped without leaking slots.
    """

    def __init__(self, maximum: int, adaptive: bool = True, floor: int | None = None):
        super().__init__(maximum, adaptive, floor)
        self._waiters: deque[asyncio.Future] = deque()

    def _wake(self) -> None:
        while self._waiters and self.free() > 0:
            fut = self._waiters.popleft()
            if not fut.done():
                self.in_use += 1
                fut.set_result(None)

    async def __aenter__(self) -> float:
        if self.free() > 0 and not self._waiters:
            self.in_use += 1
        else:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():  # a slot was handed over just before: give it back
                    self.in_use -= 1
                    self._wake()
                raise
        return time.monotonic()

    async def __aexit__(self, *exc: object) -> None:
        self.in_use -= 1
        self._wake()

    def overloaded(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` got a 429 (or 503)."""
        self.congested(sent_at)

    def succeeded(self, sent_at: float | None = None) -> None:
        """A request got a 2xx answer."""
        super().succeeded(sent_at)
        self._wake()
