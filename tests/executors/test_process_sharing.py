"""Concurrent calls share the process pool (no head-of-line blocking, small calls travel together); warm workers."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from rewardkit.executors.process import ProcessExecutor

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def executor(make_config):
    made: list[ProcessExecutor] = []

    def make(**cfg) -> ProcessExecutor:
        ex = ProcessExecutor(make_config(**cfg))
        made.append(ex)
        return ex

    yield make
    for ex in made:
        ex.close()


async def test_a_hanging_batch_does_not_hold_up_concurrent_small_ones(executor, spec, task):
    ex = executor(num_workers=2, timeout_s=2.0)
    assert [r.score for r in await ex.run([task(spec("good"), i, "1", "1") for i in range(2)])] == [1.0, 1.0]
    finished: list[tuple[str, float]] = []

    async def timed(name, tasks):
        start = time.monotonic()
        results = await ex.run(tasks)
        finished.append((name, time.monotonic() - start))
        return results

    hang = asyncio.create_task(timed("hang", [task(spec("hang"), i) for i in range(6)]))
    await asyncio.sleep(0.3)  # the hanging batch holds both workers
    small = [asyncio.create_task(timed(f"small{k}", [task(spec("good"), 0, "1", "1")])) for k in range(5)]
    hung, *smalls = await asyncio.gather(hang, *small)

    assert [r.reason for r in hung] == ["timeout"] * 6
    assert [r[0].score for r in smalls] == [1.0] * 5
    took = dict(finished)
    assert finished[-1][0] == "hang"  # every small call finished before the hanging one
    # six 2 s hangs on two workers take three rounds; a small call waits for at most one
    assert max(took[f"small{k}"] for k in range(5)) < 0.6 * took["hang"], finished


async def test_one_caller_timing_out_or_cancelled_leaves_the_others_alone(executor, spec, task):
    ex = executor(num_workers=2, timeout_s=30.0)
    doomed = asyncio.create_task(ex.run([task(spec("hang"), 0)]))
    ok = asyncio.create_task(ex.run([task(spec("sleepy"), i, sleep=0.5) for i in range(2)]))
    await asyncio.sleep(0.2)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert [r.status for r in await ok] == ["ok", "ok"]
    assert (await ex.run([task(spec("good"), 0, "1", "1")]))[0].score == 1.0


def test_concurrent_one_sample_calls_are_coalesced_into_few_chunks(executor, spec, task):
    """verl's per-sample calls (many threads, one task each) must not cost a pipe write apiece."""
    ex = executor(num_workers=2, timeout_s=30.0)
    good = spec("good")
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        asyncio.run_coroutine_threadsafe(ex.run([task(good, 0, "1", "1")]), loop).result(60)
        before = ex.stats["chunks"]
        n = 400
        out: list = [None] * n

        def call(k: int) -> None:
            fut = asyncio.run_coroutine_threadsafe(ex.run([task(good, k, str(k % 2), "1")]), loop)
            out[k] = fut.result(60)

        threads = [threading.Thread(target=call, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5)
    assert [r[0].score for r in out] == [float(k % 2) for k in range(n)]  # each caller gets its own
    assert ex.stats["chunks"] - before < n / 4, ex.stats


async def test_tasks_behind_a_slow_one_move_to_a_free_worker(executor, spec, task):
    """One expensive sample must not hold up the rest of its chunk while another worker is idle."""
    ex = executor(num_workers=2, timeout_s=30.0)
    ex.chunk_size = 20  # all of it in one chunk
    slow = spec("sleepy_where")
    await ex.run([task(slow, i, sleep=0.0) for i in range(2)])  # both workers up
    tasks = [task(slow, 0, sleep=1.5)] + [task(slow, i, sleep=0.01) for i in range(1, 20)]
    results = await ex.run(tasks)
    assert [r.status for r in results] == ["ok"] * 20
    slow_pid = results[0].extra["pid"]
    moved = [r.extra["pid"] for r in results[2:]]
    assert moved and all(p != slow_pid for p in moved), results  # scored by the free worker


def test_workers_fork_with_the_built_in_scorers_and_math_verify_loaded_and_warm(scorer_file, tmp_path):
    """The fork server preloads what the first batch's built-in scorers import, once for every worker,
    and runs their warm-up: sympy.physics.units is imported only by sympy's first simplify()."""
    script = tmp_path / "warm.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio
            from rewardkit.batch import Sample
            from rewardkit.config import RewardConfig
            from rewardkit.executors.base import ScoreTask
            from rewardkit.executors.process import ProcessExecutor
            from rewardkit.scorers import math_boxed
            from rewardkit.scoring import ScorerSpec, load_function, ref_of

            if __name__ == "__main__":
                math = ScorerSpec("math", math_boxed.compute_score, ref_of(math_boxed.compute_score))
                first = ProcessExecutor(RewardConfig(num_workers=1))
                r = asyncio.run(first.run([ScoreTask(math, Sample(0, "\\\\boxed{{2}}", ground_truth="2"))]))
                first.close()
                fn, ref = load_function({str(scorer_file)!r}, "loaded")
                fresh = ProcessExecutor(RewardConfig(num_workers=1))  # a new worker from the fork server
                tasks = [ScoreTask(ScorerSpec("loaded", fn, ref), Sample(i, m)) for i, m in
                         enumerate(["math_verify", "rewardkit.scorers.math_boxed", "sympy.physics.units",
                                    "rewardkit.scorers.code"])]
                print(r[0].score, [x.extra["loaded"] for x in asyncio.run(fresh.run(tasks))], flush=True)
                fresh.close()
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "1.0 [True, True, True, False]", out.stdout + out.stderr


async def test_a_hanging_batch_scorer_call_does_not_hold_up_other_calls(executor, spec, task):
    ex = executor(num_workers=2, timeout_s=3.0)
    samples = [task(spec("good"), i, "1", "1").sample for i in range(3)]
    start = time.monotonic()
    hung = asyncio.create_task(ex.run_batch(spec("batch_hang"), samples))
    await asyncio.sleep(0.2)
    small = await asyncio.gather(*(ex.run([task(spec("good"), 0, "1", "1")]) for _ in range(3)))
    small_s = time.monotonic() - start
    assert [r[0].score for r in small] == [1.0] * 3
    assert [r.reason for r in await hung] == ["timeout"] * 3
    assert small_s < 0.6 * (time.monotonic() - start)  # served by the other worker meanwhile
