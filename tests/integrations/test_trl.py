"""TRL reward functions: unit behaviour, and a real GRPOTrainer step on CPU with a tiny model."""

from __future__ import annotations

import math
import pickle

import pytest

from rewardkit.integrations.trl import RewardFunction, completion_text, reward_function


def test_string_completions_and_columns(rk_config):
    fn = RewardFunction(rk_config, name="exact")
    metrics, columns = {}, {}
    out = fn(
        prompts=["q1", "q2", "q3", "q4"],
        completions=["42", "41", "FAIL", "ABSTAIN"],
        completion_ids=[[1, 2], [3], [4, 5, 6], [7]],
        ground_truth=["42", "42", "x", "x"],
        data_source=["toy", "toy", "toy", "toy"],
        trainer_state=object(),  # TRL's own kwargs are ignored
        some_dataset_column=["a", "b", "c", "d"],
        log_metric=lambda name, value: metrics.__setitem__(name, value),
        log_extra=lambda column, values: columns.__setitem__(column, values),
    )
    assert metrics["rewardkit/exact/num_failed"] == 1.0 and metrics["rewardkit/exact/num_abstained"] == 1.0
    assert metrics["rewardkit/exact/failed/error"] == 1.0 and metrics["rewardkit/exact/timing/total_s"] >= 0
    assert columns["exact/status"] == ["ok", "ok", "failed", "abstained"]
    assert columns["exact/reason"] == ["", "", "error", ""]
    assert "asked to fail" in columns["exact/error"][2] and columns["exact/error"][0] == ""
    assert columns["exact/acc"] == [True, False, None, None]
    assert {len(v) for v in columns.values()} == {4}
    assert out[:2] == [1.0, 0.0]
    assert out[2] is None and out[3] is None  # failed / abstained: TRL's "no opinion"
    assert fn.last_result.status == ["ok", "ok", "failed", "abstained"]
    assert fn.last_result.extra["ntok"][:2] == [2, 1]  # completion_ids give token counts
    assert fn.__name__ == "exact" and "exact" in repr(fn)


def test_records_map_columns_and_extras(rk_config):
    fn = RewardFunction(rk_config, columns={"ground_truth": "answer"}, data_source="fallback/src")
    recs = fn.records(
        ["p"], ["r"], answer=["7"], extra_info=[{"a": 1}], level=[3], log_metric=print, environments=[None]
    )
    assert recs == [
        {
            "prompt": "p",
            "response": "r",
            "ground_truth": "7",
            "extra_info": {"a": 1, "level": 3},
            "data_source": "fallback/src",
        }
    ]
    with pytest.raises(ValueError, match="unknown sample field"):
        RewardFunction(rk_config, columns={"answer": "x"})
    with pytest.raises(ValueError, match="prompts"):
        fn.records(["p", "q"], ["r"])


def test_conversational_completions(rk_config):
    fn = reward_function(rk_config, name="chat")
    prompts = [[{"role": "user", "content": "6*7?"}]] * 3
    completions = [
        [{"role": "assistant", "content": "42"}],
        [
            {"role": "assistant", "content": "let me use a tool", "tool_calls": []},
            {"role": "tool", "content": "tool says 42"},
            {"role": "assistant", "content": [{"type": "text", "text": "4"}, {"type": "text", "text": "2"}]},
        ],
        [{"role": "assistant", "content": ""}],
    ]
    assert fn(prompts=prompts, completions=completions, ground_truth=["42"] * 3) == [1.0, 1.0, 0.0]
    assert fn.records(prompts, completions)[0]["prompt"] == [{"role": "user", "content": "6*7?"}]


def test_completion_text_edge_cases():
    assert completion_text(None) == ""
    assert completion_text("héllo 🙂") == "héllo 🙂"
    assert completion_text({"role": "assistant", "content": "x"}) == "x"
    assert completion_text([{"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}]) == "a\nb"
    with pytest.raises(TypeError):
        completion_text(3)


def test_pickles_without_its_engine(rk_config):
    fn = RewardFunction(rk_config, name="p")
    assert fn(prompts=["q"], completions=["1"], ground_truth=["1"]) == [1.0]
    engine = fn.engine
    copy = pickle.loads(pickle.dumps(fn))
    assert "_engine" not in vars(copy) and copy.__name__ == "p" and copy.last_result is None
    assert copy(prompts=["q"], completions=["2"], ground_truth=["1"]) == [0.0]
    assert copy.engine is engine  # same config, same process: the shared engine
    fn.close()
    assert fn.engine is not engine  # a new engine after close
    assert fn(prompts=["q"], completions=["1"], ground_truth=["1"]) == [1.0]
    fn.close()


def test_configured_failure_score_replaces_none(rk_config):
    fn = RewardFunction({**rk_config, "failure_score": -1.0}, name="strict")
    out = fn(prompts=["q"] * 3, completions=["1", "FAIL", "ABSTAIN"], ground_truth=["1"] * 3)
    assert out == [1.0, -1.0, None]  # failure_score set: a number; abstain_score unset: no opinion
    assert all(type(x) is float for x in out[:2])
    fn.close()


def test_empty_batch(rk_config):
    assert RewardFunction(rk_config)(prompts=[], completions=[]) == []


@pytest.mark.slow
def test_grpo_trainer_logs_rewardkit_rewards(scorer_path, tmp_path):
    """One real GRPO step on CPU: TRL calls the rewardkit functions and logs their rewards."""
    pytest.importorskip("trl", reason="TRL is not installed (pip install trl)")
    from datasets import Dataset
    from tiny_models import build_tiny_causal_lm, cpu_grpo_config
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    model_dir = build_tiny_causal_lm(tmp_path / "policy")
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    base = {"executor": "inline"}
    length = RewardFunction(
        {**base, "custom_reward_function": {"path": str(scorer_path), "name": "length_score"}},
        name="rk_length",
    )
    broken = RewardFunction(
        {**base, "custom_reward_function": {"path": str(scorer_path), "name": "always_fail"}},
        name="rk_broken",
    )
    dataset = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "ground_truth": str(2 * i)}
            for i in range(4)
        ]
    )
    args = cpu_grpo_config(tmp_path / "out", max_steps=1)
    trainer = GRPOTrainer(
        model=model, reward_funcs=[length, broken], args=args, train_dataset=dataset, processing_class=tok
    )
    trainer.train()

    logs = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert "rewards/rk_length/mean" in logs, sorted(logs)
    expected = length.last_result.scores
    assert len(expected) == 4 and all(0.0 <= s <= 1.0 for s in expected)
    assert logs["rewards/rk_length/mean"] == pytest.approx(sum(expected) / len(expected), abs=1e-5)
    # the always-failing function returned None ("no opinion"), counted in its own metric
    assert broken.last_result.status == ["failed"] * 4
    assert logs["rewardkit/rk_broken/num_failed"] == 4.0
    assert logs["rewardkit/rk_length/num_failed"] == 0.0
    broken_mean = logs["rewards/rk_broken/mean"]
    assert broken_mean is None or math.isnan(broken_mean)  # no score was invented for it
