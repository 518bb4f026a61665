"""The async HTTP client core shared by the ``generative`` judge and the ``remote`` RM backends.

One :class:`HTTPCore` per backend sends JSON requests to one or more replicas of a server
(``base_url`` may be a list). Per replica: a :class:`~rewardkit.runtime.breaker.CircuitBreaker`
that opens only when the server is really down, and an adaptive in-flight limit
(:mod:`rewardkit.runtime.concurrency`); routing is least-loaded and sticky by prompt prefix
(:mod:`~rewardkit.backends.replicas`). :meth:`HTTPCore.post_json` retries what can help
(connection errors, timeouts, 408, 429, 5xx, a 2xx whose body is not JSON) with full-jitter
backoff, honouring ``Retry-After``, on another replica when there is one, bounded by the batch
deadline and ``max_retries``; it raises :class:`RequestFailed` with a failure reason from
:data:`rewardkit.result.FAILURE_REASONS` when it gives up. Optional requests- and tokens-per-minute
budgets; :class:`BackendMetrics`; :func:`gather_with_deadline` runs a batch under one deadline.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rewardkit.backends.base import RMBackend
from rewardkit.backends.http_metrics import BackendMetrics, LatencyWindow, percentile
from rewardkit.backends.http_reply import (
    TIMED_OUT,
    Reply,
    RequestFailed,
    gather_with_deadline,
    parse_retry_after,
    server_message,
)
from rewardkit.backends.http_session import LoopSessions, LoopState
from rewardkit.backends.http_settings import HTTPSettings, parse_settings
from rewardkit.backends.replicas import CircuitOpen, Lease, Replica, Router
from rewardkit.runtime.breaker import CircuitBreaker
from rewardkit.runtime.budget import judge_slot
from rewardkit.runtime.concurrency import AdaptiveLimit

if TYPE_CHECKING:
    from rewardkit.config import RewardModelConfig

__all__ = [
    "TIMED_OUT",
    "AdaptiveLimit",
    "BackendMetrics",
    "CircuitBreaker",
    "HTTPBackend",
    "HTTPCore",
    "HTTPSettings",
    "RateLimiter",
    "Reply",
    "RequestFailed",
    "gather_with_deadline",
    "parse_retry_after",
    "parse_settings",
    "percentile",
]

RETRYABLE_STATUS = frozenset({408, 429})
#: An attempt counts as stalled after this many times the recent p90 latency...
STALL_FACTOR = 4.0
#: ...but never before this many seconds.
STALL_MIN_S = 1.0


class RateLimiter:
    """A reservation token bucket: ``per_minute`` units refill evenly, one second's worth of burst.

    :meth:`reserve` takes ``cost`` units now (the level may go negative) and returns how long the
    caller must wait, so waiting callers are served in order and a large request is never starved.
    """

    def __init__(self, per_minute: float, clock=time.monotonic):
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate)
        self.level = self.capacity
        self.clock = clock
        self.updated = clock()
        self._lock = threading.Lock()

    def reserve(self, cost: float) -> float:
        """Take ``cost`` units; return the seconds to wait before using them."""
        with self._lock:
            now = self.clock()
            self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
            self.updated = now
            self.level -= cost
            return 0.0 if self.level >= 0 else -self.level / self.rate

    def refund(self, amount: float) -> None:
        """Give back (or, negative, take more of) a reservation once the real cost is known."""
        with self._lock:
            self.level = min(self.capacity, self.level + amount)


@dataclass
class _Outcome:
    """What one attempt ran into: ``kind`` is ``ok``, ``garbage``, ``timeout``, ``connection``,
    ``429``, ``5xx`` or the status code."""

    kind: str = "ok"
    refused: bool = False  # the connection could not be made
    status: int = 0
    data: Any = None
    error: str = ""
    retry_after: float | None = None

    @property
    def retryable(self) -> bool:
        return (
            self.kind in ("garbage", "timeout", "connection")
            or self.status in RETRYABLE_STATUS
            or (self.status >= 500)
        )


class _Tries:
    """The bookkeeping of one request across its attempts."""

    def __init__(self, deadline: float | None):
        self.deadline = deadline
        self.attempts = 0
        self.first_sent: float | None = None
        self.last: _Outcome | None = None
        self.replica = ""
        self.tickets: list[int] | None = None  # breaker arrival marks, from the first attempt
        self.probes_failed = 0

    def remaining(self) -> float:
        return math.inf if self.deadline is None else self.deadline - time.monotonic()

    def latency(self) -> float:
        return 0.0 if self.first_sent is None else time.monotonic() - self.first_sent

    def fail(self, reason: str, message: str) -> RequestFailed:
        kind = self.last.kind if self.last is not None else reason
        return RequestFailed(reason, message, max(0, self.attempts - 1), self.latency(), self.replica, kind)

    def timed_out(self) -> RequestFailed:
        tail = f"; last error: {self.last.error}" if self.last is not None and self.last.error else ""
        return self.fail("timeout", f"batch deadline passed after {self.attempts} attempts{tail}")


class HTTPCore:
    """Sends JSON requests for one backend to its replicas.

    The breakers, rate budgets, latency window and metrics are shared by every event loop using the
    core; each loop has its own session and :class:`~rewardkit.backends.replicas.Router`
    (:class:`~rewardkit.backends.http_session.LoopSessions`).
    """

    def __init__(self, settings: HTTPSettings, metrics: BackendMetrics | None = None):
        s = self.settings = settings
        self.metrics = metrics or BackendMetrics()
        self.replicas = [
            Replica(i, url, CircuitBreaker(s.breaker_threshold, s.breaker_cooldown_s, s.breaker_window_s))
            for i, url in enumerate(s.urls())
        ]
        self.breaker = self.replicas[0].breaker  # the only one with a single base_url
        self.rpm = RateLimiter(s.rpm) if s.rpm else None
        self.tpm = RateLimiter(s.tpm) if s.tpm else None
        self.latency = LatencyWindow()
        headers = {"Content-Type": "application/json", **s.headers}
        key = s.resolved_api_key()
        if key:
            headers.setdefault("Authorization", f"Bearer {key}")
        self.sessions = LoopSessions(headers, self._make_router)

    def _make_router(self) -> Router:
        s = self.settings
        cap = min(s.max_concurrency, s.max_connections)
        floor = None if s.min_concurrency is None else min(cap, s.min_concurrency)
        return Router(self.replicas, cap, s.adaptive_concurrency, floor)

    @property
    def sessions_created(self) -> int:
        """How many sessions this core has opened (one per event loop that used it)."""
        return self.sessions.sessions_created

    async def aclose(self) -> None:
        """Close every session (the running loop's here, others on their loops)."""
        await self.sessions.aclose()

    def close(self) -> None:
        """Close every session from synchronous code."""
        self.sessions.close()

    # -- one request ------------------------------------------------------------------------------
    async def post_json(
        self,
        path: str,
        payload: Any,
        *,
        cost_tokens: float = 0.0,
        deadline: float | None = None,
        key: str = "",
    ) -> Reply:
        """POST ``payload`` to ``path`` on a replica and return the decoded JSON reply.

        ``path`` is appended to the replica's root (a full URL is taken as is, one replica only).
        ``deadline`` is an absolute ``time.monotonic()`` time no attempt or wait may pass.
        ``cost_tokens`` is reserved from the ``tpm`` budget (correct it with :meth:`settle_tokens`).
        ``key`` (the prompt prefix) makes routing sticky. Raises :class:`RequestFailed` (reason
        ``http``, ``timeout`` or ``circuit_open``).
        """
        st = await self.sessions.get()
        body = json.dumps(payload, ensure_ascii=False).encode()
        tries = _Tries(deadline)
        avoid: int | None = None
        max_retries = self.settings.max_retries
        while True:
            await self._wait_for_budget(cost_tokens, tries)
            lease = await self._lease(st.extra, key, avoid, tries)
            out = await self._attempt_or_hedge(st, lease, key, path, body, tries)
            if out.kind == "ok":
                return Reply(out.data, tries.attempts - 1, tries.latency(), out.status, tries.replica)
            if not out.retryable:
                raise tries.fail("http", out.error)
            if lease.probe:
                tries.probes_failed += (
                    1  # the breaker's question, not this request's: bounded by the deadline
                )
            if max_retries is not None and tries.attempts - tries.probes_failed > max_retries:
                reason = "timeout" if out.kind == "timeout" else "http"
                raise tries.fail(reason, f"gave up after {tries.attempts} attempts; last: {out.error}")
            avoid = lease.replica.index if len(self.replicas) > 1 else None
            await self._back_off(st.extra, out, tries)

    async def _wait_for_budget(self, cost_tokens: float, tries: _Tries) -> None:
        wait = 0.0
        if self.rpm is not None:
            wait = max(wait, self.rpm.reserve(1))
        if self.tpm is not None and cost_tokens:
            wait = max(wait, self.tpm.reserve(cost_tokens))
        await self._sleep(wait, tries)

    async def _sleep(self, delay: float, tries: _Tries) -> None:
        if tries.remaining() <= 0 or delay >= tries.remaining():
            await asyncio.sleep(max(0.0, tries.remaining()))
            raise tries.timed_out()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _lease(self, router: Router, key: str, avoid: int | None, tries: _Tries) -> Lease:
        left = tries.remaining()
        if tries.tickets is None:
            tries.tickets = router.tickets()
        try:
            return await router.acquire(
                key, avoid, None if math.isinf(left) else max(0.0, left), tries.tickets
            )
        except CircuitOpen as e:
            self.metrics.error("circuit_open")
            raise tries.fail("circuit_open", str(e)) from None
        except (TimeoutError, asyncio.TimeoutError):
            raise tries.timed_out() from None

    async def _attempt_or_hedge(
        self, st: LoopState, lease: Lease, key: str, path: str, body: bytes, tries: _Tries
    ) -> _Outcome:
        """One attempt; if it stalls past the stall threshold, a second one (on another replica when
        there is one) races it, and the first answer wins. A stall then costs one stall threshold,
        not a whole request timeout."""
        first = asyncio.ensure_future(self._attempt(st, lease, path, body, tries))
        stall = self._stall_after()
        if (
            not self.settings.hedge
            or lease.probe
            or stall >= min(self.settings.request_timeout_s, tries.remaining())
        ):
            return await first
        tasks = {first}
        try:
            await self._first_or_stall(first, stall)
            if first.done():
                return first.result()
            self.metrics.add(hedged=1)
            avoid = lease.replica.index if len(self.replicas) > 1 else None
            try:
                hedge = await self._lease(st.extra, key, avoid, tries)
            except RequestFailed:
                return await first
            second = asyncio.ensure_future(self._attempt(st, hedge, path, body, tries))
            tasks.add(second)
            while True:
                done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                outs = {t: t.result() for t in done}
                answer = next((o for o in outs.values() if o.kind == "ok"), None)
                if answer is not None:
                    return answer
                if second in outs:  # a failed hedge goes to a retry, not back to the stalled attempt
                    return outs[second]
                if not tasks:
                    return outs[first]
        finally:
            for t in tasks:
                t.cancel()

    @staticmethod
    async def _first_or_stall(first: asyncio.Future, stall: float) -> None:
        """Wait until ``first`` is done or ``stall`` seconds pass (lighter than ``asyncio.wait``)."""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()

        def wake(_: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        first.add_done_callback(wake)
        timer = loop.call_later(stall, wake)
        try:
            await waiter
        finally:
            timer.cancel()
            first.remove_done_callback(wake)

    async def _attempt(self, st: LoopState, lease: Lease, path: str, body: bytes, tries: _Tries) -> _Outcome:
        timeout = min(self.settings.request_timeout_s, tries.remaining())
        try:
            if timeout <= 0:
                raise tries.timed_out()
            tries.attempts += 1
            tries.replica = lease.replica.url
            if tries.first_sent is None:
                tries.first_sent = time.monotonic()
            self.metrics.add(requests=1, retries=1 if tries.attempts > 1 else 0)
            out = await self._send(st, lease, path, body, timeout)
        except BaseException:
            lease.slot.release()
            if lease.probe:
                lease.replica.breaker.abandon()
            raise
        tries.last = out
        if out.kind == "ok":
            tries.replica = lease.replica.url  # the one that answered (of a hedged pair)
        self._report(st.extra, lease, out)
        lease.slot.release()
        return out

    async def _send(self, st: LoopState, lease: Lease, path: str, body: bytes, timeout: float) -> _Outcome:
        import aiohttp

        url = path if path.startswith(("http://", "https://")) else lease.replica.url + path
        stall = asyncio.get_running_loop().call_later(self._stall_after(), self._stalled, lease)
        out = _Outcome()
        sent = time.monotonic()
        try:
            async with (
                judge_slot(),  # the Ray-wide budget, a no-op outside a Ray worker
                st.session.post(url, data=body, timeout=aiohttp.ClientTimeout(total=timeout)) as resp,
            ):
                out.status = resp.status
                text = await resp.text(errors="replace")
                out.retry_after = parse_retry_after(resp.headers.get("Retry-After"))
        except (asyncio.TimeoutError, TimeoutError):
            out.kind, out.error = "timeout", f"no answer within {timeout:.3g}s"
            return out
        except aiohttp.ClientError as e:
            out.kind, out.error = "connection", f"{type(e).__name__}: {e}"
            out.refused = isinstance(e, aiohttp.ClientConnectorError)
            return out
        finally:
            stall.cancel()
        if 200 <= out.status < 300:
            try:
                out.data = json.loads(text)
                self.latency.add(time.monotonic() - sent)
            except ValueError:
                out.kind = "garbage"
                out.error = f"HTTP {out.status} with a body that is not JSON: {text[:200]!r}"
            return out
        out.kind = "429" if out.status == 429 else ("5xx" if out.status >= 500 else str(out.status))
        out.error = f"HTTP {out.status}: {server_message(text)}"
        return out

    def _stall_after(self) -> float:
        s = self.settings
        if s.stall_after_s is not None:
            return min(s.stall_after_s, s.request_timeout_s)
        p90 = self.latency.p90
        if p90 is None:
            return s.request_timeout_s
        return min(s.request_timeout_s, max(STALL_MIN_S, STALL_FACTOR * p90))

    def _stalled(self, lease: Lease) -> None:
        if lease.slot.held:
            self.metrics.add(stalled=1)
            lease.slot.detach()

    def _report(self, router: Router, lease: Lease, out: _Outcome) -> None:
        """Tell the replica's breaker and concurrency controller what the attempt ran into."""
        ctl, breaker = lease.slot.ctl, lease.replica.breaker
        if out.kind != "ok":
            self.metrics.error(out.kind)
        if out.kind in ("ok", "garbage") or (400 <= out.status < 500 and out.status != 408):
            breaker.success()  # the server is alive (a 429 included)
            if out.status == 429:
                ctl.congested(lease.slot.sent_at)
            else:
                ctl.succeeded(lease.slot.sent_at)
        else:
            breaker.failure(out.error, probe=lease.probe, refused=out.refused)
            if out.status == 503:
                ctl.congested(lease.slot.sent_at)
            elif out.kind == "timeout" and not lease.slot.detached:
                ctl.lost_one()
        # (releasing the slot, right after this, serves the waiters)

    async def _back_off(self, router: Router, out: _Outcome, tries: _Tries) -> None:
        s = self.settings
        delay = random.uniform(0.0, min(s.backoff_cap_s, s.backoff_base_s * (2 ** (tries.attempts - 1))))
        elsewhere = len(self.replicas) > 1 and any(r.breaker.available() for r in self.replicas)
        if out.retry_after is not None and not elsewhere:  # Retry-After speaks for that one server
            delay = max(delay, min(out.retry_after, s.retry_after_cap_s))
        await self._sleep(delay, tries)

    def lowest_in_flight_limit(self) -> float:
        """The lowest adaptive in-flight limit reached since the last call (``max_concurrency`` if never cut)."""
        lows = [st.extra.lowest_limit() for st in self.sessions.states()]
        cap = min(self.settings.max_concurrency, self.settings.max_connections)
        return min(lows, default=float(cap))

    def settle_tokens(self, reserved: float, used: float) -> None:
        """Correct a ``tpm`` reservation once the reply's ``usage`` says what the request really cost."""
        if self.tpm is not None and reserved:
            self.tpm.refund(reserved - used)


class HTTPBackend(RMBackend):
    """Base of the RM backends that speak HTTP: one :class:`HTTPCore`, its metrics, and closing both."""

    #: ``rollout.base_url`` may be a list of replicas: :class:`HTTPCore` routes over them.
    accepts_url_list: ClassVar[bool] = True

    def __init__(self, config: RewardModelConfig, settings: HTTPSettings):
        super().__init__(config)
        self.metrics_ = BackendMetrics()
        self.http = HTTPCore(settings, self.metrics_)

    def close(self) -> None:
        """Close the HTTP session (idempotent)."""
        self.http.close()
        super().close()

    async def aclose(self) -> None:
        """Close from the event loop that owns the session."""
        await self.http.aclose()
        self.close()

    def metrics(self) -> dict[str, float]:
        """Requests, retries, errors and failures by kind, tokens, p50/p99 latency, cache hits, dedup saves."""
        m = self.metrics_.collect()
        m["in_flight_limit/min"] = self.http.lowest_in_flight_limit()
        return m
