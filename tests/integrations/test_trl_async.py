"""TRL: async reward functions against a real loopback judge, one shared engine per config, what
reaches TRL's log_metric / log_extra / warnings, and a real 2-step GRPOTrainer run."""

from __future__ import annotations

import asyncio
import logging
import math

import pytest
from backends.judge.judge_server import ScriptedServer

from rewardkit.integrations import trl as rk_trl
from rewardkit.integrations.trl import AsyncRewardFunction, RewardFunction, reward_function


@pytest.fixture(scope="module")
def judge():
    server = ScriptedServer().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _fresh_engines():
    yield
    rk_trl.close_engines()


def judge_config(judge, **extra) -> dict:
    rollout = {"base_url": judge.base_url, "model": "judge", "request_timeout_s": 10.0, **extra}
    return {
        "executor": "inline",
        "reward_model": {"enable": True, "backend": "generative", "rollout": rollout},
    }


def test_trl_sees_the_async_form_as_async(rk_config):
    from trl.trainer.utils import is_async_callable

    assert is_async_callable(AsyncRewardFunction(rk_config))
    assert not is_async_callable(RewardFunction(rk_config))
    assert isinstance(reward_function(rk_config, asynchronous=True), AsyncRewardFunction)


def test_two_async_judge_rewards_wait_for_their_judges_together(judge):
    """Gathered as TRL gathers them, both functions' judge requests are in flight at the same time."""
    judge.reset()
    delay = 0.4
    a = AsyncRewardFunction(judge_config(judge), name="judge_a")
    b = AsyncRewardFunction(judge_config(judge, temperature=0.0), name="judge_b")  # another config
    completions = [f"answer {i} @@delay={delay};tag=t{i}@@" for i in range(2)]

    async def step():
        return await asyncio.gather(
            a(prompts=["q0", "q1"], completions=completions), b(prompts=["q0", "q1"], completions=completions)
        )

    out_a, out_b = asyncio.run(step())
    assert out_a == out_b == [0.7, 0.7]
    assert a.engine is not b.engine
    arrivals = sorted(r["t"] for r in judge.requests if r["path"].endswith("/chat/completions"))
    assert len(arrivals) == 4
    # all four requests arrived before the first could have been answered: they overlapped
    assert arrivals[-1] - arrivals[0] < delay


def test_functions_of_one_config_share_an_engine_and_a_step(scorer_path):
    composite = {
        "executor": "inline",
        "reward_manager": {"name": "composite"},
        "custom_reward_function": {"path": str(scorer_path), "name": "compute_score"},
        "scorers": [
            {"name": "custom_reward_function", "alias": "exact", "weight": 1.0},
            {"name": "boxed_format", "alias": "fmt", "weight": 0.5},
        ],
    }
    total = RewardFunction(composite, name="total")
    exact = RewardFunction(composite, name="exact", component="exact")
    fmt = RewardFunction(composite, name="fmt", component="fmt")
    assert total.engine is exact.engine is fmt.engine

    class State:
        global_step = 3

    boxed = "\\boxed{42}"
    kw = {
        "prompts": ["q", "q"],
        "completions": [boxed, "FAIL"],
        "ground_truth": [boxed, boxed],
        "trainer_state": State(),
    }
    metrics: dict = {}
    columns: dict = {}
    out_total = total(**kw, log_metric=metrics.__setitem__, log_extra=columns.__setitem__)
    out_exact = exact(**kw)
    out_fmt = fmt(**kw)
    assert exact.last_result is total.last_result is fmt.last_result  # scored once for the step
    assert out_exact == [1.0, None] and out_fmt == [1.0, 0.0]
    assert out_total == [1.5, None]  # the failed component fails the total: no invented score
    assert metrics["rewardkit/total/component/exact/mean"] == 1.0
    assert metrics["rewardkit/total/component/fmt/mean"] == 0.5
    assert columns["total/component/exact"] == [1.0, None] and columns["total/component/fmt"] == [1.0, 0.0]
    assert columns["total/reason"] == ["", "component_failed"]
    with pytest.raises(ValueError, match="not in reward.scorers"):
        RewardFunction(composite, component="nope")


def test_failures_are_logged_as_a_warning_with_counts_and_reasons(rk_config, caplog):
    fn = RewardFunction(rk_config, name="warned")
    with caplog.at_level(logging.WARNING, logger="rewardkit.trl"):
        fn(prompts=["q"] * 3, completions=["FAIL", "42", "FAIL"], ground_truth=["42"] * 3)
    (record,) = [r for r in caplog.records if r.name == "rewardkit.trl"]
    msg = record.getMessage()
    assert "'warned': 2 of 3 sample(s) failed (error: 2)" in msg and "asked to fail" in msg
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rewardkit.trl"):
        fn(prompts=["q"], completions=["42"], ground_truth=["42"])
    assert not [r for r in caplog.records if r.name == "rewardkit.trl"]


def test_failure_reasons_keep_being_logged_once_seen(rk_config):
    fn = RewardFunction(rk_config, name="r")
    seen: list[dict] = []
    for completions in (["FAIL"], ["42"]):
        m: dict = {}
        fn(prompts=["q"], completions=completions, ground_truth=["42"], log_metric=m.__setitem__)
        seen.append(m)
    assert seen[0]["rewardkit/r/failed/error"] == 1.0
    assert seen[1]["rewardkit/r/failed/error"] == 0.0  # logged as 0, so TRL's step mean is right


@pytest.mark.slow
def test_grpo_trainer_two_steps_with_failing_and_async_judge_rewards(scorer_path, judge, tmp_path):
    """Two real GRPO steps on CPU: a reward that always fails, an async judge-backed one."""
    from datasets import Dataset
    from tiny_models import build_tiny_causal_lm, cpu_grpo_config
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    judge.reset()
    model_dir = build_tiny_causal_lm(tmp_path / "policy")
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    broken = RewardFunction(
        {"executor": "inline", "custom_reward_function": {"path": str(scorer_path), "name": "always_fail"}},
        name="rk_broken",
    )
    judged = AsyncRewardFunction(judge_config(judge), name="rk_judge")
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}]} for i in range(4)]
    )
    args = cpu_grpo_config(tmp_path / "out", max_steps=2, log_completions=True)
    trainer = GRPOTrainer(
        model=model, reward_funcs=[broken, judged], args=args, train_dataset=dataset, processing_class=tok
    )
    assert trainer._has_async_funcs  # TRL took the async path for the judge
    trainer.train()

    steps = [e for e in trainer.state.log_history if "rewards/rk_judge/mean" in e]
    assert len(steps) == 2
    for entry in steps:
        assert entry["rewards/rk_judge/mean"] == pytest.approx(0.7)
        assert entry["rewardkit/rk_broken/num_failed"] == 4.0
        assert entry["rewardkit/rk_broken/failed/error"] == 4.0
        assert entry["rewardkit/rk_judge/num_failed"] == 0.0
        assert entry["rewardkit/rk_judge/rm/latency/p50_s"] >= 0.0  # judge latency reached TRL's logs
        broken_mean = entry["rewards/rk_broken/mean"]
        assert broken_mean is None or math.isnan(broken_mean)
    chat = [r for r in judge.requests if r["path"].endswith("/chat/completions")]
    assert len(chat) >= 2  # the judge was really asked (identical completions are deduplicated)
    extra = trainer._logs["extra"]  # the completions table's extra columns, from log_extra
    assert list(extra["rk_broken/status"])[-4:] == ["failed"] * 4
    assert "this scorer always fails" in list(extra["rk_broken/error"])[-1]
    assert list(extra["rk_judge/status"])[-4:] == ["ok"] * 4
