"""Start-up cost of the local code sandbox: sandboxed programs per second, per isolation mode.

The program is a small correct solution (read two numbers, print their sum). Side by side:

1. a bare ``subprocess.run([python, "-I", "-c", program])`` (no isolation at all);
2. ``run_python`` in each mode that works here (``unconfined``, ``namespaces``, ``bwrap``), one at a
   time (latency) and ``--concurrency`` at a time (throughput, through the same per-process limiter
   the code scorer uses).

Each figure is the best of three runs. Modes that cannot run here are reported with the reason. Run as root and unprivileged to cover both.

Run: ``.venv/bin/python benchmarks/bench_sandbox.py [--n 40] [--concurrency 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from rewardkit.scorers import sandbox_isolation  # noqa: E402
from rewardkit.scorers.sandbox import run_python  # noqa: E402

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
STDIN = "2 3\n"
REPEAT = 3  # timed runs per measurement; the best is reported (the machine is shared)


def bare(n: int) -> float:
    """Programs per second with a bare ``subprocess.run``."""
    start = time.perf_counter()
    for _ in range(n):
        out = subprocess.run(
            [sys.executable, "-I", "-c", PROGRAM], input=STDIN, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "5"
    return n / (time.perf_counter() - start)


async def sandboxed(n: int, mode: str, concurrency: int) -> float:
    """Programs per second through ``run_python`` in ``mode``, ``concurrency`` in flight."""
    isolation = {"mode": mode, "allow_unconfined": mode == "unconfined"}
    await run_python(PROGRAM, STDIN, isolation=isolation)  # probe outside the timing
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            run = await run_python(PROGRAM, STDIN, isolation=isolation)
            assert run.status == "ok" and run.stdout.strip() == "5", run

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - start)


def main() -> None:
    """Print a table of programs/s per mode next to a bare ``subprocess.run``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="programs per measurement")
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # the unconfined mode's warning, expected here
    who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    print(
        f"# {args.n} runs of a small correct solution; {who}; python {sys.executable}; {os.cpu_count()} CPUs"
    )
    base = max(bare(args.n) for _ in range(REPEAT))
    print(f"{'mode':<12} {'serial/s':>9} {'x bare':>7} {f'c={args.concurrency}/s':>9}")
    print(f"{'bare':<12} {base:>9.1f} {1.0:>7.2f} {'-':>9}")
    for mode in ("unconfined", "namespaces", "bwrap"):
        why = None if mode == "unconfined" else sandbox_isolation.probe(mode)
        if why is not None:
            print(f"{mode:<12} unavailable: {why}")
            continue
        serial = max(asyncio.run(sandboxed(args.n, mode, 1)) for _ in range(REPEAT))
        parallel = max(asyncio.run(sandboxed(args.n, mode, args.concurrency)) for _ in range(REPEAT))
        print(f"{mode:<12} {serial:>9.1f} {serial / base:>7.2f} {parallel:>9.1f}")


if __name__ == "__main__":
    main()
