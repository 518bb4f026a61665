"""End to end through ``rewardkit.RewardEngine``: the judge and the remote RM as the configured reward model."""

from __future__ import annotations

import math

import rewardkit

ROWS = [
    {"prompt": "What is 6*7?", "response": "It is 42.", "ground_truth": "42"},
    {"prompt": "What is 6*7?", "response": "It is 41.", "ground_truth": "42"},
    {"prompt": "What is 2+2?", "response": "4 @@tag=e1;fail=400x9@@", "ground_truth": "4"},
]


def judge_config(server, **rollout):
    return {
        "executor": "inline",
        "reward_model": {
            "enable": True,
            "backend": "generative",
            "rollout": {
                "base_url": server.base_url,
                "model": "judge",
                "template": "correctness",
                "backoff_base_s": 0.005,
                **rollout,
            },
        },
    }


def test_engine_scores_samples_without_data_source_with_the_judge(server):
    with rewardkit.RewardEngine(judge_config(server)) as engine:
        result = engine.compute(ROWS)
        assert result.scores[:2] == [1.0, 0.0] and math.isnan(result.scores[2])
        assert result.status == ["ok", "ok", "failed"]
        assert result.reasons[2] == "http"
        assert result.extra["judge_text"][0].endswith("Answer: yes")
        assert result.components["rm"][:2] == [1.0, 0.0]
        assert result.metrics["rm/requests"] == 3 and result.metrics["reward/failed/http"] == 1
        again = engine.compute(ROWS[:2])  # the engine keeps the backend (and its session) between batches
        assert again.scores == [1.0, 0.0]
        assert engine.backend.http.sessions_created == 1
    assert engine.backend.state == "closed"


async def test_engine_acompute_on_the_callers_loop(server):
    async with rewardkit.RewardEngine(judge_config(server, api="completions")) as engine:
        result = await engine.acompute(ROWS[:2])
        assert result.scores == [1.0, 0.0]
        assert {r["path"] for r in server.requests} == {"/v1/completions"}


def test_engine_with_the_remote_backend(server):
    config = {
        "executor": "inline",
        "reward_model": {
            "enable": True,
            "backend": "remote",
            "weight": 2.0,
            "rollout": {"base_url": server.base_url, "batch_size": 2},
        },
    }
    result = rewardkit.compute(
        [
            {"prompt": "Q: ", "response": "the answer is 7", "ground_truth": "7"},
            {"prompt": "Q: ", "response": "the answer is 8", "ground_truth": "7"},
            {"prompt": "Q: ", "response": "it is 7", "ground_truth": "7"},
        ],
        config,
    )
    assert result.scores == [2.0, 0.0, 2.0]
    assert result.metrics["rm/requests"] == 2
