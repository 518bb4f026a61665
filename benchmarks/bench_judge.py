"""How close the generative judge client gets to a judge server's capacity, and whether it loses samples.

A scripted OpenAI-compatible server (tests/backends/judge/judge_server.py) runs in its own process
with a fixed service time and a concurrency capacity; capacity in requests/s is
``capacity / service_time``. Side by side in one run:

1. rewardkit's ``generative`` backend vs a naive client sending one request at a time:
   achieved requests/s as a ratio of the server's capacity;
2. with 10% of requests failing transiently (a 500 once), the completion rate of both;
3. an overloaded server that answers 429 beyond its capacity: rewardkit's completion rate.

A "bare http" row (plain aiohttp, same concurrency, nothing else) shows what this machine's CPU
allows at all: on a small shared machine the client and the server process, not the server's
nominal capacity, are the limit, so read rewardkit's figure against that row too.

Run: ``.venv/bin/python benchmarks/bench_judge.py [--n 2000] [--service-time 0.02] [--capacity 32]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
SERVER = REPO / "tests" / "backends" / "judge" / "judge_server.py"


class ServerProcess:
    """The scripted judge server as a subprocess (its own CPU, not competing for our GIL)."""

    def __init__(self, service_time: float, capacity: int, overflow: str = "queue"):
        self.args = [
            sys.executable,
            str(SERVER),
            "--service-time",
            str(service_time),
            "--capacity",
            str(capacity),
            "--overflow",
            overflow,
        ]

    def __enter__(self) -> str:
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        return f"http://127.0.0.1:{json.loads(line)['port']}"

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def make_samples(n: int, tag: str, fail_every: int | None = None) -> list:
    from rewardkit.batch import to_samples

    rows = []
    for i in range(n):
        directive = f" @@tag={tag}{i};fail=500x1@@" if fail_every and i % fail_every == 0 else ""
        rows.append({"prompt": f"Question {i}: what is {i} + {i}?", "response": f"It is {2 * i}.{directive}"})
    return to_samples(rows)


def judge(base_url: str, **rollout):
    from rewardkit.backends.generative import GenerativeRM
    from rewardkit.config import RewardModelConfig

    cfg = {"base_url": base_url, "model": "judge", "backoff_base_s": 0.05, "request_timeout_s": 30, **rollout}
    return GenerativeRM(RewardModelConfig(enable=True, rollout=cfg))


async def run_rewardkit(base_url: str, samples, **rollout) -> tuple[float, float, dict]:
    rm = judge(base_url, **rollout)
    await rm.ascore(make_samples(50, "warm"))  # warm up connections (no scripted failures used up)
    rm.metrics()
    start = time.perf_counter()
    res = await rm.ascore(samples)
    elapsed = time.perf_counter() - start
    ok = sum(r.status == "ok" for r in res)
    metrics = rm.metrics()
    await rm.aclose()
    return len(samples) / elapsed, ok / len(samples), metrics


async def run_naive(base_url: str, samples) -> tuple[float, float]:
    """One request at a time, no retries: what a simple loop over ``session.post`` achieves."""
    from rewardkit.backends.judge_templates import BUILTIN_TEMPLATES, render

    ok = 0
    async with aiohttp.ClientSession() as session:
        start = time.perf_counter()
        for s in samples:
            r = render(BUILTIN_TEMPLATES["rubric"], s)
            body = {"model": "judge", "messages": [{"role": "user", "content": r.user}], "max_tokens": 512}
            async with session.post(f"{base_url}/v1/chat/completions", json=body) as resp:
                if resp.status == 200:
                    await resp.json()
                    ok += 1
        elapsed = time.perf_counter() - start
    return len(samples) / elapsed, ok / len(samples)


async def run_raw(base_url: str, samples, concurrency: int) -> float:
    """The machine's ceiling: bare ``aiohttp`` with ``concurrency`` requests in flight, no templates,
    parsing, retries or accounting."""
    from rewardkit.backends.judge_templates import BUILTIN_TEMPLATES, render

    bodies = [
        {
            "model": "judge",
            "messages": [{"role": "user", "content": render(BUILTIN_TEMPLATES["rubric"], s).user}],
        }
        for s in samples
    ]
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def one(body):
            async with sem, session.post(f"{base_url}/v1/chat/completions", json=body) as resp:
                await resp.json()

        start = time.perf_counter()
        await asyncio.gather(*(one(b) for b in bodies))
        return len(bodies) / (time.perf_counter() - start)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000, help="samples for rewardkit")
    ap.add_argument("--naive-n", type=int, default=150, help="samples for the naive client")
    ap.add_argument("--service-time", type=float, default=0.02)
    ap.add_argument("--capacity", type=int, default=32)
    ap.add_argument("--max-in-flight", type=int, default=64)
    args = ap.parse_args()
    cap = args.capacity / args.service_time
    print(
        f"judge server: {args.service_time * 1000:.0f} ms per request, {args.capacity} concurrent "
        f"=> capacity {cap:.0f} req/s"
    )
    print(f"{'scenario':44} {'client':10} {'req/s':>8} {'of capacity':>12} {'completed':>10}")

    def row(scenario, client, rps, done):
        print(f"{scenario:44} {client:10} {rps:8.0f} {rps / cap:12.1%} {done:10.1%}")

    with ServerProcess(args.service_time, args.capacity) as url:
        rps, done, m = await run_rewardkit(url, make_samples(args.n, "a"), max_in_flight=args.max_in_flight)
        row("healthy server", "rewardkit", rps, done)
        nrps, ndone = await run_naive(url, make_samples(args.naive_n, "b"))
        row("healthy server", "naive", nrps, ndone)
        raw = await run_raw(url, make_samples(args.n, "r"), args.max_in_flight)
        row("healthy server", "bare http", raw, 1.0)
        print(
            f"  -> rewardkit / naive: {rps / nrps:.1f}x; rewardkit / bare http (this machine's ceiling): "
            f"{rps / raw:.0%}; p50/p99 request latency {m['latency/p50_s'] * 1000:.0f}/"
            f"{m['latency/p99_s'] * 1000:.0f} ms"
        )

        rps, done, m = await run_rewardkit(
            url, make_samples(args.n, "c", fail_every=10), max_in_flight=args.max_in_flight
        )
        row("10% of requests fail once (HTTP 500)", "rewardkit", rps, done)
        nrps, ndone = await run_naive(url, make_samples(args.naive_n, "d", fail_every=10))
        row("10% of requests fail once (HTTP 500)", "naive", nrps, ndone)
        print(f"  -> rewardkit retries: {m['retries']:.0f}, failed samples: {m.get('failed/http', 0):.0f}")

    with ServerProcess(args.service_time, args.capacity, overflow="429") as url:
        rps, done, m = await run_rewardkit(url, make_samples(args.n, "e"), max_in_flight=args.capacity * 2)
        row(f"429 beyond capacity ({args.capacity * 2} in flight)", "rewardkit", rps, done)
        print(
            f"  -> 429s absorbed by retries: {m.get('errors/429', 0):.0f}; adaptive in-flight limit went "
            f"down to {m['in_flight_limit/min']:.0f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
