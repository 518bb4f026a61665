"""The composite manager: weighted components, abstention, weight 0, failures, config errors, dedup."""

from __future__ import annotations

import math

import pytest

from rewardkit.errors import ConfigError, UnknownNameError


def composite(*scorers, **extra):
    return {"reward_manager": {"name": "composite"}, "scorers": list(scorers), **extra}


def test_weighted_sum_and_components(engine):
    cfg = composite({"name": "t_exact", "weight": 1.0}, {"name": "t_has_x", "weight": 0.5, "alias": "x"})
    samples = [
        {"response": "x", "ground_truth": "x", "data_source": "a"},
        {"response": "x", "ground_truth": "y", "data_source": "a"},
        {"response": "z", "ground_truth": "z", "data_source": "b"},
        {"response": "z", "ground_truth": "q", "data_source": "b"},
    ]
    result = engine(cfg).compute(samples)
    assert result.scores == pytest.approx([1.5, 0.5, 1.0, 0.0])
    assert result.components == {"t_exact": [1.0, 0.0, 1.0, 0.0], "x": [1.0, 1.0, 0.0, 0.0]}
    assert result.metrics["reward/component/t_exact/mean"] == pytest.approx(0.5)
    assert result.metrics["reward/component/x/mean"] == pytest.approx(0.5)
    assert result.metrics["reward/a/mean"] == pytest.approx(1.0)
    # each component is also logged per data source
    assert result.metrics["reward/a/component/t_exact/mean"] == pytest.approx(0.5)
    assert result.metrics["reward/a/component/x/mean"] == pytest.approx(1.0)
    assert result.metrics["reward/b/component/x/mean"] == pytest.approx(0.0)


def test_abstaining_component_is_left_out_not_zero(engine):
    cfg = composite({"name": "t_abstain", "weight": 1.0}, {"name": "t_half", "weight": 2.0})
    result = engine(cfg).compute([{"response": ""}, {"response": "a"}])
    assert result.scores == pytest.approx([1.0, 3.0])
    assert result.components["t_abstain"] == [None, 2.0]
    alone = engine(composite({"name": "t_abstain"})).compute([{"response": ""}])
    assert alone.status == ["abstained"]


def test_weight_zero_component_is_a_metric_only(engine):
    cfg = composite({"name": "t_half", "weight": 1.0}, {"name": "t_has_x", "weight": 0.0})
    result = engine(cfg).compute([{"response": "x"}, {"response": "y"}])
    assert result.scores == pytest.approx([0.5, 0.5])
    assert result.components["t_has_x"] == [1.0, 0.0]
    assert result.metrics["reward/component/t_has_x/mean"] == pytest.approx(0.5)
    only_zero = engine(composite({"name": "t_half", "weight": 0.0})).compute([{"response": "a"}])
    assert only_zero.status == ["abstained"]


def test_a_failed_component_fails_the_sample(engine):
    cfg = composite({"name": "t_half"}, {"name": "t_fail", "alias": "guard"})
    result = engine(cfg).compute([{"response": "bad"}, {"response": "fine"}])
    assert result.status == ["failed", "ok"]
    assert result.reasons[0] == "component_failed" and "guard" in result.errors[0]
    assert "bad response" in result.errors[0]
    assert math.isnan(result.scores[0]) and result.scores[1] == pytest.approx(1.5)
    assert result.components["t_half"] == [0.5, 0.5]
    single = engine(composite({"name": "t_fail"})).compute([{"response": "bad"}])
    assert single.reasons == ["error"]  # a single component keeps its own reason


def test_empty_scorers_use_the_routed_scorer(engine, crf):
    routed = engine({"reward_manager": {"name": "composite"}}).compute(
        [{"response": "x", "data_source": "ds_t_has_x"}, {"response": "a", "data_source": "ds_t_half"}]
    )
    assert routed.scores == [1.0, 0.5]
    assert routed.components == {"t_has_x": [1.0, None], "t_half": [None, 0.5]}
    custom = engine({"reward_manager": {"name": "composite"}, "custom_reward_function": crf("exact")})
    assert custom.compute([{"response": "1", "ground_truth": "1"}]).components == {"exact": [1.0]}


def test_custom_function_as_a_named_component(engine, crf):
    cfg = composite(
        {"name": "custom_reward_function", "alias": "correct"},
        {"name": "t_has_x", "weight": 0.1},
        custom_reward_function=crf("exact"),
    )
    result = engine(cfg).compute([{"response": "x", "ground_truth": "x"}])
    assert result.scores == pytest.approx([1.1])
    assert result.components == {"correct": [1.0], "t_has_x": [1.0]}


def test_scorer_kwargs_are_passed(engine):
    cfg = composite({"name": "regex_format", "kwargs": {"pattern": "a+"}}, {"name": "t_half", "weight": 0.0})
    assert engine(cfg).compute([{"response": "aaa"}, {"response": "ab"}]).scores == [1.0, 0.0]


@pytest.mark.parametrize(
    ("cfg", "error", "message"),
    [
        (composite({"name": "t_half"}, {"name": "t_half"}), ConfigError, "used twice"),
        (composite({"name": "t_halff"}), UnknownNameError, "Did you mean 't_half'"),
        (
            composite({"name": "custom_reward_function"}),
            ConfigError,
            "custom_reward_function.path is not set",
        ),
        (composite({"name": "t_batch"}), ConfigError, "batch scorer"),
        (composite({"name": "t_half", "kwargs": {"nope": 1}}), ConfigError, "does not accept"),
        (
            {"reward_manager": {"name": "composite", "kwargs": {"weights": [1]}}},
            ConfigError,
            "takes no options",
        ),
    ],
)
def test_config_errors(engine, cfg, error, message):
    with pytest.raises(error) as e:
        engine(cfg).manager  # noqa: B018 - built on first use
    assert message in str(e.value)


def test_aliases_allow_one_scorer_twice(engine):
    cfg = composite({"name": "t_half"}, {"name": "t_half", "alias": "again", "weight": 2.0})
    assert engine(cfg).compute([{"response": "a"}]).scores == pytest.approx([1.5])


def test_empty_batch(engine):
    assert engine(composite({"name": "t_half"})).compute([]).scores == []


def test_dedup_and_process_workers(engine, tmp_path):
    log = tmp_path / "calls.txt"
    cfg = composite(
        {"name": "t_record"}, {"name": "t_half", "weight": 0.0}, executor="process", num_workers=2
    )
    samples = [
        {
            "prompt": f"p{i // 8}",
            "response": f"r{i % 3}",
            "ground_truth": "r0",
            "extra_info": {"log": str(log)},
        }
        for i in range(32)
    ]
    result = engine(cfg).compute(samples)
    lines = log.read_text().splitlines()
    assert len(lines) == 3  # identical (response, ground_truth, extra_info) scored once
    assert result.scores == [1.0 if i % 3 == 0 else 0.0 for i in range(32)]
    assert result.components["t_half"] == [0.5] * 32


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), -float("inf"), 1e308, -1e7])
def test_non_finite_or_huge_weights_are_config_errors(engine, weight):
    with pytest.raises(ConfigError, match="weight must be a finite number"):
        engine(composite({"name": "t_half", "weight": weight}))
    with pytest.raises(ConfigError, match="weight must be a finite number"):
        engine({"scorers": {"t_half": weight}})  # the {name: weight} shorthand too


def test_a_sum_that_overflows_is_a_failed_sample_not_ok_inf(engine, tmp_path):
    """Each component is finite (1e308) but their sum is inf: the sample fails, naming the parts."""
    path = tmp_path / "huge.py"
    path.write_text("def compute_score(response):\n    return 1e308 if response == 'big' else 1.0\n")
    cfg = composite(
        {"name": "custom_reward_function", "alias": "a"},
        {"name": "custom_reward_function", "alias": "b"},
        custom_reward_function={"path": str(path)},
    )
    result = engine(cfg).compute([{"response": "big"}, {"response": "small"}])
    assert result.status == ["failed", "ok"]
    assert (
        result.reasons[0] == "invalid_total"
        and "inf" in result.errors[0]
        and "a=1*1e+308" in result.errors[0]
    )
    assert result.scores[1] == 2.0 and not math.isfinite(result.scores[0])
