"""The DAPO manager: overlong penalty at its edges, config validation, lengths, failures, dedup."""

from __future__ import annotations

import math

import pytest

from rewardkit.errors import ConfigError, SampleError
from rewardkit.managers.dapo import overlong_penalty

BUFFER = {"enable": True, "len": 20, "penalty_factor": 1.0, "log": True}


def dapo(crf, buffer=None, **kwargs):
    return {
        "custom_reward_function": crf("exact"),
        "reward_manager": {
            "name": "dapo",
            "kwargs": {
                "overlong_buffer_cfg": BUFFER if buffer is None else buffer,
                "max_resp_len": 100,
                **kwargs,
            },
        },
    }


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, 0.0), (79, 0.0), (80, 0.0), (81, -0.05), (90, -0.5), (100, -1.0), (120, -2.0)],
)
def test_penalty_formula(length, expected):
    # expected length = 100 - 20 = 80; full penalty (-1) at max_resp_len; keeps falling beyond it
    assert overlong_penalty(length, 100, 20, 1.0) == pytest.approx(expected)


def test_penalty_factor_scales_and_zero_buffer_edge():
    assert overlong_penalty(100, 100, 20, 0.5) == pytest.approx(-0.5)
    assert overlong_penalty(90, 100, 20, 0.0) == 0.0
    assert overlong_penalty(100, 100, 100, 1.0) == pytest.approx(-1.0)  # buffer == max_resp_len
    assert overlong_penalty(0, 100, 100, 1.0) == 0.0


def test_penalty_added_to_scores_with_log(engine, crf):
    rows = [(80, "1", "1"), (90, "1", "1"), (100, "1", "1"), (120, "1", "1"), (90, "2", "1"), (10, "1", "1")]
    samples = [{"response": r, "ground_truth": g, "response_length": n} for n, r, g in rows]
    result = engine(dapo(crf)).compute(samples)
    assert result.scores == pytest.approx([1.0, 0.5, 0.0, -1.0, -0.5, 1.0])
    assert result.extra["overlong"] == [False, True, True, True, True, False]
    assert result.extra["overlong_reward"] == pytest.approx([0.0, -0.5, -1.0, -2.0, -0.5, 0.0])


def test_no_log_no_extra_and_disabled_means_naive(engine, crf):
    samples = [{"response": "1", "ground_truth": "1", "response_length": 95}]
    quiet = engine(dapo(crf, {**BUFFER, "log": False})).compute(samples)
    assert quiet.scores == pytest.approx([0.25]) and quiet.extra == {}
    # disabled: nothing validated (no max_resp_len needed), nothing added
    off = {"custom_reward_function": crf("exact"), "reward_manager": {"name": "dapo", "kwargs": {}}}
    assert engine(off).compute(samples + [{"response": "1", "ground_truth": "1"}]).scores == [1.0, 1.0]


def test_failed_and_abstained_samples_are_left_alone(engine, crf):
    cfg = dapo(crf)
    cfg["custom_reward_function"] = crf("fail_on_bad")
    samples = [{"response": "bad", "response_length": 100}, {"response": "ok", "response_length": 100}]
    result = engine(cfg).compute(samples)
    assert result.status == ["failed", "ok"] and result.reasons[0] == "error"
    assert math.isnan(result.scores[0]) and result.scores[1] == pytest.approx(0.0)
    assert result.extra["overlong_reward"][0] is None
    cfg["custom_reward_function"] = crf("abstain_on_empty")
    result = engine(cfg).compute([{"response": "", "response_length": 100}])
    assert result.status == ["abstained"]


K = "reward.reward_manager.kwargs."


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"overlong_buffer_cfg": {"enable": True, "len": 20}}, "max_resp_len is not set"),
        (
            {"overlong_buffer_cfg": {"enable": True, "len": 0}, "max_resp_len": 100},
            f"{K}overlong_buffer_cfg: len must be > 0",
        ),
        ({"overlong_buffer_cfg": {"enable": True, "len": -5}, "max_resp_len": 100}, "len must be > 0"),
        ({"overlong_buffer_cfg": {"enable": True, "len": 200}, "max_resp_len": 100}, "must be >="),
        (
            {"overlong_buffer_cfg": {"enable": True, "len": 2.5}, "max_resp_len": 100},
            f"{K}overlong_buffer_cfg.len: Input should be a valid integer",
        ),
        (
            {"overlong_buffer_cfg": {"enable": True, "len": 20}, "max_resp_len": "100"},
            f"{K}max_resp_len: Input should be a valid integer",
        ),
        (
            {"overlong_buffer_cfg": {"enable": True, "len": 20, "penalty_factor": -1}, "max_resp_len": 100},
            f"{K}overlong_buffer_cfg.penalty_factor: Input should be greater than or equal to 0",
        ),
        (
            {"overlong_buffer_cfg": {"enable": True, "len": 20, "penalty_factor": True}, "max_resp_len": 100},
            "penalty_factor must be a number >= 0",
        ),
        (
            {"overlong_buffer_cfg": {"enable": "yes"}},
            f"{K}overlong_buffer_cfg.enable: Input should be a valid boolean",
        ),
        (
            {"overlong_buffer_cfg": {"enable": True, "lenght": 20}},
            f"{K}overlong_buffer_cfg.lenght: unknown key. Did you mean 'len'?",
        ),
        ({"overlong_buffer_cfg": [1]}, f"{K}overlong_buffer_cfg: Input should be a valid dictionary"),
        ({"max_len": 3}, f"{K}max_len: unknown key. Did you mean 'max_resp_len'?"),
        ({"tokenizer": 3}, f"{K}tokenizer: Input should be a valid string"),
    ],
)
def test_config_validation(engine, crf, kwargs, message):
    cfg = {"custom_reward_function": crf("exact"), "reward_manager": {"name": "dapo", "kwargs": kwargs}}
    with pytest.raises(ConfigError) as e:
        engine(cfg).manager  # noqa: B018 - built on first use
    assert message in str(e.value)


def test_buffer_equal_to_max_resp_len_is_valid(engine, crf):
    cfg = dapo(crf, {"enable": True, "len": 100})
    assert engine(cfg).compute([{"response": "1", "ground_truth": "1", "response_length": 50}]).scores == [
        0.5
    ]


def test_missing_length_without_tokenizer_is_a_clear_error(engine, crf):
    with pytest.raises(SampleError) as e:
        engine(dapo(crf)).compute(
            [{"response": "1", "ground_truth": "1", "response_length": 3}, {"response": "1"}]
        )
    assert "sample 1" in str(e.value) and "tokenizer" in str(e.value)


@pytest.fixture(scope="module")
def word_tokenizer(tmp_path_factory):
    """A tiny whitespace word-level tokenizer saved as a transformers tokenizer directory."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {
        "[UNK]": 0,
        "[PAD]": 1,
        **{w: i + 2 for i, w in enumerate(["a", "b", "c", "d", "e", "f", "g", "h"])},
    }
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
    path = tmp_path_factory.mktemp("tok")
    fast.save_pretrained(path)
    return str(path)


def test_tokenizer_counts_lengths_when_samples_carry_none(engine, crf, word_tokenizer):
    cfg = dapo(crf, {"enable": True, "len": 2, "log": True}, tokenizer=word_tokenizer)
    cfg["reward_manager"]["kwargs"]["max_resp_len"] = 6  # expected length 4
    samples = [
        {"response": "a b c d", "ground_truth": "a b c d"},  # 4 tokens: no penalty
        {"response": "a b c d e", "ground_truth": "a b c d e"},  # 5: -0.5
        {"response": "a b c d e f g h", "ground_truth": "a b c d e f g h"},  # 8: -2
        {"response": "a b c d e", "ground_truth": "a b c d e", "response_length": 4},  # given wins
    ]
    assert engine(cfg).compute(samples).scores == pytest.approx([1.0, 0.5, -1.0, 1.0])


def test_bad_tokenizer_path_is_a_config_error(engine, crf, tmp_path):
    cfg = dapo(crf, tokenizer=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="cannot load tokenizer"):
        engine(cfg).compute([{"response": "a"}])


def test_grpo_groups_are_scored_once_per_distinct_response_in_workers(engine, crf, tmp_path):
    log = tmp_path / "calls.txt"
    cfg = dapo(crf)
    cfg["custom_reward_function"] = crf("record")
    cfg.update(executor="process", num_workers=2, timeout_s=10)
    samples = []
    for prompt in range(4):  # 4 prompts x 8 rollouts, 2 distinct responses per prompt
        for k in range(8):
            samples.append(
                {
                    "prompt": f"p{prompt}",
                    "response": f"r{prompt}-{k % 2}",
                    "ground_truth": f"r{prompt}-0",
                    "extra_info": {"log": str(log)},
                    "response_length": 90 if k % 4 == 0 else 50,
                }
            )
    result = engine(cfg).compute(samples)
    lines = log.read_text().splitlines()
    assert len(lines) == 8  # one call per distinct (response, ground_truth)
    assert len({line.split("\t")[0] for line in lines}) >= 1
    expected = [
        (1.0 if k % 2 == 0 else 0.0) + (-0.5 if k % 4 == 0 else 0.0) for _p in range(4) for k in range(8)
    ]
    assert result.scores == pytest.approx(expected)
