"""Routing requests over judge replicas: least-loaded, sticky by prompt prefix, around down replicas.

Each replica has a :class:`~rewardkit.runtime.breaker.CircuitBreaker` (shared by every event loop
using the backend) and, per event loop, a
:class:`~rewardkit.runtime.concurrency.ConcurrencyController`. A :class:`Router` hands out
:class:`Lease` s first come, first served:

* among the replicas whose circuit is closed and that have a free slot, the one the request's
  *key* (its prompt prefix) hashes to (rendezvous hashing, so a server's prefix cache helps),
  unless it is busier than the least-loaded one by more than ``STICKY_SLACK``; then the
  least-loaded. ``avoid`` (the replica a retry failed on) is skipped when another is free;
* a down replica's probe, when due, is the next request (so a replica that comes back is taken
  in again while the others serve); when every replica is down, the others wait, and fail with
  ``circuit_open`` only once every replica's breaker says so for them.
"""

from __future__ import annotations

import asyncio
import math
import zlib
from collections import deque
from dataclasses import dataclass, field

from rewardkit.runtime.breaker import CircuitBreaker
from rewardkit.runtime.concurrency import ConcurrencyController, Slot

#: How much busier (share of its limit) the sticky replica may be than the least-loaded one.
STICKY_SLACK = 0.25
#: How often waiters re-check while every replica is down and another loop holds the probe.
POLL_S = 0.05


@dataclass
class Replica:
    """One server: its root URL and breaker."""

    index: int
    url: str
    breaker: CircuitBreaker


@dataclass
class Lease:
    """A slot on one replica for one attempt; ``probe`` says it is that replica's half-open probe."""

    replica: Replica
    slot: Slot
    probe: bool = False


class CircuitOpen(Exception):
    """Every replica is down for this request (the message says why)."""


@dataclass
class _Waiter:
    fut: asyncio.Future
    key: str
    avoid: int | None
    tickets: list[int] = field(default_factory=list)


def _affinity(key: str, url: str) -> int:
    return zlib.crc32(f"{url}\x00{key}".encode())


class Router:
    """Leases on a set of replicas for one event loop (see the module docstring)."""

    def __init__(
        self, replicas: list[Replica], maximum: int, adaptive: bool = True, floor: int | None = None
    ):
        self.replicas = replicas
        self.ctls = [ConcurrencyController(maximum, adaptive, floor) for _ in replicas]
        self._waiters: deque[_Waiter] = deque()
        self._timer: asyncio.TimerHandle | None = None

    # -- choosing ----------------------------------------------------------------------------------
    def _pick(self, free: list[int], key: str, avoid: int | None) -> int:
        if avoid is not None and len(free) > 1 and avoid in free:
            free = [i for i in free if i != avoid]
        if len(free) == 1:
            return free[0]
        loads = {i: self.ctls[i].load() for i in free}
        least = min(free, key=lambda i: loads[i])
        if not key:
            return least
        sticky = max(free, key=lambda i: _affinity(key, self.replicas[i].url))
        return sticky if loads[sticky] <= loads[least] + STICKY_SLACK else least

    def _choose(self, w: _Waiter) -> Lease | str | None:
        """A lease, a failure message, or ``None`` (wait)."""
        closed = [i for i, r in enumerate(self.replicas) if r.breaker.available()]
        if closed and len(closed) < len(self.replicas):  # a down replica's probe, if due, goes first
            for i, r in enumerate(self.replicas):
                if (
                    i not in closed
                    and r.breaker.next_change_in() == 0
                    and r.breaker.gate(w.tickets[i]) == "allow"
                ):
                    return self._lease(i, probe=True)
        free = [i for i in closed if self.ctls[i].free() > 0]
        if free:
            return self._lease(self._pick(free, w.key, w.avoid), probe=False)
        if closed:
            return None
        order = sorted(range(len(self.replicas)), key=lambda i: i == w.avoid)
        for i in order:
            verdict = self.replicas[i].breaker.gate(w.tickets[i])
            if verdict == "allow":
                return self._lease(i, probe=not self.replicas[i].breaker.available())
        if all(r.breaker.would_fail(w.tickets[i]) for i, r in enumerate(self.replicas)):
            return "; ".join(
                (f"{r.url}: " if len(self.replicas) > 1 else "") + r.breaker.message() for r in self.replicas
            )
        return None

    def _lease(self, i: int, probe: bool) -> Lease:
        ctl = self.ctls[i]
        ctl.in_use += 1
        return Lease(self.replicas[i], Slot(ctl, self.dispatch), probe)

    # -- waiting -----------------------------------------------------------------------------------
    def dispatch(self) -> None:
        """Serve waiters in order while replicas can take them; fail those no replica will take."""
        while self._waiters:
            w = self._waiters[0]
            if w.fut.done():
                self._waiters.popleft()
                continue
            choice = self._choose(w)
            if choice is None:
                self._arm_timer()
                return
            self._waiters.popleft()
            if isinstance(choice, str):
                w.fut.set_exception(CircuitOpen(choice))
            else:
                w.fut.set_result(choice)

    def _arm_timer(self) -> None:
        if any(r.breaker.available() for r in self.replicas):
            return  # a slot freeing up wakes the queue
        due = min(r.breaker.next_change_in() for r in self.replicas)
        delay = POLL_S if math.isinf(due) else max(0.001, due)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self.dispatch()

    def tickets(self) -> list[int]:
        """A request's arrival marks on every replica's breaker (take them once, at its first attempt)."""
        return [r.breaker.ticket() for r in self.replicas]

    async def acquire(
        self, key: str, avoid: int | None, timeout: float | None, tickets: list[int] | None = None
    ) -> Lease:
        """A lease for one attempt; raises :class:`CircuitOpen` or ``TimeoutError`` (after ``timeout``).

        ``tickets`` (from :meth:`tickets` at the request's first attempt) make a retry fail once a
        probe sent after the request first arrived has failed; default: now.
        """
        w = _Waiter(asyncio.get_running_loop().create_future(), key, avoid, tickets or self.tickets())
        if not self._waiters:
            choice = self._choose(w)
            if isinstance(choice, Lease):
                return choice
            if isinstance(choice, str):
                raise CircuitOpen(choice)
        self._waiters.append(w)
        self.dispatch()
        try:
            if timeout is None:
                return await w.fut
            return await asyncio.wait_for(asyncio.shield(w.fut), timeout)
        except (asyncio.CancelledError, TimeoutError):
            if w.fut.done() and not w.fut.cancelled() and w.fut.exception() is None:
                lease = w.fut.result()  # handed over just before: give it back
                lease.slot.release()
                if lease.probe:
                    lease.replica.breaker.abandon()
            else:
                w.fut.cancel()
            raise

    def lowest_limit(self) -> float:
        """The lowest in-flight limit any replica had since the last call."""
        return min(c.take_lowest() for c in self.ctls)
