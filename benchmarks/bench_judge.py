"""Issue 17's goals for the generative judge client, each printed as a ratio measured in this run.

The nasty fault server (tests/backends/judge/fault_server.py) runs as its own process(es): an
OpenAI-compatible judge serving ``--capacity`` requests at once with ``--service-time`` each
(32 x 20 ms = 1,600 req/s nominal), failing a share of first attempts with stalls past the client
timeout, connection resets, 429 bursts with Retry-After, 503s, 500s, garbage bodies and cut-off
answers. Goals:

1. no faults, default settings: throughput vs a plain aiohttp client with 32 in flight, same server;
2. 10% faults: >= 99.5% right, 0 wrong, 0 lost, time <= 1.5x the no-fault time + one timeout;
3. 30% faults: >= 99% right, no ``circuit_open`` while the server answers;
4. server killed mid-batch and restarted 2 s later: every sample scored, none failed for a cooldown;
5. two replicas, one killed mid-batch: >= 0.9x the throughput of one healthy replica alone.

The judge samples with temperature 0.7 (so a cut-off judgement is asked again, the default for
sampling). ``--timeout`` sets the client's request timeout (the stalls last 3x as long); the
default 60 s is the client's own default, use e.g. ``--n 1000 --timeout 2`` for a quick run.

Run: ``.venv/bin/python benchmarks/bench_judge.py [--n 2000] [--timeout 60] [--capacity 32]``
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
SERVER = REPO / "tests" / "backends" / "judge" / "fault_server.py"


class ServerProcess:
    """One fault server process; :meth:`kill` is a real SIGKILL, :meth:`start` again reuses the port."""

    def __init__(self, args: argparse.Namespace, rate: float = 0.0, port: int = 0):
        self.args, self.rate, self.port = args, rate, port
        self.proc: subprocess.Popen | None = None

    def start(self) -> ServerProcess:
        a = self.args
        cmd = [sys.executable, str(SERVER), "--port", str(self.port), "--rate", str(self.rate)]
        cmd += ["--capacity", str(a.capacity), "--service-time", str(a.service_time)]
        cmd += ["--stall-s", str(3 * a.timeout), "--lifetime-s", "900"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.port = json.loads(self.proc.stdout.readline())["port"]  # type: ignore[union-attr]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def make_samples(n: int, tag: str) -> list:
    from rewardkit.batch import to_samples

    return to_samples(
        [{"prompt": f"Question {tag}{i}?", "response": f"Answer {i} [[want={i % 11}]]"} for i in range(n)]
    )


def judge(urls, args: argparse.Namespace):
    from rewardkit.backends.generative import GenerativeRM
    from rewardkit.config import RewardModelConfig

    cfg = {"base_url": urls, "model": "judge", "temperature": 0.7, "request_timeout_s": args.timeout}
    return GenerativeRM(RewardModelConfig(enable=True, rollout=cfg))


class Run:
    """One rewardkit batch: elapsed time, right / wrong / lost / failed-by-reason counts, metrics."""

    def __init__(self, n: int, res: list, elapsed: float, metrics: dict):
        self.n, self.elapsed, self.metrics = n, elapsed, metrics
        self.right = sum(r.status == "ok" and abs(r.score - (i % 11) / 10) < 1e-9 for i, r in enumerate(res))
        self.wrong = sum(r.status == "ok" for r in res) - self.right
        self.lost = n - len(res)
        self.reasons: dict[str, int] = {}
        for r in res:
            if r.status != "ok":
                self.reasons[r.reason] = self.reasons.get(r.reason, 0) + 1

    @property
    def rps(self) -> float:
        return self.n / self.elapsed


async def run_rewardkit(urls, args, tag: str, during=None) -> Run:
    rm = judge(urls, args)
    await rm.ascore(make_samples(64, f"warm-{tag}"))  # open connections
    rm.metrics()
    samples = make_samples(args.n, tag)
    start = time.perf_counter()
    task = asyncio.ensure_future(rm.ascore(samples))
    if during is not None:
        await during()
    res = await task
    run = Run(args.n, res, time.perf_counter() - start, rm.metrics())
    await rm.aclose()
    rm.close()
    return run


async def run_plain(url: str, n: int, concurrency: int = 32) -> float:
    """A plain aiohttp client holding ``concurrency`` requests in flight: requests/s."""
    bodies = [
        {"model": "judge", "messages": [{"role": "user", "content": f"Question p{i}? [[want={i % 11}]]"}]}
        for i in range(n)
    ]
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def one(body):
            async with sem, session.post(f"{url}/v1/chat/completions", json=body) as resp:
                await resp.json()

        start = time.perf_counter()
        await asyncio.gather(*(one(b) for b in bodies))
        return n / (time.perf_counter() - start)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000, help="samples per batch")
    ap.add_argument("--timeout", type=float, default=60.0, help="client request timeout (stalls last 3x)")
    ap.add_argument("--service-time", type=float, default=0.02)
    ap.add_argument("--capacity", type=int, default=32)
    args = ap.parse_args()
    nominal = args.capacity / args.service_time
    print(
        f"fault server: {args.capacity} x {args.service_time * 1000:.0f} ms = {nominal:.0f} req/s nominal; ",
        end="",
    )
    print(f"{args.n} samples per batch; client timeout {args.timeout:g} s")

    with ServerProcess(args) as srv:  # 1. no faults; interleaved, best of two each (the CPU is shared)
        plain = await run_plain(srv.url, args.n)
        base = await run_rewardkit(srv.url, args, "base")
        plain = max(plain, await run_plain(srv.url, args.n))
        again = await run_rewardkit(srv.url, args, "base2")
        base = again if again.rps > base.rps else base
    print(
        f"1. no faults: rewardkit {base.rps:.0f} req/s = {base.rps / plain:.2f}x plain aiohttp (32 in flight, "
        f"{plain:.0f} req/s); {base.rps / nominal:.0%} of nominal; right {base.right}/{args.n}   "
        f"[{verdict(base.rps >= 0.95 * plain)} >= 1x, noise 5%]"
    )

    for i, rate in ((2, 0.1), (3, 0.3)):  # 2. and 3. transient faults
        with ServerProcess(args, rate) as srv:
            run = await run_rewardkit(srv.url, args, f"f{rate}")
        budget = 1.5 * base.elapsed + args.timeout
        share = run.right / args.n
        circuit = run.reasons.get("circuit_open", 0)
        line = (
            f"{i}. {rate:.0%} faults: right {share:.2%}, wrong {run.wrong}, lost {run.lost}, "
            f"failed {run.reasons or 0}, circuit_open {circuit}; time {run.elapsed:.1f} s = "
            f"{run.elapsed / budget:.2f}x (1.5x no-fault + one timeout = {budget:.1f} s); "
            f"retries {run.metrics['retries']:.0f}, stalled {run.metrics.get('stalled', 0):.0f}, "
            f"hedged {run.metrics.get('hedged', 0):.0f}, in-flight limit min {run.metrics['in_flight_limit/min']:.0f}"
        )
        goal = share >= (0.995 if rate < 0.2 else 0.99) and run.wrong == 0 and run.lost == 0 and circuit == 0
        if rate < 0.2:
            goal = goal and run.elapsed <= budget
        print(f"{line}   [{verdict(goal)}]")

    srv = ServerProcess(args).start()  # 4. kill and restart 2 s later, mid-batch
    restarted_at: list[float] = []

    async def restart() -> None:
        await asyncio.sleep(base.elapsed / 3)
        srv.kill()
        await asyncio.sleep(2.0)
        await asyncio.get_running_loop().run_in_executor(None, srv.start)
        restarted_at.append(time.perf_counter())

    run = await run_rewardkit(srv.url, args, "restart", during=restart)
    srv.stop()
    print(
        f"4. killed after {base.elapsed / 3:.1f} s, back 2 s later: right {run.right}/{args.n} "
        f"({run.right / args.n:.2%}), failed {run.reasons or 0}, batch {run.elapsed:.1f} s   "
        f"[{verdict(run.right == args.n and not run.reasons.get('circuit_open'))}]"
    )

    one = ServerProcess(args).start()  # 5. two replicas, one killed mid-batch
    alone = await run_rewardkit(one.url, args, "alone")
    two = ServerProcess(args).start()

    async def kill_one() -> None:
        await asyncio.sleep(alone.elapsed / 4)
        two.kill()

    pair = await run_rewardkit([one.url, two.url], args, "pair", during=kill_one)
    one.stop()
    two.stop()
    ratio = pair.rps / alone.rps
    print(
        f"5. two replicas, one killed after {alone.elapsed / 4:.1f} s: {pair.rps:.0f} req/s = {ratio:.2f}x one "
        f"healthy replica alone ({alone.rps:.0f} req/s); right {pair.right}/{args.n}, failed "
        f"{pair.reasons or 0}   [{verdict(ratio >= 0.9 and pair.right == args.n)}]"
    )


if __name__ == "__main__":
    asyncio.run(main())
