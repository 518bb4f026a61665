"""RewardLoopManager on a real local Ray: same results as inline, contiguous shards, streaming,
typed errors, dead workers, batch deadline."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rewardkit import RewardEngine
from rewardkit.errors import SampleError

pytestmark = [pytest.mark.ray, pytest.mark.slow]

DEADLINE_S = 3.0


@pytest.fixture(scope="module")
def manager(ray_cluster, crf):
    from rewardkit.ray import RewardLoopManager

    config = {
        "num_workers": 2,
        "custom_reward_function": crf(),
        "batch_timeout_s": 120.0,  # a safety net; the deadline test sets its own
        "max_retries": 1,
    }
    m = RewardLoopManager(config, worker_num_cpus=0.5, max_restarts=20, shards_per_worker=1)
    yield m
    m.close()


def mixed_batch(n: int = 13) -> list[dict]:
    out = []
    for i in range(n):
        rec = {"response": str(i % 3), "ground_truth": "1", "data_source": f"ds{i % 2}"}
        if i % 5 == 2:
            rec["extra_info"] = {"mode": "raise"}
        elif i % 5 == 4:
            rec["extra_info"] = {"mode": "none"}
        out.append(rec)
    out.append({"response": "", "ground_truth": "1"})  # empty response
    out.append({"response": "ünïcødé ✓ 数学", "ground_truth": "ünïcødé ✓ 数学"})
    return out


def test_results_identical_to_inline(manager, crf):
    batch = mixed_batch()
    with RewardEngine({"executor": "inline", "custom_reward_function": crf()}) as engine:
        expected = engine.compute(batch)
    got = manager.compute(batch)
    assert got.to_records() == expected.to_records()
    assert got.status.count("failed") == 3 and got.reasons.count("error") == 3
    assert "ValueError: bad sample" in got.errors[2]
    assert got.metrics["reward/num_samples"] == len(batch) == len(got)
    assert got.metrics["ray/shards"] == 2


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_contiguous_shards_one_result_per_sample(manager, n):
    batch = [{"response": "1", "ground_truth": "1", "extra_info": {"mode": "pid", "k": i}} for i in range(n)]
    result = manager.compute(batch)
    assert len(result) == n and result.scores == [1.0] * n
    pids = result.extra.get("pid", [])
    # each worker scored one contiguous run, sized as split_contiguous says: [4, 3] for 7
    runs: list[list[int]] = []
    for pid in pids:
        if runs and runs[-1][0] == pid:
            runs[-1][1] += 1
        else:
            runs.append([pid, 1])
    assert [size for _, size in runs] == {0: [], 1: [1], 2: [1, 1], 7: [4, 3]}[n]
    assert len({pid for pid, _ in runs}) == len(runs)  # two shards went to two different workers


def test_sample_errors_cross_the_boundary_typed(manager):
    with pytest.raises(SampleError) as info:
        manager.compute([{"response": "1"}, {"response": 5}])  # validated before dispatch
    assert info.value.index == 1


def test_streaming_yields_every_result_before_the_slowest(manager):
    batch = [{"response": "1", "ground_truth": "1"} for _ in range(6)]
    batch += [{"response": "1", "ground_truth": "1", "extra_info": {"mode": "sleep", "seconds": 1.5}}]
    stream = manager.submit(batch)
    seen = []
    first_while_running = None
    for index, result in stream:
        if first_while_running is None:
            first_while_running = not stream.done()
        seen.append((index, result.score))
    assert sorted(i for i, _ in seen) == list(range(len(batch)))
    assert all(score == 1.0 for _, score in seen)
    assert first_while_running is True  # the fast shard arrived while the slow one was still running
    assert stream.result().scores == [1.0] * len(batch)


async def test_async_compute_and_async_stream(manager):
    batch = [{"response": str(i), "ground_truth": "3"} for i in range(5)]
    result = await manager.acompute(batch)
    assert result.scores == [0.0, 0.0, 0.0, 1.0, 0.0]
    stream = manager.submit(batch)
    got = {i: r.score async for i, r in stream}
    assert got == dict(enumerate(result.scores))
    assert (await stream.aresult()).scores == result.scores
    # two batches in flight at once share the workers
    a, b = await asyncio.gather(manager.acompute(batch), manager.acompute(batch[::-1]))
    assert a.scores == result.scores and b.scores == result.scores[::-1]


def test_cancelled_stream_raises_instead_of_ending_short(manager):
    import concurrent.futures

    slow = {"response": "1", "ground_truth": "1", "extra_info": {"mode": "sleep", "seconds": 1.0}}
    stream = manager.submit([slow, {"response": "1", "ground_truth": "1"}])
    assert stream.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        list(stream)  # not a quiet, short iteration
    with pytest.raises(concurrent.futures.CancelledError):
        stream.result()
    assert manager.compute([{"response": "1", "ground_truth": "1"}]).scores == [1.0]


def test_worker_that_crashes_once_loses_nothing(manager, tmp_path):
    marker = str(tmp_path / "crashed")
    batch = [{"response": "1", "ground_truth": "1"} for _ in range(8)]
    batch[5]["extra_info"] = {"mode": "crash_once", "marker": marker}
    result = manager.compute(batch)
    assert result.scores == [1.0] * 8 and result.status == ["ok"] * 8
    assert result.metrics["ray/shard_crashes"] >= 1
    assert manager.compute([{"response": "1", "ground_truth": "1"}]).scores == [1.0]  # restarted worker works


def test_sample_that_always_crashes_fails_alone_as_crash(manager):
    batch = [{"response": "1", "ground_truth": "1"} for _ in range(4)]
    batch[1]["extra_info"] = {"mode": "crash"}
    result = manager.compute(batch)
    assert result.status == ["ok", "failed", "ok", "ok"], (result.errors, result.metrics)
    assert result.reasons[1] == "crash" and "died" in result.errors[1]
    assert result.metrics["reward/failed/crash"] == 1


def wait_until_both_workers_serve(manager, timeout_s: float = 60.0) -> None:
    """After crash tests, wait until both (restarted) workers take shards again."""
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        pids = manager.compute(
            [{"response": "1", "ground_truth": "1", "extra_info": {"mode": "pid"}}] * 2
        ).extra["pid"]
        if len(set(pids)) == 2:
            return
        time.sleep(0.2)
    raise AssertionError("the workers did not come back")


def test_killed_worker_mid_batch_shard_rerun_elsewhere(manager, ray_cluster):
    wait_until_both_workers_serve(manager)
    batch = [  # distinct samples (identical ones would be scored once): 4 per worker, 0.25 s each
        {"response": "1", "ground_truth": "1", "extra_info": {"mode": "sleep", "seconds": 0.25, "k": i}}
        for i in range(8)
    ]
    victim = manager.workers[0]
    killer = threading.Timer(0.6, lambda: ray_cluster.kill(victim, no_restart=False))
    killer.start()
    try:
        result = manager.compute(batch)
    finally:
        killer.cancel()
    assert result.scores == [1.0] * 8
    assert result.metrics["ray/shard_crashes"] >= 1


def test_batch_deadline_fails_only_unfinished_samples(manager):
    batch = [{"response": "1", "ground_truth": "1"} for _ in range(3)]
    batch += [
        {"response": "1", "ground_truth": "1", "extra_info": {"mode": "sleep", "seconds": 4 * DEADLINE_S}}
    ] * 3
    start = time.monotonic()
    result = manager.compute(batch, batch_timeout_s=DEADLINE_S)
    elapsed = time.monotonic() - start
    assert result.status == ["ok"] * 3 + ["failed"] * 3
    assert result.reasons[3:] == ["timeout"] * 3 and "deadline" in result.errors[3]
    assert elapsed < 3 * DEADLINE_S  # well before the sleeping samples could finish (4x the deadline)


def test_batch_deadline_keeps_what_a_shard_scored_before_its_hang(manager):
    """An inline worker stops its shard at the deadline itself and sends back what it finished."""
    hang = {"response": "1", "ground_truth": "1", "extra_info": {"mode": "sleep", "seconds": 4 * DEADLINE_S}}
    batch = [{"response": "1", "ground_truth": "1"}, hang, {"response": "1", "ground_truth": "1"}]
    batch.append({"response": "2", "ground_truth": "1"})  # two shards: [ok, hang] and [ok, ok]
    result = manager.compute(batch, batch_timeout_s=DEADLINE_S)
    assert result.status == ["ok", "failed", "ok", "ok"], result.errors
    assert result.scores[0] == 1.0 and result.scores[3] == 0.0
    assert result.reasons[1] == "timeout" and "left running" in result.errors[1]


def test_process_executor_inside_a_worker_kills_hangs_and_contains_crashes(ray_cluster, crf):
    from rewardkit.ray import RewardLoopManager

    config = {"num_workers": 1, "timeout_s": 2.0, "max_retries": 0, "custom_reward_function": crf()}
    batch = [{"response": "1", "ground_truth": "1", "extra_info": {"k": i}} for i in range(4)]
    batch[1]["extra_info"] = {"mode": "crash"}
    batch[2]["extra_info"] = {"mode": "sleep", "seconds": 60}
    with RewardLoopManager(config, worker_num_cpus=0.5, worker_executor="process") as m:
        result = m.compute(batch)
    assert result.status == ["ok", "failed", "failed", "ok"]
    assert result.reasons[1:3] == ["crash", "timeout"]
    assert "ray/shard_crashes" not in result.metrics  # the actor itself never died
