"""A nasty OpenAI-compatible judge server on 127.0.0.1: an overloaded vLLM behind a proxy, in miniature.

It serves ``/v1/chat/completions`` with ``capacity`` requests at once, each taking ``service_time``
(more queue, as vLLM queues them), and answers ``Score: N`` where the prompt carries ``[[want=N]]``
(7 otherwise), so a client's score can be checked as right or wrong. A share ``rate`` of prompts
fails its *first* attempt transiently (which ones is fixed by ``seed``), with a fault drawn from
``kinds``; a retry succeeds:

* ``stall``: no answer for ``stall_s`` (past the client's timeout), then a late one;
* ``reset``: the connection is closed without an answer;
* ``429``: starts a burst: this and the next ``burst_n`` requests get 429 with ``Retry-After``;
* ``503``: 503 with ``Retry-After`` (what a proxy says while the model server restarts);
* ``500``: a plain server error;
* ``garbage``: a 200 whose body is an HTML error page, not JSON;
* ``cutoff``: a 200 whose answer stops before the score, with ``finish_reason: "length"``.

:meth:`FaultServer.restart` kills the server mid-batch (listening socket closed, connections
dropped: clients get refusals) and brings it back on the same port ``down_s`` later, answering 503
for ``warmup_s`` more. The server stops by itself after ``lifetime_s``. Run it in a background
thread (:meth:`FaultServer.start`) or, for the benchmark, as a process (``python fault_server.py``,
prints ``{"port": N}``, serves until stdin closes or its lifetime ends).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field

from aiohttp import web

WANT = re.compile(r"\[\[want=(\d+)\]\]")
KINDS = ("stall", "reset", "429", "503", "500", "garbage", "cutoff")


@dataclass
class FaultPlan:
    """Which first attempts fail, and how (see the module docstring)."""

    rate: float = 0.0
    kinds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 1.0))
    stall_s: float = 30.0
    retry_after: str = "0.05"
    burst_n: int = 8
    seed: int = 0

    def fault_for(self, text: str) -> str | None:
        """The fault of ``text``'s first attempt, or ``None``."""
        rng = random.Random(zlib.crc32(text.encode()) ^ self.seed)
        if rng.random() >= self.rate:
            return None
        kinds = [k for k, w in self.kinds.items() if w > 0]
        return rng.choices(kinds, weights=[self.kinds[k] for k in kinds])[0]


def want_of(text: str) -> int:
    """The score the server answers for a prompt."""
    m = WANT.search(text)
    return int(m.group(1)) if m else 7


class FaultServer:
    """See the module docstring. ``log`` holds one ``(time, status)`` per request (-1 stall, -2 reset)."""

    def __init__(
        self,
        plan: FaultPlan | None = None,
        capacity: int = 32,
        service_time: float = 0.0,
        lifetime_s: float = 120.0,
        port: int = 0,
    ):
        self.plan = plan or FaultPlan()
        self.capacity = capacity
        self.service_time = service_time
        self.lifetime_s = lifetime_s
        self.port = port
        self.seen: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.log: list[tuple[float, int]] = []
        self.restarts = 0
        self._burst_left = 0
        self._warm_until = 0.0
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- answering --------------------------------------------------------------------------------
    def _status(self, status: int) -> None:
        self.log.append((time.monotonic(), status))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        now = time.monotonic()
        if now < self._warm_until:
            return self._error(503, "model is loading")
        if self._burst_left > 0:
            self._burst_left -= 1
            return self._error(429, "too many requests")
        self.seen[text] += 1
        fault = self.plan.fault_for(text) if self.seen[text] == 1 else None
        if fault is not None:
            self.faults[fault] += 1
            early = await self._early_fault(request, fault)
            if early is not None:
                return early
        async with self._sem:
            if self.service_time:
                await asyncio.sleep(self.service_time)
        if fault == "garbage":
            self._status(200)
            return web.Response(text="<html><body>502 Bad Gateway</body></html>", content_type="text/html")
        want = want_of(text)
        reply, finish = (f"Reasoning.\nScore: {want}", "stop")
        if fault == "cutoff":
            reply, finish = ("Reasoning that goes on and on and on", "length")
        self._status(200)
        return web.json_response(
            {
                "id": "cmpl-f",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": finish}
                ],
                "usage": {"prompt_tokens": len(text) // 4, "completion_tokens": len(reply) // 4},
            }
        )

    def _error(self, status: int, message: str) -> web.Response:
        self._status(status)
        headers = {"Retry-After": self.plan.retry_after} if status in (429, 503) else {}
        return web.json_response({"error": {"message": message}}, status=status, headers=headers)

    async def _early_fault(self, request: web.Request, fault: str) -> web.StreamResponse | None:
        if fault == "stall":
            self._status(-1)
            await asyncio.sleep(self.plan.stall_s)
            return web.json_response({"error": "too late"})
        if fault == "reset":
            self._status(-2)
            if request.transport is not None:
                request.transport.close()
            return web.Response(text="")
        if fault == "429":
            self._burst_left = self.plan.burst_n
            return self._error(429, "too many requests")
        if fault in ("503", "500"):
            return self._error(int(fault), "upstream unavailable" if fault == "503" else "internal error")
        return None

    # -- running ----------------------------------------------------------------------------------
    async def _open(self) -> None:
        self._sem = asyncio.Semaphore(self.capacity)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.05)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, backlog=2048)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _close(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in others:  # handlers still running (stalls): this loop runs nothing else
            t.cancel()

    async def _restart(self, down_s: float, warmup_s: float) -> None:
        await self._close()
        await asyncio.sleep(down_s)
        if self._stopped:
            return
        self._warm_until = time.monotonic() + warmup_s
        await self._open()
        self.restarts += 1

    def restart(self, after_s: float, down_s: float, warmup_s: float = 0.0) -> None:
        """Kill the server ``after_s`` from now; bring it back ``down_s`` later (503 for ``warmup_s``)."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(
            lambda: self._loop.call_later(
                after_s, lambda: asyncio.ensure_future(self._restart(down_s, warmup_s))
            )
        )

    def start(self) -> FaultServer:
        """Start in a background thread; returns self once listening. Stops itself after ``lifetime_s``."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-server", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._open(), self._loop).result(10)
        self._loop.call_soon_threadsafe(lambda: self._loop.call_later(self.lifetime_s, self._expire))
        return self

    def _expire(self) -> None:
        threading.Thread(target=self.stop, daemon=True).start()

    def stop(self) -> None:
        """Stop and close the loop (idempotent)."""
        if self._stopped or self._loop is None:
            return
        self._stopped = True
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """Run as a process: print the port, serve until stdin closes or the lifetime ends."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--capacity", type=int, default=32)
    ap.add_argument("--service-time", type=float, default=0.02)
    ap.add_argument("--rate", type=float, default=0.0)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated fault kinds (equal weights)")
    ap.add_argument("--stall-s", type=float, default=30.0)
    ap.add_argument("--retry-after", default="0.05")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lifetime-s", type=float, default=600.0)
    args = ap.parse_args()
    kinds = {k: 1.0 for k in args.kinds.split(",") if k}
    plan = FaultPlan(args.rate, kinds, args.stall_s, args.retry_after, seed=args.seed)
    server = FaultServer(plan, args.capacity, args.service_time, args.lifetime_s, args.port)

    async def run() -> None:
        await server._open()
        print(json.dumps({"port": server.port}), flush=True)
        stdin_closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await asyncio.wait([stdin_closed], timeout=args.lifetime_s)
        await server._close()

    asyncio.run(run())
    import os

    os._exit(0)  # the stdin reader thread may still block


if __name__ == "__main__":
    main()
