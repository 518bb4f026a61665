"""What an HTTP request comes back with: :class:`Reply` or :class:`RequestFailed`, ``Retry-After``
and server error messages, and :func:`gather_with_deadline` for a batch under one deadline."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any


class RequestFailed(Exception):
    """A request that failed for good: ``reason`` is a failure reason, ``retries`` how many were spent,
    ``kind`` what the last attempt ran into, ``replica`` the server it went to."""

    def __init__(
        self,
        reason: str,
        message: str,
        retries: int = 0,
        latency_s: float = 0.0,
        replica: str = "",
        kind: str = "",
    ):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retries = retries
        self.latency_s = latency_s
        self.replica = replica
        self.kind = kind or reason

    @property
    def attempts(self) -> int:
        """Attempts sent (``retries`` + 1, or 0 when nothing could be sent)."""
        return self.retries + 1 if self.replica else 0


@dataclass
class Reply:
    """A successful JSON reply, with the retries it took, the latency from first send to answer
    (retries and backoff included, waiting for a free slot before the first send not) and the
    replica that answered."""

    data: Any
    retries: int
    latency_s: float
    status: int = 200
    replica: str = ""

    @property
    def attempts(self) -> int:
        """Attempts sent, this one included."""
        return self.retries + 1


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


def server_message(text: str) -> str:
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
