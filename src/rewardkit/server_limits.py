"""Limits that keep ``rewardkit serve`` up under bad clients: nesting depth, media type, slow or too many connections."""

from __future__ import annotations

import asyncio
import json
from typing import Any

#: Deepest JSON nesting accepted in a request body (rewardkit's own requests need about 6).
MAX_JSON_DEPTH = 64
#: Media types accepted on POST bodies; no ``Content-Type`` at all is accepted too.
JSON_TYPES = ("application/json", "application/octet-stream")


def json_depth_ok(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests no deeper than ``limit`` (iterative: never recursion-limited)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            items = item.values()
        elif isinstance(item, list):
            items = item
        else:
            continue
        if depth > limit:
            return False
        stack.extend((v, depth + 1) for v in items if isinstance(v, dict | list))
    return True


def loads_bounded(body: bytes, limit: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that raises :class:`ValueError` for nesting deeper than ``limit``."""
    try:
        value = json.loads(body)
    except RecursionError:
        raise ValueError(f"JSON nested more than {limit} levels deep") from None
    if not json_depth_ok(value, limit):
        raise ValueError(f"JSON nested more than {limit} levels deep")
    return value


def media_type_ok(content_type: str | None) -> bool:
    """Whether a POST body of this ``Content-Type`` may be JSON (``+json`` suffixes included)."""
    if not content_type:
        return True
    mt = content_type.split(";", 1)[0].strip().lower()
    return mt in JSON_TYPES or mt.endswith("+json")


_BODY = b'{"error": "too many open connections (--max-connections); retry later"}'
_TOO_MANY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: " + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY
)


class ConnectionGuard:
    """Counts open connections for :class:`GuardedProtocol`: a cap and a header deadline."""

    def __init__(self, max_connections: int, header_timeout_s: float):
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.open = 0
        self.refused = 0
        self.timed_out = 0


class GuardedProtocol(asyncio.Protocol):
    """Wraps aiohttp's request handler: refuses connections over the cap (a JSON 503), and closes
    one whose first request's headers have not arrived within ``header_timeout_s`` (slow-loris)."""

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard):
        self._inner = inner
        self._guard = guard
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tail = b""
        self._counted = False
        self._refused = False

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._transport = transport
        g = self._guard
        if g.open >= g.max_connections:
            g.refused += 1
            self._refused = True
            transport.write(_TOO_MANY)
            transport.close()
            return
        g.open += 1
        self._counted = True
        self._timer = asyncio.get_running_loop().call_later(g.header_timeout_s, self._too_slow)
        self._inner.connection_made(transport)

    def _too_slow(self) -> None:
        self._guard.timed_out += 1
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._timer is not None:
            seen = self._tail + data
            if b"\r\n\r\n" in seen:
                self._timer.cancel()
                self._timer = None
            else:
                self._tail = seen[-3:]
        self._inner.data_received(data)  # type: ignore[attr-defined]

    def eof_received(self):
        if self._refused:
            return None
        return self._inner.eof_received()

    def connection_lost(self, exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._counted:
            self._guard.open -= 1
            self._counted = False
        if not self._refused:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()
