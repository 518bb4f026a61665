"""The Ray path against the process executor, side by side in one run.

1. Per-batch overhead: a batch of cheap samples through a warm ``process`` engine, a warm
   ``executor: ray`` engine and a warm ``RewardLoopManager`` (ms per batch, ratio to ``process``).
2. Throughput on a CPU-bound batch: ``process`` with N workers, then ``RewardLoopManager`` with 1
   and 2 workers (samples/s, ratio to ``process``, and 2-worker / 1-worker scaling).

Run: ``.venv/bin/python benchmarks/bench_ray.py [--n 256] [--cpu-n 400] [--work-ms 5] [--repeat 3]``
Ray starts locally with this machine's CPUs (or joins ``--address``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SCORER = textwrap.dedent(
    """
    import time


    def compute_score(solution_str, ground_truth, extra_info):
        work_s = extra_info.get("work_ms", 0) / 1000.0
        end = time.process_time() + work_s
        x = 0
        while time.process_time() < end:  # CPU-bound, not sleeping
            x += sum(i * i for i in range(200))
        return float(solution_str == ground_truth)
    """
)


def batch(n: int, work_ms: float, tag: str) -> list[dict]:
    # distinct samples, so dedup does not hide the work
    return [
        {"response": str(i % 7), "ground_truth": "3", "extra_info": {"work_ms": work_ms, "id": f"{tag}{i}"}}
        for i in range(n)
    ]


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=256, help="samples in the overhead batch (cheap scorer)")
    ap.add_argument("--cpu-n", type=int, default=400, help="samples in the CPU-bound batch")
    ap.add_argument("--work-ms", type=float, default=5.0, help="CPU time per sample in the CPU-bound batch")
    ap.add_argument(
        "--workers", type=int, default=2, help="process workers (and the larger Ray worker count)"
    )
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per measurement; the best is reported")
    ap.add_argument("--address", default=None, help="Ray cluster to join (default: start a local one)")
    args = ap.parse_args()

    import ray

    from rewardkit import RewardEngine
    from rewardkit.ray import RewardLoopManager

    tmp = Path(tempfile.mkdtemp(prefix="rk_bench_ray_"))
    path = tmp / "cpu_scorer.py"
    path.write_text(SCORER)
    crf = {"path": str(path)}
    t = time.perf_counter()
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    print(f"ray.init: {time.perf_counter() - t:.1f}s; cluster CPUs: {ray.cluster_resources().get('CPU')}")
    w = args.workers

    print(f"\n1. per-batch overhead, {args.n} cheap samples (best of {args.repeat}, warm pools)")
    cheap = batch(args.n, 0, "c")
    rows = []
    with RewardEngine({"executor": "process", "num_workers": w, "custom_reward_function": crf}) as eng:
        eng.compute(cheap)
        rows.append(("process executor", best(lambda: eng.compute(cheap), args.repeat)))
    with RewardEngine({"executor": "ray", "num_workers": w, "custom_reward_function": crf}) as eng:
        eng.compute(cheap)
        rows.append(("executor: ray (engine)", best(lambda: eng.compute(cheap), args.repeat)))
    with RewardLoopManager({"num_workers": w, "custom_reward_function": crf}) as m:
        m.compute(cheap)
        rows.append((f"RewardLoopManager ({w} workers)", best(lambda: m.compute(cheap), args.repeat)))
    base = rows[0][1]
    for name, s in rows:
        print(f"  {name:<32} {s * 1000:9.1f} ms/batch   x{s / base:5.2f} vs process")

    print(f"\n2. throughput, {args.cpu_n} samples x {args.work_ms:g} ms CPU each (best of {args.repeat})")
    heavy = batch(args.cpu_n, args.work_ms, "h")
    rows = []
    with RewardEngine({"executor": "process", "num_workers": w, "custom_reward_function": crf}) as eng:
        eng.compute(heavy[:8])
        rows.append((f"process executor ({w} workers)", best(lambda: eng.compute(heavy), args.repeat)))
    for k in sorted({1, w}):
        with RewardLoopManager({"num_workers": k, "custom_reward_function": crf}) as m:
            m.compute(heavy[:8])
            rows.append(
                (
                    f"RewardLoopManager ({k} worker{'s' if k > 1 else ''})",
                    best(lambda: m.compute(heavy), args.repeat),
                )
            )
    base = rows[0][1]
    for name, s in rows:
        print(f"  {name:<32} {args.cpu_n / s:9.1f} samples/s   x{base / s:5.2f} vs process")
    if len(rows) == 3:
        print(f"  scaling 1 -> {w} Ray workers: x{rows[1][1] / rows[2][1]:.2f}")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
