"""Served reward models on Ray: server replicas as actors holding logical-GPU bundles of a placement
group, standalone and colocated on a trainer's group; routing, wake/sleep fan-out, restart, shutdown.

The stand-in vLLM server (tests/serving/standin_server.py) is launched through the real launcher
as ``engine: vllm`` with a ``command`` override.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serving"))
from standin_helpers import gone, standin_server, stats, wait_for  # noqa: E402

from rewardkit.ray import RewardLoopManager  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SAMPLES = [{"prompt": f"q{i}", "response": f"answer {i} ✓"} for i in range(8)]


def config(server: dict, **rollout) -> dict:
    return {
        "num_workers": 1,
        "executor": "inline",
        "reward_model": {
            "enable": True,
            "backend": "served-classifier",
            "server": server,
            "rollout": {"max_batch_size": 1, "max_concurrency": 4, **rollout},
        },
    }


def test_standalone_replicas_hold_their_own_gpu_bundles(ray_cluster):
    server = standin_server(replicas=2, gpus_per_replica=1, placement="standalone")
    manager = RewardLoopManager(config(server))
    try:
        group = manager.servers
        res = ray_cluster.get([a.resources.remote() for a in group.actors])
        gpus = [tuple(r["accelerator_ids"]["GPU"]) for r in res]
        assert len(set(gpus)) == 2 and all(len(g) == 1 for g in gpus)  # one logical GPU each
        assert {r["placement_group"] for r in res} == {group.placement_group.id.hex()}
        seen = [stats(u) for u in group.urls]
        assert sorted(s["cuda_visible_devices"] for s in seen) == sorted(g[0] for g in gpus)
        assert not group.asleep
        result = manager.compute(SAMPLES)
        assert [s.status for s in result.samples] == ["ok"] * len(SAMPLES)
        counts = [stats(u)["events"].count("classify") for u in group.urls]
        assert sum(counts) == len(SAMPLES) and min(counts) >= 1, counts  # routed over both
        pids = group.pids
    finally:
        manager.close()
    assert all(gone(p) for p in pids)
    assert wait_for(lambda: ray_cluster.available_resources().get("GPU", 0) == 2, timeout=30)


def test_colocated_on_the_trainers_placement_group_with_wake_sleep_and_restart(ray_cluster):
    from ray.util.placement_group import placement_group, remove_placement_group

    trainer_pg = placement_group([{"GPU": 1}, {"GPU": 1}])
    assert trainer_pg.wait(60)
    server = standin_server(replicas=2, gpus_per_replica=1, placement="colocated")
    try:
        manager = RewardLoopManager(config(server), placement_group=trainer_pg, bundle_indices=[1, 0])
        try:
            group = manager.servers
            res = ray_cluster.get([a.resources.remote() for a in group.actors])
            assert {r["placement_group"] for r in res} == {trainer_pg.id.hex()}
            assert group.asleep  # colocated: the trainer has the GPUs until a batch
            result = manager.compute(SAMPLES[:4])
            assert [s.status for s in result.samples] == ["ok"] * 4
            assert {"rm/server/wake_up_s/r0", "rm/server/wake_up_s/r1"} <= set(result.metrics)
            for url in group.urls:  # asleep, woken for the batch, asleep again: at every replica
                ev = stats(url)["events"]
                assert ev[:2] == ["sleep:1", "wake_up"] and ev[-1] == "sleep:1"
            assert len(manager.wake_up()) == 2 and not group.asleep
            assert all(stats(u)["events"][-1] == "wake_up" for u in group.urls)
            assert len(manager.sleep()) == 2 and group.asleep

            old = group.pids[0]
            os.killpg(old, signal.SIGKILL)  # the server process dies; its actor restarts it
            assert wait_for(lambda: group.restarts() == 1, timeout=90)
            assert group.pids[0] != old and stats(group.urls[0])["events"] == ["sleep:1"]
            assert [s.status for s in manager.compute(SAMPLES[:2]).samples] == ["ok", "ok"]
            pids = group.pids
        finally:
            manager.close()
        # the killed server's own child is re-parented to init, which reaps it in its own time
        assert wait_for(lambda: gone(old) and all(gone(p) for p in pids), timeout=10)
    finally:
        remove_placement_group(trainer_pg)
