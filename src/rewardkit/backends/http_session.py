"""The ``aiohttp`` session of an HTTP backend, owned by the event loop it was created on.

The engine runs ``compute`` and ``acompute`` on its own loop, so a backend normally has exactly one
session. Code that drives a backend from other loops (``asyncio.run`` per call, two threads each
with a loop) gets one session per such loop, each closed *on its own loop*: in :meth:`close`, or,
when the loop shuts down first (``asyncio.run`` ends), by an async generator that the loop
finalises in ``shutdown_asyncgens``. No aiohttp internals are touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class LoopState:
    """What one event loop holds: its session and whatever the owner attaches (``extra``)."""

    loop: asyncio.AbstractEventLoop
    session: Any  # aiohttp.ClientSession
    extra: Any
    guard: Any = None


async def _close_at_shutdown(session: Any) -> AsyncIterator[None]:
    try:
        yield
    finally:  # the loop's shutdown_asyncgens (or our own aclose) runs this on the owning loop
        if not session.closed:
            await session.close()


class LoopSessions:
    """Sessions by event loop; ``make_extra()`` builds per-loop companions (the request router)."""

    def __init__(self, headers: dict[str, str], make_extra: Callable[[], Any]):
        self.headers = headers
        self.make_extra = make_extra
        self._states: dict[asyncio.AbstractEventLoop, LoopState] = {}
        self._lock = threading.Lock()
        self.sessions_created = 0

    async def get(self) -> LoopState:
        """The running loop's state, creating its session on first use."""
        loop = asyncio.get_running_loop()
        st = self._states.get(loop)
        if st is not None and not st.session.closed:
            return st
        import aiohttp

        with self._lock:
            for old in [lp for lp in self._states if lp.is_closed() or lp is loop]:
                self._forget(self._states.pop(old))
            # One connection per request in flight; the in-flight limit is the routers' job
            # (a stalled attempt keeps its connection after it stops counting against the limit).
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
            session = aiohttp.ClientSession(connector=connector, headers=self.headers)
            st = self._states[loop] = LoopState(loop, session, self.make_extra())
            self.sessions_created += 1
        st.guard = _close_at_shutdown(session)
        await st.guard.__anext__()
        return st

    def states(self) -> list[LoopState]:
        """Every live state (a snapshot)."""
        with self._lock:
            return list(self._states.values())

    @staticmethod
    def _forget(st: LoopState) -> None:
        # The loop is closed without having shut its async generators down: its transports can no
        # longer be closed from here; drop our reference (the OS reclaims the sockets at exit).
        if not st.session.closed:
            with contextlib.suppress(Exception):
                st.session.detach()

    def _take_all(self) -> list[LoopState]:
        with self._lock:
            states = list(self._states.values())
            self._states.clear()
        return [st for st in states if not st.session.closed]

    async def aclose(self) -> None:
        """Close every session: the running loop's here, the others on their own loops."""
        running = asyncio.get_running_loop()
        for st in self._take_all():
            if st.loop is running:
                await st.session.close()
            else:
                self._close_elsewhere(st, running)

    def close(self) -> None:
        """Close every session from synchronous code."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for st in self._take_all():
            self._close_elsewhere(st, running)

    def _close_elsewhere(self, st: LoopState, running: asyncio.AbstractEventLoop | None) -> None:
        if st.loop is running:
            st.loop.create_task(st.session.close())
        elif st.loop.is_closed():
            self._forget(st)
        elif st.loop.is_running():
            fut = asyncio.run_coroutine_threadsafe(st.session.close(), st.loop)
            with contextlib.suppress(Exception):
                fut.result(timeout=5)
        elif running is None:
            st.loop.run_until_complete(st.session.close())
        else:
            self._forget(st)
