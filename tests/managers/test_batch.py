"""The batch manager: one call for the whole batch, wrong lengths, config errors, worker deadlines."""

from __future__ import annotations

import pytest

from rewardkit.errors import ConfigError


def batch(crf=None, name="batch_exact", **kwargs):
    cfg = {"reward_manager": {"name": "batch", "kwargs": kwargs}}
    if crf is not None:
        cfg["custom_reward_function"] = crf(name)
    return cfg


def test_custom_batch_function_is_called_once(engine, crf, tmp_path):
    log = tmp_path / "calls.txt"
    samples = [
        {"response": str(i % 2), "ground_truth": "1", "extra_info": {"log": str(log)}} for i in range(6)
    ]
    result = engine(batch(crf)).compute(samples)
    assert result.scores == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert log.read_text().split() == ["6"]  # one call, every sample (no dedup by default)


def test_dedup_option_sends_each_distinct_sample_once(engine, crf, tmp_path):
    log = tmp_path / "calls.txt"
    samples = [
        {"response": str(i % 2), "ground_truth": "1", "extra_info": {"log": str(log)}} for i in range(6)
    ]
    result = engine(batch(crf, dedup=True)).compute(samples)
    assert result.scores == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert log.read_text().split() == ["2"]


def test_registered_batch_scorer_by_name(engine):
    result = engine(batch(scorer="t_batch")).compute(
        [{"response": "a", "ground_truth": "a"}, {"response": "b"}]
    )
    assert result.scores == [1.0, 0.0]


def test_wrong_length_fails_every_sample(engine, crf):
    result = engine(batch(crf, "batch_wrong_length")).compute([{"response": "a"}, {"response": "b"}])
    assert result.status == ["failed", "failed"] and set(result.reasons) == {"invalid_return"}


def test_in_a_worker_process_with_a_deadline(engine, crf):
    cfg = {**batch(crf, "batch_hang"), "executor": "process", "timeout_s": 1.0, "num_workers": 1}
    result = engine(cfg).compute([{"response": "a"}, {"response": "b"}])
    assert set(result.reasons) == {"timeout"}
    ok = engine({**batch(crf), "executor": "process", "num_workers": 1}).compute(
        [{"response": "a", "ground_truth": "a"}, {"response": "b", "ground_truth": "c"}]
    )
    assert ok.scores == [1.0, 0.0]


def test_empty_batch(engine, crf):
    assert engine(batch(crf)).compute([]).scores == []


@pytest.mark.parametrize(
    ("cfg_kwargs", "use_crf", "message"),
    [
        ({}, False, "needs a batch scorer"),
        ({"scorer": "t_half"}, False, "is not a batch scorer"),
        ({"scorer": "t_batch"}, True, "not both"),
        ({"scorer": 3}, False, "reward.reward_manager.kwargs.scorer: Input should be a valid string"),
        ({"scorer_kwargs": {"a": 1}}, True, "scorer_kwargs applies to kwargs.scorer"),
        (
            {"scorer": "t_batch", "scorer_kwargs": [1]},
            False,
            "reward.reward_manager.kwargs.scorer_kwargs: Input should be a valid dictionary",
        ),
        ({"dedup": "yes"}, True, "reward.reward_manager.kwargs.dedup: Input should be a valid boolean"),
        (
            {"batch_size": 4},
            True,
            "reward.reward_manager.kwargs.batch_size: unknown key. Known keys here: dedup, scorer, scorer_kwargs.",
        ),
    ],
)
def test_config_errors(engine, crf, cfg_kwargs, use_crf, message):
    cfg = batch(crf if use_crf else None, **cfg_kwargs)
    with pytest.raises(ConfigError) as e:
        engine(cfg).manager  # noqa: B018 - built on first use
    assert message in str(e.value)


def test_per_sample_custom_function_is_rejected(engine, crf):
    with pytest.raises(ConfigError, match="Use the 'naive' manager"):
        engine(batch(crf, "exact")).manager  # noqa: B018
