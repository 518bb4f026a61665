"""Served reward models through RewardEngine: routing, wake/sleep around batches, asleep policy, shutdown."""

from __future__ import annotations

import os
import signal
import warnings

import pytest
from standin_helpers import gone, standin_server, stats, wait_for
from standin_server import score_of

from rewardkit import RewardEngine
from rewardkit.serving.group import ServersAsleepError


def engine_config(server: dict, backend: str = "served-classifier", **rollout) -> dict:
    return {
        "executor": "inline",
        "reward_model": {"enable": True, "backend": backend, "server": server, "rollout": rollout},
    }


def test_served_classifier_routes_over_every_replica_with_token_budget_batching(samples):
    cfg = engine_config(
        standin_server(replicas=2, placement="standalone"), max_batch_size=2, max_concurrency=2
    )
    with RewardEngine(cfg) as engine:
        result = engine.compute(samples)
        urls, pids = engine.servers.urls, engine.servers.pids
        seen = [stats(u)["events"].count("classify") for u in urls]
    assert len(result.scores) == len(samples)
    assert [r.status for r in result.samples] == ["ok"] * len(samples)
    expected = [score_of(s["prompt"] + s["response"]) for s in samples]
    assert result.scores == pytest.approx(expected)
    assert sum(seen) == 6 and min(seen) >= 1, seen  # 12 samples, 2 per request, both replicas used
    assert result.samples[0].extra["num_tokens"] >= 1 and result.samples[0].extra["truncated"] is False
    assert all(gone(p) for p in pids)


def test_colocated_servers_are_woken_for_a_batch_and_put_back_to_sleep(samples):
    with RewardEngine(
        engine_config(standin_server(replicas=2), max_batch_size=1, max_concurrency=2)
    ) as engine:
        result = engine.compute(samples[:4])
        assert engine.servers.asleep
        events = [stats(u)["events"] for u in engine.servers.urls]
    assert result.metrics["rm/server/replicas"] == 2.0
    assert {"rm/server/wake_up_s/r0", "rm/server/wake_up_s/r1", "rm/server/sleep_s/r1"} <= set(result.metrics)
    for ev in events:  # start asleep, woken, scored, asleep again: at every replica
        assert ev[:2] == ["sleep:1", "wake_up"] and ev[-1] == "sleep:1" and "classify" in ev


def test_explicit_wake_up_keeps_servers_awake_across_batches(samples):
    with RewardEngine(engine_config(standin_server(replicas=2))) as engine:
        _ = engine.backend  # starts the servers (asleep: colocated)
        timings = engine.wake_up()
        assert set(timings) == {"r0", "r1"}
        engine.compute(samples[:2])
        engine.compute(samples[2:4])
        assert not engine.servers.asleep
        events = [stats(u)["events"] for u in engine.servers.urls]
        assert engine.sleep().keys() == {"r0", "r1"}
    for ev in events:
        assert ev.count("wake_up") == 1 and ev.count("sleep:1") == 1


def test_scoring_while_asleep_fails_clearly_when_configured(samples):
    with RewardEngine(engine_config(standin_server(when_asleep="fail"))) as engine:
        with pytest.raises(ServersAsleepError, match="call wake_up"):
            engine.compute(samples[:2])
        assert stats(engine.servers.urls[0])["requests"] == 0  # nothing reached the sleeping server
        engine.wake_up()
        assert [r.status for r in engine.compute(samples[:2]).samples] == ["ok", "ok"]


def test_empty_batch_does_not_wake_the_servers():
    with RewardEngine(engine_config(standin_server())) as engine:
        _ = engine.backend
        assert engine.compute([]).scores == []
        assert stats(engine.servers.urls[0])["events"] == ["sleep:1"]


def test_a_dead_replica_is_routed_around_and_restarted(samples):
    server = standin_server(replicas=2, placement="standalone", health_interval_s=5.0)
    with RewardEngine(engine_config(server, max_batch_size=1, down_s=30)) as engine:
        _ = engine.backend
        group = engine.servers
        dead = group.pids[1]
        os.killpg(dead, signal.SIGKILL)
        assert wait_for(lambda: not group.replicas[1].alive(), timeout=10)
        result = engine.compute(samples[:6])  # before the monitor restarts it
        assert [r.status for r in result.samples] == ["ok"] * 6
        assert result.metrics["rm/retries"] >= 1
        assert wait_for(lambda: group.restarts() == 1, timeout=60)
        assert group.replicas[1].healthy()
    # the killed server's own child is re-parented to init, which reaps it in its own time
    assert wait_for(lambda: gone(dead) and all(gone(p) for p in group.pids), timeout=10)


def test_a_crashing_server_fails_its_samples_typed_never_silently(samples):
    server = standin_server(flags="--crash-after 1", placement="standalone", max_restarts=0)
    with RewardEngine(engine_config(server, max_retries=1, down_s=0)) as engine:
        result = engine.compute(samples[:3])
    assert len(result.samples) == 3
    assert {r.status for r in result.samples} == {"failed"}
    assert {r.reason for r in result.samples} == {"http"}


def test_generative_judge_uses_the_launched_replicas(samples):
    cfg = engine_config(
        standin_server(replicas=2, placement="standalone"), backend="generative", template="rubric"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with RewardEngine(cfg) as engine:
            result = engine.compute(samples[:6])
            chats = [stats(u)["events"].count("chat") for u in engine.servers.urls]
    assert [r.status for r in result.samples] == ["ok"] * 6
    assert min(chats) >= 1, chats  # the judge routes across the list
    assert not any("only the first replica" in str(w.message) for w in caught)


def test_base_url_next_to_server_is_a_config_error():
    from rewardkit.errors import ConfigError

    cfg = engine_config(standin_server(), base_url="http://127.0.0.1:1")
    with RewardEngine(cfg) as engine, pytest.raises(ConfigError, match="remove rollout.base_url"):
        _ = engine.backend


def test_server_with_the_in_process_discriminative_backend_is_a_config_error():
    from rewardkit.errors import ConfigError

    with RewardEngine(engine_config(standin_server(), backend="discriminative")) as engine:
        with pytest.raises(ConfigError, match="use backend: served-classifier"):
            _ = engine.backend
        assert engine.servers is None  # refused before anything was launched
