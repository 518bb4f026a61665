"""TRL reward functions against a slow judge: two sync functions one after another vs two async ones gathered.

A scripted judge server on 127.0.0.1 (tests/backends/judge/judge_server.py) answers every request
after ``--delay`` seconds. Two judge-backed reward functions (different configs, so different
engines) score the same ``--n`` completions, as TRL does each step: the sync
:class:`RewardFunction` pair runs one after another, the :class:`AsyncRewardFunction` pair is
gathered as TRL gathers async reward functions. Prints both times and their ratio (about 0.5 when
the judges overlap). Run: ``.venv/bin/python benchmarks/bench_trl_async.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from backends.judge.judge_server import ScriptedServer  # noqa: E402

from rewardkit.integrations.trl import AsyncRewardFunction, RewardFunction, close_engines  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8, help="completions per step")
    ap.add_argument("--delay", type=float, default=0.5, help="judge answer delay, seconds")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    server = ScriptedServer().start()

    def config(temperature: float) -> dict:
        rollout = {"base_url": server.base_url, "model": "judge", "temperature": temperature}
        return {
            "executor": "inline",
            "reward_model": {"enable": True, "backend": "generative", "rollout": rollout},
        }

    prompts = [f"q{i}" for i in range(args.n)]
    completions = [f"answer {i} @@delay={args.delay}@@" for i in range(args.n)]
    try:
        for _ in range(args.repeats):
            a, b = RewardFunction(config(0.0), name="a"), RewardFunction(config(0.1), name="b")
            a(prompts=["w"], completions=["warm"])
            b(prompts=["w"], completions=["warm"])
            start = time.perf_counter()
            a(prompts=prompts, completions=completions)
            b(prompts=prompts, completions=completions)
            sequential = time.perf_counter() - start
            close_engines()

            fa, fb = AsyncRewardFunction(config(0.0), name="a"), AsyncRewardFunction(config(0.1), name="b")

            async def step(fa: AsyncRewardFunction = fa, fb: AsyncRewardFunction = fb) -> float:
                await asyncio.gather(
                    fa(prompts=["w"], completions=["warm"]), fb(prompts=["w"], completions=["warm"])
                )
                start = time.perf_counter()
                await asyncio.gather(
                    fa(prompts=prompts, completions=completions), fb(prompts=prompts, completions=completions)
                )
                return time.perf_counter() - start

            gathered = asyncio.run(step())
            close_engines()
            print(
                f"sync, one after another: {sequential:.2f}s   async, gathered: {gathered:.2f}s   ratio {gathered / sequential:.2f}"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
