"""The ``process`` executor against one-process loops, on real responses; and concurrent one-sample calls.

1. ``math`` (math-verify) on the 800 real Qwen2.5-Math responses of ../shared/data/math-dev: a bare
   one-process loop of the scorer against the process executor with ``--workers`` workers. Both
   start warm (``math_boxed.warm_up()``: the bare loop calls it, the pool's fork server runs it
   before forking) and with empty answer caches; the ratio is the speed-up (issue 12's goal: >= 1.8
   on 2 cores). A cold loop (a fresh script paying math-verify's first-use set-up) is printed too;
2. ``gsm8k`` on ``--n`` samples (the 400 real ProcessBench solutions, repeated): ``inline`` against
   ``process``, time per batch;
3. ``--calls`` concurrent one-sample ``engine.compute`` calls from as many threads (verl's per-sample
   path) against one batch of the same samples: time per call.

The machine may be shared: the load average (``os.getloadavg``) is printed next to the figures.
Run: ``.venv/bin/python benchmarks/bench_process_executor.py [--workers 2] [--n 4096] [--calls 1024]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# ../shared next to the checkout (or next to the folder of worktrees holding it)
DATA = (
    next(
        (d for d in (REPO.parent / "shared", REPO.parent.parent / "shared") if d.exists()),
        REPO.parent / "shared",
    )
    / "data"
    / "math-dev"
)
MATH = DATA / "qwen25math_math_cot.jsonl"
GSM8K = DATA / "processbench_gsm8k.jsonl"

BARE_LOOP = """
import json, sys, time
from rewardkit.scorers.math_boxed import compute_score, warm_up
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
if len(sys.argv) > 3:  # one contiguous part of the rows (the machine-ceiling runs)
    part, parts = map(int, sys.argv[3].split("/"))
    rows = rows[part * len(rows) // parts : (part + 1) * len(rows) // parts]
compute_score("\\\\boxed{1}", "1")  # imports math-verify: not timed (a warm worker has it too)
if sys.argv[2] == "warm":  # what the pool's fork server runs once before forking its workers
    warm_up()
start, cpu = time.perf_counter(), time.process_time()
for r in rows:
    compute_score(r["response"], r["ground_truth"])
print(time.perf_counter() - start, time.process_time() - cpu)
"""
# The ceiling of any pool on this machine: the warm loop split in contiguous parts, one process each,
# all started together (no pipes, no pickling); what is left is the cores' own scaling.
SPLIT_START = "import time; time.sleep(max(0.0, float({at}) - time.time()))\n"


def _split_loop(parts: int) -> float:
    at = time.time() + 8.0  # every process imports and warms up before the common start
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SPLIT_START.format(at=at) + BARE_LOOP, str(MATH), "warm", f"{k}/{parts}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(parts)
    ]
    walls = [float(proc.communicate()[0].split()[0]) for proc in procs]
    return max(walls)


def _cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes have used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def bench_math(workers: int, repeat: int) -> None:
    from rewardkit.batch import Sample
    from rewardkit.config import RewardConfig
    from rewardkit.executors.base import ScoreTask
    from rewardkit.executors.process import ProcessExecutor
    from rewardkit.scorers import math_boxed
    from rewardkit.scoring import ScorerSpec, ref_of

    rows = _rows(MATH)
    spec = ScorerSpec("math", math_boxed.compute_score, ref_of(math_boxed.compute_score))
    tasks = [
        ScoreTask(spec, Sample(i, r["response"], ground_truth=r["ground_truth"])) for i, r in enumerate(rows)
    ]
    warm = [ScoreTask(spec, Sample(i, f"\\boxed{{{i}}}", ground_truth=str(i))) for i in range(4 * workers)]
    bare, cold, pooled, bare_cpu, pool_cpu, split = [], [], [], [], [], []
    for _ in range(repeat):
        split.append(_split_loop(workers))
        for state, walls in (("warm", bare), ("cold", cold)):
            out = subprocess.run(
                [sys.executable, "-c", BARE_LOOP, str(MATH), state],
                capture_output=True,
                text=True,
                check=True,
            )
            wall, cpu = map(float, out.stdout.split())
            walls.append(wall)
            if state == "warm":
                bare_cpu.append(cpu)
        ex = ProcessExecutor(RewardConfig(num_workers=workers, timeout_s=30.0))  # fresh workers: cold caches
        try:
            asyncio.run(ex.run(warm))  # starts the pool and imports math-verify in every worker
            pids = ex.pids
            before, start = _cpu_s(pids), time.perf_counter()
            results = asyncio.run(ex.run(tasks))
            pooled.append(time.perf_counter() - start)
            pool_cpu.append(_cpu_s(pids) - before)
        finally:
            ex.close()
        assert len(results) == len(tasks) and all(r.status == "ok" for r in results), "a sample failed"
    b, c, p = min(bare), min(cold), min(pooled)
    print(f"math, {len(rows)} real responses ({_load()})")
    print(f"  bare one-process loop, warm  {b * 1e3:8.0f} ms  {b / len(rows) * 1e6:7.0f} us/sample")
    print(f"  process executor, {workers} workers {p * 1e3:8.0f} ms  {p / len(rows) * 1e6:7.0f} us/sample")
    print(f"  speed-up (bare / process)    {b / p:8.2f}x   (best of {repeat}; both warmed by warm_up())")
    print(
        f"  machine ceiling: the warm loop split in {workers} processes started together "
        f"{min(split) * 1e3:.0f} ms: {b / min(split):.2f}x (no pool can beat this here)"
    )
    print(
        f"  a cold bare loop (a fresh script: math-verify's first-use set-up in the timed part) "
        f"{c * 1e3:.0f} ms: {c / p:.2f}x the pool"
    )
    print(
        f"  CPU seconds: bare loop {min(bare_cpu):.2f}, all workers {min(pool_cpu):.2f} "
        "(load-independent: what the pool adds on top of the scoring)"
    )


def _gsm8k_records(n: int) -> list[dict]:
    rows = _rows(GSM8K)
    return [
        {"data_source": "openai/gsm8k", "response": r["response"], "ground_truth": r["ground_truth"]}
        for r in (rows[i % len(rows)] for i in range(n))
    ]


def bench_gsm8k(n: int, workers: int, repeat: int) -> None:
    import rewardkit

    records = _gsm8k_records(n)
    print(f"gsm8k, {n} samples ({_load()})")
    for executor in ("inline", "process"):
        cfg = {"executor": executor, "num_workers": workers, "dedup": False}
        with rewardkit.RewardEngine(cfg) as engine:
            engine.compute(records[:8])  # pool up, modules imported
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                result = engine.compute(records)
                times.append(time.perf_counter() - start)
            assert len(result.scores) == n
        t = min(times)
        print(f"  {executor:8s} {t * 1e3:8.1f} ms per batch  {t / n * 1e6:6.1f} us/sample")


def bench_calls(calls: int, workers: int) -> None:
    import rewardkit

    records = _gsm8k_records(calls)
    print(f"{calls} concurrent one-sample calls, gsm8k ({_load()})")
    for executor in ("inline", "process"):
        cfg = {"executor": executor, "num_workers": workers, "dedup": False}
        with rewardkit.RewardEngine(cfg) as engine:
            engine.compute(records[:8])
            start = time.perf_counter()
            engine.compute(records)
            batch = time.perf_counter() - start

            async def all_at_once() -> list[float]:  # verl's reward loop: one awaited call per sample
                results = await asyncio.gather(*(engine.acompute([r]) for r in records))
                return [res.scores[0] for res in results]

            start = time.perf_counter()
            scores = asyncio.run(all_at_once())
            wall = time.perf_counter() - start
            assert len(scores) == calls
        print(
            f"  {executor:8s} {wall / calls * 1e6:7.0f} us per call   "
            f"one batch of the same: {batch / calls * 1e6:6.1f} us/sample"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=("math", "gsm8k", "calls"), default=None)
    args = ap.parse_args()
    if not MATH.exists():
        print(f"skipped: {DATA} is missing")
        return
    if args.only in (None, "math"):
        bench_math(args.workers, args.repeat)
    if args.only in (None, "gsm8k"):
        bench_gsm8k(args.n, args.workers, args.repeat)
    if args.only in (None, "calls"):
        bench_calls(args.calls, args.workers)


if __name__ == "__main__":
    main()
