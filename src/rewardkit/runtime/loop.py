"""An event loop on a daemon thread, so that async work has one home whatever thread calls in."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop on a daemon thread: an engine's or a Ray group's work lives on one loop, whatever thread calls in."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; a thread-safe future of its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for it (from any other thread); interrupted, it is cancelled."""
        if threading.current_thread() is self._thread:
            coro.close()  # never to run: no "was never awaited" warning on top of the error
            raise RuntimeError("LoopThread.run() called from its own loop; await the coroutine instead")
        future = self.submit(coro)
        try:
            return future.result()
        except BaseException:  # KeyboardInterrupt while waiting: stop the work, don't orphan it
            future.cancel()
            raise

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and await it from another event loop."""
        return await asyncio.wrap_future(self.submit(coro))

    @property
    def thread(self) -> threading.Thread:
        """The thread running the loop."""
        return self._thread

    def stop(self) -> None:
        """Stop the loop and its thread (idempotent)."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()
