"""A stand-in for ``vllm serve``: a small aiohttp program speaking vLLM's endpoints on CPU.

Endpoints: ``GET /health`` (503 while "loading"), ``POST /sleep?level=N``, ``POST /wake_up``,
``GET /is_sleeping``, ``POST /v1/chat/completions`` (a judge answering ``Score: N``),
``POST /classify`` and ``POST /pooling`` (a deterministic score per input), ``GET /v1/models``
and ``GET /stats`` (what this replica saw, for tests). Scoring while asleep answers 503, as a
sleeping engine cannot serve. Scripted faults: ``--startup-delay S`` (health 503 for S seconds),
``--exit-at-start CODE``, ``--crash-after N`` (the process dies on its N-th scoring request).
It stops by itself after ``--max-lifetime S``.

    python standin_server.py --host 127.0.0.1 --port 8000 --model tiny
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from aiohttp import web


def score_of(text: str) -> float:
    """The stand-in's reward for one input: deterministic, depends on the text."""
    return round((sum(map(ord, text)) % 1000) / 100.0, 4)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="standin")
    p.add_argument("--startup-delay", type=float, default=0.0)
    p.add_argument("--exit-at-start", type=int, default=None)
    p.add_argument("--crash-after", type=int, default=0)
    p.add_argument("--max-lifetime", type=float, default=300.0)
    p.add_argument("--enable-sleep-mode", action="store_true")
    a, _unknown = p.parse_known_args()
    print(f"standin: starting pid={os.getpid()} port={a.port} model={a.model}", flush=True)
    if a.exit_at_start is not None:
        print("standin: scripted start-up failure: CUDA out of memory (pretend)", flush=True)
        sys.exit(a.exit_at_start)
    born = time.monotonic()
    state = {"asleep": False, "scored": 0, "events": [], "requests": 0}

    def ready() -> bool:
        return time.monotonic() - born >= a.startup_delay

    def scoring(request_name: str) -> web.Response | None:
        state["requests"] += 1
        state["events"].append(request_name)
        if state["asleep"]:
            return web.json_response({"error": "engine is sleeping"}, status=503)
        state["scored"] += 1
        if a.crash_after and state["scored"] >= a.crash_after:
            print("standin: scripted crash", flush=True)
            os._exit(3)
        return None

    async def health(_):
        return web.Response(status=200 if ready() else 503)

    async def sleep(request):
        state["asleep"] = True
        state["events"].append(f"sleep:{request.query.get('level', '1')}")
        await asyncio.sleep(0.01)
        return web.Response(status=200)

    async def wake_up(_):
        state["asleep"] = False
        state["events"].append("wake_up")
        await asyncio.sleep(0.01)
        return web.Response(status=200)

    async def is_sleeping(_):
        return web.json_response({"is_sleeping": state["asleep"]})

    async def chat(request):
        body = await request.json()
        refused = scoring("chat")
        if refused is not None:
            return refused
        text = "".join(str(m.get("content", "")) for m in body.get("messages", []))
        value = int(score_of(text)) % 11
        return web.json_response(
            {
                "id": "cmpl-standin",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": f"Score: {value}"},
                    }
                ],
                "usage": {
                    "prompt_tokens": len(text) // 4,
                    "completion_tokens": 3,
                    "total_tokens": len(text) // 4 + 3,
                },
            }
        )

    def inputs(body) -> list[str]:
        x = body.get("input")
        if isinstance(x, str):
            return [x]
        if isinstance(x, list) and x and isinstance(x[0], int):
            return [" ".join(map(str, x))]
        if isinstance(x, list) and x and isinstance(x[0], list):
            return [" ".join(map(str, ids)) for ids in x]
        return [str(v) for v in (x or [])]

    async def classify(request):
        body = await request.json()
        refused = scoring("classify")
        if refused is not None:
            return refused
        texts = inputs(body)
        data = [
            {"index": i, "label": "LABEL_0", "probs": [score_of(t)], "num_classes": 1}
            for i, t in enumerate(texts)
        ]
        return web.json_response({"object": "list", "model": body.get("model"), "data": data, "usage": {}})

    async def pooling(request):
        body = await request.json()
        refused = scoring("pooling")
        if refused is not None:
            return refused
        data = [{"index": i, "object": "pooling", "data": [score_of(t)]} for i, t in enumerate(inputs(body))]
        return web.json_response({"object": "list", "model": body.get("model"), "data": data})

    async def models(_):
        return web.json_response({"object": "list", "data": [{"id": a.model, "object": "model"}]})

    async def stats(_):
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        return web.json_response({"pid": os.getpid(), "port": a.port, "cuda_visible_devices": cvd, **state})

    app = web.Application()
    app.add_routes(
        [
            web.get("/health", health),
            web.post("/sleep", sleep),
            web.post("/wake_up", wake_up),
            web.get("/is_sleeping", is_sleeping),
            web.post("/v1/chat/completions", chat),
            web.post("/classify", classify),
            web.post("/pooling", pooling),
            web.get("/v1/models", models),
            web.get("/stats", stats),
        ]
    )

    async def lifetime(_app):
        async def stop_later():
            await asyncio.sleep(a.max_lifetime)
            print("standin: max lifetime reached", flush=True)
            os._exit(0)

        task = asyncio.ensure_future(stop_later())
        yield
        task.cancel()

    app.cleanup_ctx.append(lifetime)
    web.run_app(app, host=a.host, port=a.port, print=None, handle_signals=True)


if __name__ == "__main__":
    main()
