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


def test_rewardkit_score_rescores_stored_rollouts_from_the_cache(server, tmp_path):
    """``rewardkit score`` twice over the same rollouts: the second run asks the judge nothing."""
    import json

    import yaml
    from click.testing import CliRunner

    from rewardkit.cli import cli

    rollouts = tmp_path / "rollouts.jsonl"
    rows = [*ROWS[:2], {"prompt": "名前?", "response": "答え 42 ✓", "ground_truth": "42"}]
    rollouts.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    config = judge_config(server, cache_path=str(tmp_path / "judge.sqlite"))
    config_path = tmp_path / "reward.yaml"
    config_path.write_text(yaml.safe_dump({"reward": config}), encoding="utf-8")
    outputs = []
    for run in (1, 2):
        out = tmp_path / f"scored{run}.jsonl"
        res = CliRunner().invoke(
            cli, ["score", str(rollouts), "-c", str(config_path), "-o", str(out), "--no-progress"]
        )
        assert res.exit_code == 0, res.output
        outputs.append([json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()])
        assert len(server.requests) == 3, f"run {run} sent {len(server.requests)} requests in all"
    assert [r["score"] for r in outputs[0]] == [r["score"] for r in outputs[1]] == [1.0, 0.0, 1.0]
    assert [r["extra"]["cached"] for r in outputs[1]] == [True] * 3
