"""Pieces of the Ray layer that run without a Ray cluster: sharding, typed errors, the limiter, the worker."""

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rewardkit.errors import ConfigError, SampleError, UnknownNameError
from rewardkit.ray.limiter import JudgeLimiter, get_limiter, judge_slot
from rewardkit.ray.runtime import PackedError, RemoteTraceback, pack_error
from rewardkit.ray.sharding import Shard, split_contiguous
from rewardkit.ray.worker import RewardLoopWorker


@given(st.integers(0, 300), st.integers(1, 40))
def test_split_contiguous_covers_in_order_without_padding(n, parts):
    shards = split_contiguous(n, parts)
    assert len(shards) == min(n, parts)
    covered = [i for s in shards for i in range(s.start, s.stop)]
    assert covered == list(range(n))  # contiguous, in order, each index once: no duplicates, no padding
    sizes = [len(s) for s in shards]
    if sizes:
        assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_split_edge_cases():
    assert split_contiguous(0, 4) == []
    assert split_contiguous(1, 4) == [Shard(0, 1)]
    assert [len(s) for s in split_contiguous(7, 2)] == [4, 3]
    assert Shard(3, 8, 1).halves() == (Shard(3, 5, 1), Shard(5, 8, 1))
    with pytest.raises(ValueError):
        split_contiguous(3, 0)


def test_packed_errors_keep_type_and_shift_sample_index():
    try:
        raise SampleError(2, "data_source", "missing")
    except SampleError as e:
        packed = pack_error(e)
    back = pickle.loads(pickle.dumps(packed)).unpack(index_offset=10)
    assert type(back) is SampleError
    assert back.index == 12 and back.field == "data_source"
    assert str(back).startswith("sample 12, field 'data_source'")
    assert isinstance(back.__cause__, RemoteTraceback) and "missing" in str(back.__cause__)

    unknown = pack_error(UnknownNameError("scorer", "gsm8kk", ["gsm8k"])).unpack()
    assert type(unknown) is UnknownNameError and "Did you mean 'gsm8k'" in str(unknown)
    assert isinstance(pack_error(ConfigError("bad")).unpack(), ConfigError)
    gone = PackedError("no_such_module_xyz:Boom", "it broke").unpack()
    assert type(gone) is RuntimeError and "it broke" in str(gone)


async def test_limiter_caps_concurrency_and_frees_dead_holders():
    lim = JudgeLimiter(max_concurrency=2)
    in_flight = peak = 0

    async def one(holder):
        nonlocal in_flight, peak
        lease = await lim.acquire(holder)
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        await lim.release(lease)

    await asyncio.gather(*(one(f"w{i % 3}") for i in range(12)))
    assert peak == 2 and lim.stats()["acquired"] == 12 and lim.stats()["in_use"] == 0

    # a worker that died holding both slots: its restarted incarnation frees them
    await lim.acquire("dead"), await lim.acquire("dead")
    waiter = asyncio.ensure_future(lim.acquire("alive"))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    assert await lim.release_holder("dead") == 2
    assert await asyncio.wait_for(waiter, 2) > 0


async def test_limiter_token_bucket_paces_requests():
    now = [0.0]
    slept: list[float] = []
    lim = JudgeLimiter(max_concurrency=100, rate_per_s=10.0, burst=2.0, clock=lambda: now[0])

    real_sleep = asyncio.sleep

    async def fake_sleep(s):
        slept.append(s)
        now[0] += s
        await real_sleep(0)

    asyncio.sleep, saved = fake_sleep, asyncio.sleep
    try:
        for _ in range(6):
            await lim.take(1)
    finally:
        asyncio.sleep = saved
    # 2 from the burst, then 4 more at 10/s: 0.4 s of simulated waiting
    assert sum(slept) == pytest.approx(0.4, abs=1e-6)
    with pytest.raises(ValueError):
        await lim.take(5)


async def test_judge_slot_without_limiter_is_a_noop():
    assert get_limiter() is None
    async with judge_slot() as slot:
        assert slot._lease is None
    with judge_slot() as slot:
        assert slot._lease is None
    # ... and costs no import of Ray (a fresh interpreter: this one has Ray loaded already)
    code = (
        "import asyncio, sys\n"
        "from rewardkit.backends import http\n"
        "from rewardkit.runtime.budget import judge_slot\n"
        "async def main():\n"
        "    async with judge_slot():\n"
        "        pass\n"
        "asyncio.run(main())\n"
        "with judge_slot():\n"
        "    pass\n"
        "print('ray' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


async def test_worker_in_process_scores_and_packs_errors(crf):
    worker = RewardLoopWorker({"custom_reward_function": crf()})
    from rewardkit.batch import to_samples

    reply = await worker.compute(
        to_samples([{"response": "1", "ground_truth": "1"}, {"response": "", "ground_truth": "1"}])
    )
    assert reply.error is None and [r.score for r in reply.results] == [1.0, 0.0]
    lenient = RewardLoopWorker({})  # no scorer for this data source: that sample fails alone
    reply = await lenient.compute(to_samples([{"response": "x", "data_source": "nope/nothing"}]))
    assert reply.error is None and [(r.status, r.reason) for r in reply.results] == [("failed", "unroutable")]
    assert reply.results[0].error.startswith("field 'data_source': unknown data source 'nope/nothing'")
    lenient.close()
    bad = RewardLoopWorker({"strict_routing": True})  # strict: the engine raises SampleError
    reply = await bad.compute(to_samples([{"response": "x", "data_source": "nope/nothing"}]))
    assert reply.results == [] and reply.error is not None
    err = reply.error.unpack(index_offset=5)
    assert isinstance(err, SampleError) and err.index == 5 and "nope/nothing" in str(err)
    worker.close()
    bad.close()


def test_model_placement_from_config():
    from rewardkit.config import load_config
    from rewardkit.errors import ConfigError
    from rewardkit.ray.model_actor import ModelPlacement

    def place(rm, **kw):
        return ModelPlacement.from_config(load_config({"reward_model": rm}), **kw)

    assert place({"enable": False, "n_gpus_per_node": 8}) is None
    assert place({"enable": True, "backend": "generative"}) is None  # an HTTP judge runs inside the workers
    p = place({"enable": True, "n_gpus_per_node": 4, "nnodes": 2})
    assert (p.replicas, p.num_gpus, p.colocated) == (8, 1.0, False)
    p = place({"enable": True, "rollout": {"ray": {"replicas": 3, "num_gpus": 0.25, "layout": "colocated"}}})
    assert (p.replicas, p.num_gpus, p.colocated) == (3, 0.25, True)
    p = place({"enable": True, "rollout": {"replicas": 2, "num_gpus": 0.5, "ray": {"replicas": 4}}})
    assert (p.replicas, p.num_gpus, p.colocated) == (4, 0.5, False)  # flat keys work; rollout.ray wins
    p = place({"enable": True, "rollout": {"ray": {"num_gpus": 0.5}}}, colocated=True)
    assert (p.replicas, p.num_gpus, p.colocated) == (1, 0.5, True)
    with pytest.raises(ConfigError, match="replicaz"):
        place({"enable": True, "rollout": {"ray": {"replicaz": 2}}})
