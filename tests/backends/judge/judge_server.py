"""A scripted OpenAI-compatible judge server and OpenRLHF-style reward server on 127.0.0.1.

It runs in a background thread with its own event loop (or, with ``python judge_server.py``, as
its own process for the benchmark). Each request's behaviour comes from directives written in the
text it carries (the judge prompt, or the reward queries): ``@@key=value;key=value@@``.

* ``tag=NAME``: counters below count per tag (default: the whole text)
* ``reply=TEXT``: the judge's answer (``|`` becomes a newline); default: a small oracle that
  answers ``Answer: yes/no`` for the correctness template and ``Score: 7`` otherwise
* ``delay=S``: answer after ``S`` seconds
* ``fail=STATUSxN``: the first ``N`` requests of this tag get ``STATUS`` (``retry_after=V`` adds the header)
* ``hang=N``: the first ``N`` requests sleep past any client timeout
* ``drop=N``: the first ``N`` requests have their connection closed without an answer
* ``garbage=N``: the first ``N`` requests get a 200 whose body is not JSON
* ``finish=REASON``: the completion's ``finish_reason`` (default ``stop``; ``length`` = cut at max_tokens)
* ``short=1`` (reward server): one reward fewer than queries

``server.queue`` holds behaviours (dicts of the same keys) applied, in order, to the next requests
regardless of text; ``server.requests`` records one dict per request: ``t`` (monotonic time),
``path``, ``tag``, ``status`` (-1 hung, -2 dropped), ``text`` and ``auth`` (the Authorization header).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import threading
import time
from collections import Counter
from typing import Any

from aiohttp import web

DIRECTIVE = re.compile(r"@@(.*?)@@", re.DOTALL)
HANG_S = 3.0


def directives(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for block in DIRECTIVE.findall(text):
        for part in block.split(";"):
            if "=" in part:
                k, v = part.split("=", 1)
                out[k.strip()] = v.strip()
    return out


def oracle(text: str) -> str:
    """The default judgement: correctness by 'reference appears in the response', else a fixed score."""
    m = re.search(r"\[Reference answer\]\n(.*?)\n\n\[Response\]\n(.*?)\n\n", text, re.DOTALL)
    if m:
        return "Reasoning omitted.\nAnswer: " + ("yes" if m.group(1).strip() in m.group(2) else "no")
    return "Looks fine.\nScore: 7"


class ScriptedServer:
    """See the module docstring. ``capacity`` bounds concurrent work; beyond it requests queue or get 429."""

    def __init__(self, service_time: float = 0.0, capacity: int | None = None, overflow: str = "queue"):
        self.service_time = service_time
        self.capacity = capacity
        self.overflow = overflow
        self.port = 0
        self.reset()

    def reset(self) -> None:
        self.generation = getattr(self, "generation", 0) + 1  # requests from before a reset are not logged
        self.counts: Counter[str] = Counter()
        self.queue: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.max_concurrent = 0
        self._active: Counter[int] = Counter()  # handlers running, per generation

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- behaviour --------------------------------------------------------------------------------
    def _behaviour(self, text: str) -> tuple[str, dict[str, str], int]:
        if self.queue:  # a queued behaviour applies once, to this request
            d = {k: str(v) for k, v in self.queue.pop(0).items()}
            return d.get("tag", "queue"), d, 1
        d = directives(text)
        tag = d.get("tag", text)
        self.counts[tag] += 1
        return tag, d, self.counts[tag]

    async def _common(self, request: web.Request, text: str, answer) -> web.StreamResponse:
        tag, d, n = self._behaviour(text)
        generation = self.generation

        def log(st: int) -> None:
            if generation != self.generation:
                return
            self.requests.append(
                {
                    "t": time.monotonic(),
                    "path": request.path,
                    "tag": tag,
                    "status": st,
                    "text": text,
                    "auth": request.headers.get("Authorization"),
                }
            )

        if (
            self.capacity is not None
            and sum(self._active.values()) >= self.capacity
            and self.overflow == "429"
        ):
            log(429)
            return web.json_response(
                {"error": {"message": "over capacity"}}, status=429, headers={"Retry-After": "0"}
            )
        active = self._active  # a reset() replaces it: handlers from before it don't count after
        active[generation] += 1
        self.max_concurrent = max(self.max_concurrent, active[generation])
        try:
            if self.capacity is not None:
                async with self._sem:
                    return await self._act(request, text, d, n, tag, log, answer)
            return await self._act(request, text, d, n, tag, log, answer)
        finally:
            active[generation] -= 1

    async def _act(self, request, text, d, n, tag, log, answer) -> web.StreamResponse:
        if self.service_time:
            await asyncio.sleep(self.service_time)
        if "delay" in d:
            await asyncio.sleep(float(d["delay"]))
        if "fail" in d:
            st, _, times = d["fail"].partition("x")
            if n <= int(times or 1):
                log(int(st))
                headers = {"Retry-After": d["retry_after"]} if "retry_after" in d else {}
                return web.json_response(
                    {"error": {"message": f"scripted failure {st}"}}, status=int(st), headers=headers
                )
        if "hang" in d and n <= int(d["hang"]):
            log(-1)
            await asyncio.sleep(HANG_S)
            return web.json_response({"error": "too late"})
        if "drop" in d and n <= int(d["drop"]):
            log(-2)
            if request.transport is not None:
                request.transport.close()
            return web.Response(text="")
        if "garbage" in d and n <= int(d["garbage"]):
            log(200)
            return web.Response(text="<html>502 proxy oops</html>", content_type="text/html")
        log(200)
        return web.json_response(answer(d, text))

    # -- endpoints --------------------------------------------------------------------------------
    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))

        def answer(d, text):
            reply = d["reply"].replace("|", "\n") if "reply" in d else oracle(text)
            return {
                "id": "cmpl-1",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": reply},
                        "finish_reason": d.get("finish", "stop"),
                    }
                ],
                "usage": {"prompt_tokens": len(text) // 4, "completion_tokens": len(reply) // 4},
            }

        return await self._common(request, text, answer)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        text = str(body.get("prompt", ""))

        def answer(d, text):
            reply = d["reply"].replace("|", "\n") if "reply" in d else oracle(text)
            return {
                "id": "cmpl-2",
                "object": "text_completion",
                "choices": [{"index": 0, "text": reply, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(text) // 4, "completion_tokens": len(reply) // 4},
            }

        return await self._common(request, text, answer)

    async def reward(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        queries = body.get("query") or []
        prompts = body.get("prompts")
        labels = body.get("labels")
        text = "\n".join(queries)

        def answer(d, text):
            rewards = []
            for i, q in enumerate(queries):
                if prompts is not None and labels is not None:
                    response = q[len(prompts[i]) :] if q.startswith(prompts[i]) else q
                    rewards.append(1.0 if labels[i] and labels[i] in response else 0.0)
                else:
                    rewards.append(len(q) / 100)
            if d.get("short"):
                rewards = rewards[:-1]
            return {"rewards": rewards, "scores": rewards, "extra_logs": {"n": len(queries)}}

        return await self._common(request, text, answer)

    # -- running ----------------------------------------------------------------------------------
    async def _start(self, port: int = 0) -> int:
        self._sem = asyncio.Semaphore(self.capacity) if self.capacity else None
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/get_reward", self.reward)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, backlog=1024)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def start(self) -> ScriptedServer:
        """Start in a background thread; returns self once listening."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="judge-server", daemon=True)
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _stop(self) -> None:
        await self._runner.cleanup()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in others:  # hung handlers
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def main() -> None:
    """Run as a process (for the benchmark): prints the port, serves until stdin closes."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--service-time", type=float, default=0.0)
    ap.add_argument("--capacity", type=int, default=None)
    ap.add_argument("--overflow", default="queue", choices=["queue", "429"])
    args = ap.parse_args()
    server = ScriptedServer(args.service_time, args.capacity, args.overflow)

    async def run() -> None:
        server.port = await server._start()
        print(json.dumps({"port": server.port}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await server._runner.cleanup()

    asyncio.run(run())


if __name__ == "__main__":
    main()
