"""The async HTTP client core shared by the ``generative`` judge and the ``remote`` RM backends.

One :class:`HTTPCore` per backend holds, per event loop, an ``aiohttp`` session with a connection
cap and an adaptive limit on the requests in flight (halved on 429); optional requests- and tokens-per-minute
budgets; a :class:`CircuitBreaker`; and :class:`BackendMetrics`. :meth:`HTTPCore.post_json` sends
one JSON request with retries where they can help (connection errors, timeouts, 408, 429, 5xx;
exponential backoff with full jitter, honouring ``Retry-After``) and raises :class:`RequestFailed`
with a failure reason from :data:`rewardkit.result.FAILURE_REASONS` when it gives up.
:func:`gather_with_deadline` runs a batch of such calls under one overall deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import math
import os
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rewardkit.backends.base import RMBackend
from rewardkit.errors import ConfigError
from rewardkit.runtime.budget import judge_slot

if TYPE_CHECKING:
    from rewardkit.config import RewardModelConfig

RETRYABLE_STATUS = frozenset({408, 429})


class HTTPSettings(BaseModel):
    """Client settings common to the HTTP backends (``reward_model.rollout``)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="server root, e.g. http://127.0.0.1:8000")
    api_key: str | None = Field(None, description="bearer token sent as Authorization header")
    api_key_env: str | None = Field(None, description="name of an environment variable holding the key")
    headers: dict[str, str] = Field(default_factory=dict, description="extra request headers")
    max_connections: int = Field(64, ge=1, description="TCP connection cap (aiohttp TCPConnector limit)")
    max_in_flight: int = Field(64, ge=1, description="requests in flight at once")
    rpm: float | None = Field(None, gt=0, description="requests-per-minute budget")
    tpm: float | None = Field(None, gt=0, description="tokens-per-minute budget (estimated, then corrected)")
    request_timeout_s: float = Field(60.0, gt=0, description="timeout of one HTTP attempt")
    deadline_s: float | None = Field(None, gt=0, description="deadline for the whole batch")
    max_retries: int = Field(4, ge=0, description="retries per request after the first attempt")
    backoff_base_s: float = Field(0.5, ge=0, description="first backoff ceiling; doubles per retry")
    backoff_cap_s: float = Field(30.0, ge=0, description="largest backoff ceiling")
    retry_after_cap_s: float = Field(60.0, ge=0, description="longest Retry-After honoured")
    breaker_threshold: int = Field(5, ge=1, description="consecutive failures that open the circuit")
    breaker_cooldown_s: float = Field(10.0, ge=0, description="how long the circuit stays open")
    adaptive_concurrency: bool = Field(
        True, description="halve the in-flight limit on 429, grow it back by one per round of successes"
    )

    @model_validator(mode="after")
    def _check(self):
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if self.api_key_env is not None and not os.environ.get(self.api_key_env):
            raise ValueError(
                f"api_key_env names {self.api_key_env!r} but that environment variable is not set"
            )
        return self

    def resolved_api_key(self) -> str | None:
        """The API key, from ``api_key`` or the variable ``api_key_env`` names."""
        if self.api_key:
            return self.api_key
        if self.api_key_env:
            return os.environ.get(self.api_key_env)
        return None


def parse_settings(cls: type[BaseModel], data: dict[str, Any], backend: str) -> Any:
    """Validate ``reward_model.rollout`` into ``cls``; raise :class:`ConfigError` with one line per problem."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        lines = [f"invalid reward_model.rollout for backend {backend!r}:"]
        known = ", ".join(sorted(cls.model_fields))
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
            if err["type"] == "extra_forbidden":
                import difflib

                close = difflib.get_close_matches(str(err["loc"][-1]), list(cls.model_fields), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                lines.append(f"  rollout.{loc}: unknown key.{hint} Known keys: {known}.")
            else:
                lines.append(f"  rollout.{loc}: {err['msg']} (got {err.get('input')!r:.60})")
        raise ConfigError("\n".join(lines)) from None


class RequestFailed(Exception):
    """A request that failed for good: ``reason`` is a failure reason, ``retries`` how many were spent."""

    def __init__(self, reason: str, message: str, retries: int = 0, latency_s: float = 0.0):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retries = retries
        self.latency_s = latency_s


@dataclass
class Reply:
    """A successful JSON reply, with the retries it took and the latency from first send to answer
    (retries and backoff included, waiting for a free slot before the first send not)."""

    data: Any
    retries: int
    latency_s: float
    status: int = 200


# ------------------------------------------------------------------------------------------------
# Circuit breaker, rate limiter, metrics
# ------------------------------------------------------------------------------------------------


class CircuitBreaker:
    """Consecutive failures open the circuit for ``cooldown_s``; then one probe decides (half-open).

    :meth:`gate` answers ``"allow"`` (send; in half-open state this request is the probe),
    ``"open"`` (fail now) or ``"wait"`` (a probe is in flight: ask again shortly).
    """

    def __init__(self, threshold: int, cooldown_s: float, clock=time.monotonic):
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.state = "closed"
        self.failures = 0
        self.opened_at = 0.0
        self.times_opened = 0
        self.last_error = ""
        self._probe = False
        self._lock = threading.Lock()

    def gate(self) -> str:
        """May a request go now? ``"allow"``, ``"open"`` or ``"wait"``."""
        with self._lock:
            if self.state == "closed":
                return "allow"
            if self.state == "open":
                if self.clock() - self.opened_at < self.cooldown_s:
                    return "open"
                self.state = "half_open"
                self._probe = False
            if self._probe:
                return "wait"
            self._probe = True
            return "allow"

    def success(self) -> None:
        """The server answered (any status that shows it is alive)."""
        with self._lock:
            self.failures = 0
            self.state = "closed"
            self._probe = False

    def failure(self, error: str) -> None:
        """A connection error, timeout or 5xx."""
        with self._lock:
            self.failures += 1
            self.last_error = error
            if self.state == "half_open" or (self.state == "closed" and self.failures >= self.threshold):
                self.state = "open"
                self.opened_at = self.clock()
                self.times_opened += 1
            self._probe = False

    def abandon(self) -> None:
        """A request ended without telling us anything (cancelled): let another probe go."""
        with self._lock:
            self._probe = False

    def message(self) -> str:
        """Why requests are refused, with the last error and the time left."""
        left = max(0.0, self.cooldown_s - (self.clock() - self.opened_at))
        return (
            f"circuit open: the server failed {self.failures} times in a row "
            f"(last error: {self.last_error}); not sending for another {left:.1f}s"
        )


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


class AdaptiveLimit:
    """An async limit on requests in flight that backs off when the server says it is overloaded.

    AIMD, as TCP congestion control: a 429 halves the limit (once per wave: requests sent before
    the last cut do not cut again); each success adds ``1 / limit``, so a full round of successes
    adds one, up to ``maximum``. With ``adaptive=False`` it is a plain semaphore of ``maximum``.
    Waiters are served first come, first served. Use from one event loop.
    """

    def __init__(self, maximum: int, adaptive: bool = True):
        self.maximum = maximum
        self.adaptive = adaptive
        self.limit = float(maximum)
        self.in_use = 0
        self.lowest = float(maximum)
        self._last_cut = -math.inf
        self._waiters: deque[asyncio.Future] = deque()

    def _free(self) -> int:
        return max(1, int(self.limit)) - self.in_use

    def _wake(self) -> None:
        while self._waiters and self._free() > 0:
            fut = self._waiters.popleft()
            if not fut.done():  # skip waiters that were cancelled
                self.in_use += 1
                fut.set_result(None)

    async def __aenter__(self) -> float:
        if self._free() > 0 and not self._waiters:
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
        """A request sent at ``sent_at`` got a 429."""
        if self.adaptive and sent_at > self._last_cut:
            self.limit = max(1.0, self.limit / 2)
            self.lowest = min(self.lowest, self.limit)
            self._last_cut = time.monotonic()

    def succeeded(self) -> None:
        """A request got a 2xx answer."""
        if self.adaptive and self.limit < self.maximum:
            self.limit = min(float(self.maximum), self.limit + 1 / self.limit)
            self._wake()


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[k]


class BackendMetrics:
    """Counters accumulated across batches until :meth:`collect` returns and resets them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Zero every counter."""
        self.requests = 0
        self.retries = 0
        self.errors: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.latencies: list[float] = []
        self.samples = 0
        self.cache_hits = 0
        self.cache_errors = 0
        self.dedup_saved = 0
        self.truncated = 0
        self.judge_cut_off = 0

    def add(self, **counts: float) -> None:
        """Add to counters by name (``requests=1``, ``cache_hits=3``...)."""
        with self._lock:
            for k, v in counts.items():
                setattr(self, k, getattr(self, k) + v)

    def error(self, kind: str) -> None:
        """Count one failed attempt of ``kind`` (``timeout``, ``connection``, ``429``, ``5xx``...)."""
        with self._lock:
            self.errors[kind] += 1

    def sample(self, reason: str | None, latency_s: float | None) -> None:
        """Count one finished sample: its failure reason (``None`` if ok) and latency."""
        with self._lock:
            self.samples += 1
            if reason is not None:
                self.failures[reason] += 1
            if latency_s is not None:
                self.latencies.append(latency_s)

    def collect(self) -> dict[str, float]:
        """The metrics since the last call, then reset."""
        with self._lock:
            m: dict[str, float] = {
                "samples": float(self.samples),
                "requests": float(self.requests),
                "retries": float(self.retries),
                "tokens/prompt": float(self.prompt_tokens),
                "tokens/completion": float(self.completion_tokens),
                "cache/hits": float(self.cache_hits),
                "cache/errors": float(self.cache_errors),
                "dedup/saved": float(self.dedup_saved),
                "truncated": float(self.truncated),
            }
            if self.judge_cut_off:
                m["judge_cut_off"] = float(self.judge_cut_off)
            for kind, n in sorted(self.errors.items()):
                m[f"errors/{kind}"] = float(n)
            for reason, n in sorted(self.failures.items()):
                m[f"failed/{reason}"] = float(n)
            if self.latencies:
                m["latency/p50_s"] = percentile(self.latencies, 50)
                m["latency/p99_s"] = percentile(self.latencies, 99)
            self.reset()
            return m


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date; ``None`` if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def _server_message(status: int, text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:300]
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return str(err)[:300]
    return text.strip()[:300]


# ------------------------------------------------------------------------------------------------
# The client core
# ------------------------------------------------------------------------------------------------


@dataclass
class _LoopState:
    loop: asyncio.AbstractEventLoop
    session: Any  # aiohttp.ClientSession
    limit: AdaptiveLimit


class HTTPCore:
    """Sends JSON requests for one backend.

    Each event loop that uses it gets its own session, connection pool and in-flight limit,
    created lazily on first use in that loop (the engine's loop thread for ``compute``, the caller's
    loop for ``acompute``); sessions of loops that have since closed are disposed of. The breaker,
    rate budgets and metrics are shared by all loops.
    """

    def __init__(self, settings: HTTPSettings, metrics: BackendMetrics | None = None):
        self.settings = settings
        self.metrics = metrics or BackendMetrics()
        self.breaker = CircuitBreaker(settings.breaker_threshold, settings.breaker_cooldown_s)
        self.rpm = RateLimiter(settings.rpm) if settings.rpm else None
        self.tpm = RateLimiter(settings.tpm) if settings.tpm else None
        self._states: dict[asyncio.AbstractEventLoop, _LoopState] = {}
        self._lock = threading.Lock()
        self.sessions_created = 0

    # -- sessions ---------------------------------------------------------------------------------
    def _loop_state(self) -> _LoopState:
        import aiohttp

        loop = asyncio.get_running_loop()
        with self._lock:
            st = self._states.get(loop)
            if st is not None and not st.session.closed:
                return st
            for old_loop in [lp for lp in self._states if lp.is_closed() or lp is loop]:
                self._dispose(self._states.pop(old_loop))
            headers = {"Content-Type": "application/json", **self.settings.headers}
            key = self.settings.resolved_api_key()
            if key:
                headers.setdefault("Authorization", f"Bearer {key}")
            connector = aiohttp.TCPConnector(limit=self.settings.max_connections, limit_per_host=0)
            session = aiohttp.ClientSession(connector=connector, headers=headers)
            # HTTP/1.1 carries one request per connection: more in flight would only queue for a
            # connection inside aiohttp, with the request's timeout already running.
            cap = min(self.settings.max_in_flight, self.settings.max_connections)
            limit = AdaptiveLimit(cap, self.settings.adaptive_concurrency)
            st = self._states[loop] = _LoopState(loop, session, limit)
            self.sessions_created += 1
            return st

    @staticmethod
    def _dispose(st: _LoopState) -> None:
        """Close a session that belongs to another (maybe closed) event loop, as well as we can."""
        if st.session.closed:
            return
        if not st.loop.is_closed() and st.loop.is_running():
            asyncio.run_coroutine_threadsafe(st.session.close(), st.loop)
            return
        connector = st.session.connector
        st.session.detach()
        if connector is None:
            return
        if st.loop.is_closed():
            # A closed loop can no longer run the transports' close callbacks, and aiohttp then
            # just forgets its pooled connections: close their sockets here, or they linger
            # until garbage collection (with a ResourceWarning each).
            with contextlib.suppress(Exception):
                for conns in list(connector._conns.values()):  # type: ignore[attr-defined]
                    for proto, _ in conns:
                        transport = getattr(proto, "transport", None)
                        sock = getattr(transport, "_sock", None)
                        if sock is not None:
                            sock.close()
                            transport._sock = None  # type: ignore[union-attr]
        with contextlib.suppress(Exception):
            connector._close()  # type: ignore[attr-defined]  # sync close of its transports

    def _take_all(self) -> list[_LoopState]:
        with self._lock:
            states = list(self._states.values())
            self._states.clear()
        return [st for st in states if not st.session.closed]

    async def aclose(self) -> None:
        """Close every session: the running loop's properly, the others as well as their loops allow."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for st in self._take_all():
            if running is st.loop:
                await st.session.close()
            else:
                self._dispose(st)

    def close(self) -> None:
        """Close every session from synchronous code."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for st in self._take_all():
            if running is st.loop:
                st.loop.create_task(st.session.close())
            elif st.loop.is_running():
                fut = asyncio.run_coroutine_threadsafe(st.session.close(), st.loop)
                with contextlib.suppress(Exception):
                    fut.result(timeout=5)
            elif not st.loop.is_closed() and running is None:
                st.loop.run_until_complete(st.session.close())
            else:
                self._dispose(st)

    # -- one request ------------------------------------------------------------------------------
    def _backoff(self, attempt: int) -> float:
        s = self.settings
        return random.uniform(0.0, min(s.backoff_cap_s, s.backoff_base_s * (2**attempt)))

    async def post_json(
        self, url: str, payload: Any, *, cost_tokens: float = 0.0, deadline: float | None = None
    ) -> Reply:
        """POST ``payload`` to ``url`` and return the decoded JSON reply.

        ``deadline`` is an absolute ``time.monotonic()`` time no attempt or wait may pass.
        ``cost_tokens`` is reserved from the ``tpm`` budget (correct it with :meth:`settle_tokens`).
        Raises :class:`RequestFailed` (reason ``http``, ``timeout`` or ``circuit_open``).
        """
        sent: list[float] = []  # when the first attempt went out
        try:
            return await self._post_json(url, payload, cost_tokens, deadline, sent)
        except RequestFailed as e:
            e.latency_s = time.monotonic() - sent[0] if sent else 0.0
            raise

    async def _post_json(
        self, url: str, payload: Any, cost_tokens: float, deadline: float | None, sent: list[float]
    ) -> Reply:
        import aiohttp

        s = self.settings
        st = self._loop_state()
        retries = 0
        last_error = ""
        body = json.dumps(payload, ensure_ascii=False)

        def remaining() -> float:
            return math.inf if deadline is None else deadline - time.monotonic()

        def timed_out() -> RequestFailed:
            tail = f"; last error: {last_error}" if last_error else ""
            return RequestFailed("timeout", f"batch deadline passed after {retries} retries{tail}", retries)

        while True:
            if remaining() <= 0:
                raise timed_out()
            while True:
                verdict = self.breaker.gate()
                if verdict == "allow":
                    break
                if verdict == "open":
                    raise RequestFailed("circuit_open", self.breaker.message(), retries)
                if remaining() <= 0:
                    raise timed_out()
                await asyncio.sleep(min(0.01, max(0.0, remaining())))
            probe_done = False
            try:
                wait = 0.0
                if self.rpm is not None:
                    wait = max(wait, self.rpm.reserve(1))
                if self.tpm is not None and cost_tokens:
                    wait = max(wait, self.tpm.reserve(cost_tokens))
                if wait > 0:
                    if wait >= remaining():
                        await asyncio.sleep(max(0.0, remaining()))
                        raise timed_out()
                    await asyncio.sleep(wait)
                status = 0
                text = ""
                retry_after = None
                kind = None
                async with st.limit as sent_at, judge_slot():  # judge_slot: the Ray-wide budget
                    if self.breaker.state == "open":  # opened while this request queued
                        raise RequestFailed("circuit_open", self.breaker.message(), retries)
                    timeout = min(s.request_timeout_s, remaining())
                    if timeout <= 0:
                        raise timed_out()
                    self.metrics.add(requests=1)
                    if not sent:
                        sent.append(time.monotonic())
                    try:
                        async with st.session.post(
                            url, data=body.encode(), timeout=aiohttp.ClientTimeout(total=timeout)
                        ) as resp:
                            status = resp.status
                            text = await resp.text(errors="replace")
                            retry_after = parse_retry_after(resp.headers.get("Retry-After"))
                    except (asyncio.TimeoutError, TimeoutError):
                        kind = "timeout"
                        last_error = f"no answer within {timeout:.3g}s"
                    except aiohttp.ClientError as e:
                        kind = "connection"
                        last_error = f"{type(e).__name__}: {e}"
                    if status == 429:
                        st.limit.overloaded(sent_at)
                    elif 200 <= status < 300:
                        st.limit.succeeded()
                if kind is None and 200 <= status < 300:
                    self.breaker.success()
                    probe_done = True
                    try:
                        data = json.loads(text)
                    except ValueError:
                        raise RequestFailed(
                            "http", f"HTTP {status} with a body that is not JSON: {text[:200]!r}", retries
                        ) from None
                    return Reply(data, retries, time.monotonic() - sent[0], status)
                if kind is None:
                    last_error = f"HTTP {status}: {_server_message(status, text)}"
                    kind = "429" if status == 429 else ("5xx" if status >= 500 else str(status))
                self.metrics.error(kind)
                dead = kind in ("timeout", "connection") or status >= 500 or status == 408
                if dead:
                    self.breaker.failure(last_error)
                else:
                    self.breaker.success()
                probe_done = True
                if not (dead or status in RETRYABLE_STATUS):
                    raise RequestFailed("http", last_error, retries)
                if retries >= s.max_retries:
                    reason = "timeout" if kind == "timeout" else "http"
                    raise RequestFailed(
                        reason, f"gave up after {retries + 1} attempts; last: {last_error}", retries
                    )
            finally:
                if not probe_done:
                    self.breaker.abandon()
            delay = self._backoff(retries)
            if retry_after is not None:
                delay = max(delay, min(retry_after, s.retry_after_cap_s))
            retries += 1
            self.metrics.add(retries=1)
            if delay >= remaining():
                await asyncio.sleep(max(0.0, remaining()))
                raise timed_out()
            await asyncio.sleep(delay)

    def lowest_in_flight_limit(self) -> float:
        """The lowest adaptive in-flight limit reached since the last call (``max_in_flight`` if never cut)."""
        with self._lock:
            limits = [st.limit for st in self._states.values()]
        cap = min(self.settings.max_in_flight, self.settings.max_connections)
        low = min((lim.lowest for lim in limits), default=float(cap))
        for lim in limits:
            lim.lowest = lim.limit
        return low

    def settle_tokens(self, reserved: float, used: float) -> None:
        """Correct a ``tpm`` reservation once the reply's ``usage`` says what the request really cost."""
        if self.tpm is not None and reserved:
            self.tpm.refund(reserved - used)


_TIMED_OUT = object()


async def gather_with_deadline(aws: Sequence[Awaitable[Any]], deadline_s: float | None) -> list[Any]:
    """Run awaitables concurrently; one entry per awaitable, in order.

    An entry is the awaitable's value, the exception it raised, or :data:`TIMED_OUT` if it was
    still running when ``deadline_s`` passed (it is then cancelled).
    """
    tasks = [asyncio.ensure_future(a) for a in aws]
    if not tasks:
        return []
    try:
        _, pending = await asyncio.wait(tasks, timeout=deadline_s)
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    out: list[Any] = []
    for t in tasks:
        if t in pending or t.cancelled():
            out.append(_TIMED_OUT)
        else:
            exc = t.exception()
            out.append(exc if exc is not None else t.result())
    return out


#: Marker :func:`gather_with_deadline` puts where an awaitable passed the deadline.
TIMED_OUT = _TIMED_OUT


class HTTPBackend(RMBackend):
    """Base of the RM backends that speak HTTP: one :class:`HTTPCore`, its metrics, and closing both."""

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
