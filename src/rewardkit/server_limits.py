"""Limits that keep ``rewardkit serve`` up under bad clients: nesting depth, media type, slow or too many connections."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable
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
        items: Iterable[Any]
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
    """Counts open connections for :class:`GuardedProtocol`: a cap and a read deadline.

    :meth:`wrap` the server's request handler so that the deadline covers every request on a
    kept-alive connection, not only the first one.
    """

    def __init__(self, max_connections: int, header_timeout_s: float):
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.open = 0
        self.refused = 0
        self.timed_out = 0
        self.conns: dict[Any, GuardedProtocol] = {}  # aiohttp's protocol -> our wrapper

    def wrap(self, handler: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        """``handler`` (aiohttp's ``Server.request_handler``), telling each connection when a request
        starts (its headers are in: the deadline stops) and ends (it starts again, for the client to
        read the answer, finish sending an unread body and send the next request's headers)."""

        async def guarded(request):
            conn = self.conns.get(request.protocol)
            if conn is None:
                return await handler(request)
            conn.request_started()
            try:
                return await handler(request)
            finally:
                conn.request_finished()

        return guarded


class GuardedProtocol(asyncio.Protocol):
    """Wraps aiohttp's request handler: refuses connections over the cap (a JSON 503), and closes one
    that keeps the server waiting longer than ``header_timeout_s`` for a request's headers (slow-loris),
    or, after an answer, for the rest of an unread body, the answer to be read or the next headers."""

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard):
        self._inner = inner
        self._guard = guard
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tail = b""
        self._counted = False
        self._refused = False
        self._hooked = False  # the wrapped request handler reports requests: no header sniffing

    def connection_made(self, transport) -> None:
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
        g.conns[self._inner] = self
        self._arm()
        self._inner.connection_made(transport)

    def _arm(self) -> None:
        self._disarm()
        self._tail = b""
        self._timer = asyncio.get_running_loop().call_later(self._guard.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def request_started(self) -> None:
        """A request's headers are in: its handler runs (and bounds its own body read) untimed."""
        self._hooked = True
        self._disarm()

    def request_finished(self) -> None:
        """A request's handler returned: the client has ``header_timeout_s`` for what comes next."""
        if self._transport is not None and not self._transport.is_closing():
            self._arm()

    def _too_slow(self) -> None:
        self._timer = None
        self._guard.timed_out += 1
        t = self._transport
        if t is not None and t.get_write_buffer_size():
            t.abort()  # an answer the client does not read would hold close() open: drop it
        elif t is not None:
            t.close()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._timer is not None and not self._hooked:
            seen = self._tail + data
            if b"\r\n\r\n" in seen:
                self._disarm()
            else:
                self._tail = seen[-3:]
        self._inner.data_received(data)

    def eof_received(self):
        if self._refused:
            return None
        return self._inner.eof_received()

    def connection_lost(self, exc) -> None:
        self._disarm()
        if self._counted:
            self._guard.open -= 1
            self._guard.conns.pop(self._inner, None)
            self._counted = False
        if not self._refused:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()
