"""The process executor: deadlines that kill, crash isolation, order, async concurrency, clean exit."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time

import pytest

from rewardkit.batch import Sample
from rewardkit.errors import ConfigError
from rewardkit.executors.process import ProcessExecutor
from rewardkit.scoring import ScorerSpec, load_function

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def make_executor(make_config):
    made: list[ProcessExecutor] = []

    def make(memory_limit_mb=None, **cfg) -> ProcessExecutor:
        ex = ProcessExecutor(make_config(**cfg), memory_limit_mb=memory_limit_mb)
        made.append(ex)
        return ex

    yield make
    for ex in made:
        ex.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


async def test_misbehaving_scorers_fail_alone_and_pool_recovers(make_executor, spec, task):
    ex = make_executor(memory_limit_mb=64, timeout_s=2.0)
    good = spec("good")
    tasks = [task(good, i, str(i % 2), "1") for i in range(60)]
    bad = {7: "hang", 19: "boom", 31: "exit_now", 43: "segfault", 55: "hog"}
    for i, name in bad.items():
        tasks[i] = task(spec(name), i)
    start = time.monotonic()
    results = await ex.run(tasks)
    elapsed = time.monotonic() - start

    assert len(results) == len(tasks)
    assert results[7].reason == "timeout" and "deadline" in results[7].error
    assert results[19].reason == "error" and "boom: x" in results[19].error
    assert results[31].reason == "crash" and "exited with code 3" in results[31].error
    assert results[43].reason == "crash" and "SIGSEGV" in results[43].error
    assert results[55].status == "failed" and results[55].reason in ("error", "crash")
    for i, r in enumerate(results):
        if i not in bad:
            assert r.status == "ok" and r.score == float(i % 2 == 1), (i, r)
    # one hang costs about one deadline, not one per chunk or per worker
    assert elapsed < 10 * ex.config.timeout_s
    assert ex.stats["killed"] >= 1 and ex.stats["crashed"] >= 2

    # the pool still works, with the same number of workers
    again = await ex.run([task(good, i, "1", "1") for i in range(20)])
    assert [r.score for r in again] == [1.0] * 20
    assert len(ex.pids) <= ex.num_workers


async def test_functions_from_a_file_run_in_worker_processes(make_executor, spec, task):
    ex = make_executor()
    results = await ex.run([task(spec("where"), i) for i in range(8)])
    pids = {r.extra["pid"] for r in results}
    assert os.getpid() not in pids
    assert pids <= set(ex.pids)
    # workers are kept between batches
    again = await ex.run([task(spec("where"), i) for i in range(8)])
    assert {r.extra["pid"] for r in again} <= set(ex.pids)
    assert ex.stats["started"] <= ex.num_workers


async def test_empty_batch_starts_nothing(make_executor):
    ex = make_executor()
    assert await ex.run([]) == []
    assert ex.pids == [] and ex.stats["started"] == 0


async def test_order_is_kept_with_chunks_and_uneven_work(make_executor, spec, task):
    ex = make_executor()
    tasks = []
    for i in range(300):
        if i % 50 == 0:
            tasks.append(task(spec("nap"), i, sleep=0.05))
        else:
            tasks.append(task(spec("good"), i, str(i), str(i) if i % 3 else "no"))
    results = await ex.run(tasks)
    for i, r in enumerate(results):
        expected = 1.0 if i % 50 == 0 or i % 3 else 0.0
        assert r.status == "ok" and r.score == expected, (i, r)


async def test_async_scorers_run_concurrently_within_the_limit(make_executor, spec, task):
    ex = make_executor(num_workers=1, max_concurrency=4, timeout_s=5.0)
    n, nap = 8, 0.4
    start = time.monotonic()
    results = await ex.run([task(spec("nap"), i, f"r{i}", sleep=nap) for i in range(n)])
    elapsed = time.monotonic() - start
    assert all(r.status == "ok" for r in results)
    peaks = [r.extra["peak"] for r in results]
    assert max(peaks) == 4  # never more than max_concurrency in flight
    assert elapsed < n * nap * 0.75  # far from one after another


async def test_async_scorer_deadlines(make_executor, spec, task):
    ex = make_executor(num_workers=1, timeout_s=1.0)
    tasks = [task(spec("nap"), i, sleep=0.05) for i in range(6)]
    tasks[1] = task(spec("await_forever"), 1)
    tasks[4] = task(spec("block_loop"), 4)  # blocks the worker's event loop: only a kill stops it
    results = await ex.run(tasks)
    assert results[1].reason == "timeout"
    assert results[4].reason == "timeout"
    assert [r.status for i, r in enumerate(results) if i not in (1, 4)] == ["ok"] * 4


async def test_crashed_sample_is_retried_on_a_fresh_worker(make_executor, spec, task, tmp_path):
    ex = make_executor(max_retries=1)
    results = await ex.run([task(spec("crash_once"), 0, marker=str(tmp_path / "m1"))])
    assert results[0].status == "ok"
    no_retry = make_executor(max_retries=0)
    results = await no_retry.run([task(spec("crash_once"), 0, marker=str(tmp_path / "m2"))])
    assert results[0].reason == "crash" and "1 attempt" in results[0].error


async def test_batch_deadline_fails_unfinished_samples(make_executor, spec, task):
    ex = make_executor(timeout_s=30.0, batch_timeout_s=1.5)
    tasks = [task(spec("good"), i, "1", "1") for i in range(10)]
    for i in (2, 5, 8):
        tasks[i] = task(spec("hang"), i)
    start = time.monotonic()
    results = await ex.run(tasks)
    elapsed = time.monotonic() - start
    assert elapsed < 15  # bounded by the batch deadline, not by the 30 s per-sample one
    assert [results[i].reason for i in (2, 5, 8)] == ["timeout"] * 3
    assert "batch_timeout_s" in results[2].error
    assert sum(r.status == "ok" for r in results) >= 1
    assert all(r.status == "ok" or r.reason == "timeout" for r in results)
    assert (await ex.run([task(spec("good"), 0, "1", "1")]))[0].score == 1.0


async def test_input_too_large_is_checked_in_workers(make_executor, spec, task):
    ex = make_executor(max_input_chars=10)
    results = await ex.run([task(spec("good"), 0, "y" * 11, "1"), task(spec("good"), 1, "1", "1")])
    assert results[0].reason == "input_too_large"
    assert results[1].score == 1.0


async def test_an_unpicklable_scorer_is_a_config_error_not_a_silent_in_process_run(make_executor, spec, task):
    # Running a closure in this process would lose the deadline that kills a hung scorer.
    ex = make_executor()
    offset = 0.5

    def closure(response):
        return {"score": offset}

    local = ScorerSpec("closure", closure, None)
    with pytest.raises(ConfigError, match=r"scorer 'closure' cannot run in the process executor") as e:
        await ex.run([task(spec("where"), 0), task(local, 1)])
    assert "module-level function" in str(e.value)
    with pytest.raises(ConfigError, match="'batch_closure'"):
        await ex.run_batch(
            ScorerSpec("batch_closure", lambda responses: [offset], None, batch=True),
            [task(spec("where"), 0).sample],
        )
    results = await ex.run([task(spec("where"), 0)])  # the executor is still usable
    assert results[0].status == "ok"


async def test_scorer_that_only_loads_in_the_parent_falls_back(make_executor, parent_only_file, task):
    fn, ref = load_function(str(parent_only_file), "score")
    ex = make_executor()
    with pytest.warns(RuntimeWarning, match="cannot be loaded in a worker"):
        results = await ex.run([task(ScorerSpec("parent_only", fn, ref), i) for i in range(3)])
    assert [r.score for r in results] == [0.5] * 3


async def test_run_batch_in_a_worker(make_executor, spec):
    ex = make_executor(timeout_s=1.0, max_retries=0)
    samples = [Sample(i, str(i % 2), ground_truth="1") for i in range(5)]
    results = await ex.run_batch(spec("batch_good"), samples)
    assert [r.score for r in results] == [0.0, 1.0, 0.0, 1.0, 0.0]
    short = await ex.run_batch(spec("batch_short"), samples)
    assert {r.reason for r in short} == {"invalid_return"}
    hung = await ex.run_batch(spec("batch_hang"), samples)
    assert {r.reason for r in hung} == {"timeout"}
    crashed = await ex.run_batch(spec("batch_crash"), samples)
    assert {r.reason for r in crashed} == {"crash"}
    assert await ex.run_batch(spec("batch_good"), []) == []
    assert [r.score for r in await ex.run_batch(spec("batch_good"), samples)] == [0.0, 1.0, 0.0, 1.0, 0.0]


async def test_event_loop_is_not_blocked(make_executor, spec, task):
    ex = make_executor(num_workers=1, timeout_s=1.0)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    t = asyncio.create_task(ticker())
    await ex.run([task(spec("hang"), 0)])
    t.cancel()
    assert ticks >= 10  # the loop kept running while the supervisor waited a full second


def test_close_is_idempotent_and_stops_workers(make_config, spec, task):
    ex = ProcessExecutor(make_config())
    asyncio.run(ex.run([task(spec("good"), i, "1", "1") for i in range(4)]))
    pids = ex.pids
    assert pids and all(_alive(p) for p in pids)
    ex.close()
    ex.close()
    assert not any(_alive(p) for p in pids)
    # a closed executor starts a fresh pool if used again
    assert asyncio.run(ex.run([task(spec("good"), 0, "1", "1")]))[0].score == 1.0
    ex.close()


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_no_orphan_workers_when_the_parent_exits(scorer_file, tmp_path, how):
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio, os, signal, sys, threading
            from rewardkit.batch import Sample
            from rewardkit.config import RewardConfig
            from rewardkit.executors.base import ScoreTask
            from rewardkit.executors.process import ProcessExecutor
            from rewardkit.scoring import ScorerSpec, load_function

            if __name__ == "__main__":
                fn, ref = load_function({str(scorer_file)!r}, "hang")
                ex = ProcessExecutor(RewardConfig(num_workers=2, timeout_s=600))
                good, gref = load_function({str(scorer_file)!r}, "good")
                asyncio.run(ex.run([ScoreTask(ScorerSpec("good", good, gref), Sample(i, "1")) for i in range(4)]))
                # keep one worker busy with a hang while we go away
                threading.Thread(
                    target=asyncio.run,
                    args=(ex.run([ScoreTask(ScorerSpec("hang", fn, ref), Sample(0, "x"))]),),
                    daemon=True,
                ).start()
                import time; time.sleep(0.5)
                print(" ".join(map(str, ex.pids)), flush=True)
                if {how!r} == "sigkill":
                    os.kill(os.getpid(), signal.SIGKILL)
                sys.exit(0)
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    pids = [int(p) for p in out.stdout.split()]
    assert pids, out.stderr
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)]


def test_engine_with_the_process_executor(scorer_file):
    import rewardkit

    cfg = {
        "executor": "process",
        "num_workers": 2,
        "timeout_s": 1.0,
        "custom_reward_function": {"path": str(scorer_file), "name": "good"},
    }
    with rewardkit.RewardEngine(cfg) as engine:
        assert isinstance(engine.executor, ProcessExecutor)
        r1 = engine.compute([{"response": "1", "ground_truth": "1"}, {"response": "2", "ground_truth": "1"}])
        r2 = engine.compute([{"response": "3", "ground_truth": "3"}])
        pids = engine.executor.pids
    assert r1.scores == [1.0, 0.0] and r2.scores == [1.0]
    assert pids and not any(_alive(p) for p in pids)


def test_worker_memory_cap_from_config(scorer_file):
    import rewardkit

    cfg = {
        "executor": "process",
        "num_workers": 1,
        "timeout_s": 20.0,
        "worker_memory_mb": 128,
        "custom_reward_function": {"path": str(scorer_file), "name": "hog"},
    }
    with rewardkit.RewardEngine(cfg) as engine:
        r = engine.compute([{"response": "x"}])
    assert r.status == ["failed"] and r.reasons[0] in ("error", "crash")
    assert r.reasons[0] == "crash" or "MemoryError" in r.errors[0]


class warnings_as_errors:
    """Turn warnings into errors inside a ``with`` block."""

    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


async def test_worker_killed_while_idle_is_replaced(make_executor, spec, task):
    ex = make_executor(num_workers=2)
    await ex.run([task(spec("good"), i, "1", "1") for i in range(4)])
    victim = ex.pids[0]
    os.kill(victim, 9)
    deadline = time.monotonic() + 5
    while _alive(victim) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    results = await ex.run([task(spec("where"), i) for i in range(6)])
    assert all(r.status == "ok" for r in results)
    assert victim not in {r.extra["pid"] for r in results}
    assert victim not in ex.pids


async def test_spawn_start_method(make_config, spec, task):
    ex = ProcessExecutor(make_config(num_workers=1), start_method="spawn")
    try:
        results = await ex.run(
            [task(spec("good"), 0, "1", "1"), task(spec("hang"), 1), task(spec("good"), 2, "2", "1")]
        )
        assert [r.status for r in results] == ["ok", "failed", "ok"] and results[1].reason == "timeout"
    finally:
        ex.close()
    with pytest.raises(ValueError, match="start_method"):
        ProcessExecutor(make_config(), start_method="fork")


async def test_a_timeout_also_kills_what_the_scorer_started(make_executor, spec, task, tmp_path):
    ex = make_executor(num_workers=1)
    pidfile = tmp_path / "child.pid"
    results = await ex.run([task(spec("spawn_and_hang"), 0, pidfile=str(pidfile))])
    assert results[0].reason == "timeout"
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not _alive(child)


def test_workers_never_run_the_main_script_again(scorer_file, tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, warnings
            import rewardkit
            from rewardkit.batch import Sample
            from rewardkit.config import RewardConfig
            from rewardkit.executors.base import ScoreTask
            from rewardkit.executors.process import ProcessExecutor
            from rewardkit.scoring import ScorerSpec
            import asyncio

            print("SCRIPT RUN", flush=True)  # no __main__ guard, like many training scripts
            cfg = {{"executor": "process", "num_workers": 2, "timeout_s": 5,
                   "custom_reward_function": {{"path": {str(scorer_file)!r}, "name": "where"}}}}
            r = rewardkit.compute([{{"response": "a"}}, {{"response": "b"}}], cfg)
            print("WORKER", all(pid != os.getpid() for pid in r.extra["pid"]), r.status, flush=True)

            def in_main(response):
                return {{"score": 1.0, "pid": os.getpid()}}

            ex = ProcessExecutor(RewardConfig(num_workers=1))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                res = asyncio.run(ex.run([ScoreTask(ScorerSpec("in_main", in_main, None), Sample(0, "x"))]))
            ex.close()
            print("MAIN_FN", res[0].status, res[0].extra.get("pid") == os.getpid(), len(caught), flush=True)
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("SCRIPT RUN") == 1, out.stdout
    assert "WORKER True ['ok', 'ok']" in out.stdout
    # a function defined in the main script cannot be loaded in a worker: it runs here, with a warning
    assert "MAIN_FN ok True 1" in out.stdout, out.stdout + out.stderr


async def test_cancelled_batch_stops_its_workers(make_executor, spec, task):
    ex = make_executor(num_workers=1, timeout_s=30.0)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(ex.run([task(spec("hang"), 0)]), 0.5)
    deadline = time.monotonic() + 5
    while ex.stats["killed"] == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert ex.stats["killed"] == 1  # the hung worker did not outlive the cancelled batch
    assert (await ex.run([task(spec("good"), 0, "1", "1")]))[0].score == 1.0


async def test_time_queued_for_a_sandbox_slot_is_not_counted(make_executor, spec, task):
    """Code samples wait their turn for a few sandboxes in each worker: waiting is not hanging."""
    ex = make_executor(num_workers=1, timeout_s=0.6)
    tasks = [task(spec("one_slot"), i) for i in range(8)] + [task(spec("await_forever"), 8)]
    results = await ex.run(tasks)
    assert [r.status for r in results[:8]] == ["ok"] * 8, [r.error for r in results[:8]]
    assert results[8].reason == "timeout"


async def test_async_scorer_that_ignores_cancellation(make_executor, spec, task):
    ex = make_executor(num_workers=1, timeout_s=0.5)
    tasks = [
        task(spec("good"), 0, "1", "1"),
        task(spec("ignore_cancel"), 1),
        task(spec("nap"), 2, sleep=0.05),
    ]
    start = time.monotonic()
    results = await ex.run(tasks)
    assert time.monotonic() - start < 15  # not held until the stray scorer ends (30 s)
    assert [r.status for r in results] == ["ok", "failed", "ok"] and results[1].reason == "timeout"
    again = await ex.run([task(spec("nap"), i, sleep=0.01) for i in range(4)])  # the pool recovered
    assert [r.status for r in again] == ["ok"] * 4
    assert ex.stats["started"] == 2  # the worker holding the stray scorer left; a fresh one took over


async def test_new_workers_see_the_environment_as_it_is_now(make_executor, spec, task, monkeypatch):
    """Forkserver children inherit the fork server's environment, frozen at the first pool start."""
    name = f"RK_TEST_ENV_{os.getpid()}"
    monkeypatch.delenv(name, raising=False)
    first = make_executor(num_workers=1)
    assert (await first.run([task(spec("getenv"), 0, name)]))[0].extra["value"] is None
    first.close()
    monkeypatch.setenv(name, "set later")
    later = make_executor(num_workers=1)
    assert (await later.run([task(spec("getenv"), 0, name)]))[0].extra["value"] == "set later"
