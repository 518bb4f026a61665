"""Reward models as Ray actors: num_gpus per replica, standalone and colocated layouts, wake/sleep
fanned out to every replica in the right order, load balancing across replicas."""

from __future__ import annotations

import re
import time

import pytest

TEST_BACKEND = "rk-test-length"  # registered by tests/ray/_plugin through a real entry point (see conftest)

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def rm_config(**rollout) -> dict:
    return {
        "num_workers": 1,  # one worker still splits its batch over both replicas
        "reward_model": {
            "enable": True,
            "backend": TEST_BACKEND,
            "rollout": {"ray": rollout} if rollout else {},
            "kwargs": {"delay": 0.05},
        },
    }


def batch(n: int) -> list[dict]:
    return [{"response": "x" * (i + 1), "prompt": "p"} for i in range(n)]


def test_standalone_replicas_get_their_gpus_and_stay_awake(ray_cluster, test_backend):
    from rewardkit.ray import RewardLoopManager

    with RewardLoopManager(rm_config(replicas=2, num_gpus=0.5), worker_num_cpus=0.5) as m:
        assert len(m.model_replicas) == 2 and not m.colocated
        res = ray_cluster.get([r.resources.remote() for r in m.model_replicas])
        assert [r["assigned"].get("GPU") for r in res] == [0.5, 0.5]
        assert all(r["placement_group"] is None for r in res)
        result = m.compute(batch(8))
        assert result.scores == [
            float(i + 1) for i in range(8)
        ]  # the RM alone scores: length of the response
        assert result.components["rm"] == result.scores
        # both replicas took work (the batch is split over the replicas, least-loaded first)
        assert len(set(result.extra["rm_pid"])) == 2
        histories = ray_cluster.get([r.history.remote() for r in m.model_replicas])
        for h in histories:
            assert h[0] == "load" and "sleep" not in h and h.count("score") >= 1
        # a replica gone for good: its chunks go to the other replica, nothing is lost
        ray_cluster.kill(m.model_replicas[0], no_restart=True)
        again = m.compute(batch(5))
        assert again.scores == [float(i + 1) for i in range(5)]
        assert len(set(again.extra["rm_pid"])) == 1


def test_colocated_replicas_wake_before_and_sleep_after_every_batch(ray_cluster, test_backend):
    from ray.util.placement_group import placement_group, remove_placement_group

    from rewardkit.ray import RewardLoopManager

    # the trainer's placement group: one GPU per bundle; each RM replica takes half of one bundle's GPU
    pg = placement_group([{"GPU": 1, "CPU": 0.01}] * 2)
    ray_cluster.get(pg.ready(), timeout=60)
    try:
        with RewardLoopManager(
            rm_config(),
            worker_num_cpus=0.5,
            placement_group=pg,
            bundle_indices=[0, 1],
            model_replicas=2,
            model_num_gpus=0.5,
        ) as m:
            assert m.colocated
            res = ray_cluster.get([r.resources.remote() for r in m.model_replicas])
            assert [r["assigned"].get("GPU") for r in res] == [0.5, 0.5]
            assert {r["placement_group"] for r in res} == {pg.id.hex()}
            assert ray_cluster.get([r.state.remote() for r in m.model_replicas]) == ["asleep", "asleep"]

            for n in (6, 3):
                assert m.compute(batch(n)).scores == [float(i + 1) for i in range(n)]
            assert m.compute([]).scores == []  # an empty batch neither wakes nor scores
            # two batches in flight at once share one wake-up
            s1, s2 = m.submit(batch(4)), m.submit(batch(5))
            assert s1.result().scores == [1.0, 2.0, 3.0, 4.0] and len(s2.result()) == 5
            for h in ray_cluster.get([r.history.remote() for r in m.model_replicas]):
                assert h[:2] == ["load", "sleep"]
                cycles = "".join({"wake_up": "W", "score": "S", "sleep": "Z"}[e] for e in h[2:])
                # per batch: woken, scored (each replica took a chunk or more), put back to sleep
                assert re.sub("S+", "S", cycles) == "WSZWSZWSZ", h

            assert m.wake_up() == ["awake", "awake"]  # explicit fan-out, e.g. by a trainer
            assert m.sleep() == ["asleep", "asleep"]

            # A batch cut off by its deadline: Ray cancels the call, but the replica still computing
            # is not offloaded mid-score; it goes to sleep as soon as that score finishes.
            cut = m.compute([{"response": "xyz", "extra_info": {"rm_delay": 3.0}}], batch_timeout_s=0.5)
            assert cut.reasons == ["timeout"]
            states = ray_cluster.get([r.state.remote() for r in m.model_replicas])
            assert sorted(states) == ["asleep", "awake"]
            give_up = time.monotonic() + 30
            while "awake" in states and time.monotonic() < give_up:
                time.sleep(0.1)
                states = ray_cluster.get([r.state.remote() for r in m.model_replicas])
            assert states == ["asleep", "asleep"]
            tails = sorted(
                tuple(h[-2:]) for h in ray_cluster.get([r.history.remote() for r in m.model_replicas])
            )
            assert tails == [("score", "sleep"), ("wake_up", "sleep")]  # the busy one slept after its score
    finally:
        remove_placement_group(pg)


def test_model_without_gpus_runs_inside_each_worker_with_a_shared_budget(ray_cluster, test_backend):
    from rewardkit.ray import RewardLoopManager

    config = rm_config()
    config["num_workers"] = 2
    with RewardLoopManager(config, worker_num_cpus=0.5) as m:
        assert (
            m.model_replicas == [] and m.limiter is not None
        )  # an HTTP-style backend: judged in the workers
        result = m.compute(batch(6))
        assert result.scores == [float(i + 1) for i in range(6)]
        worker_pids = set(ray_cluster.get([w.ping.remote() for w in m.workers]))
        assert set(result.extra["rm_pid"]) == worker_pids
