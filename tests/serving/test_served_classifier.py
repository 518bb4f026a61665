"""The served-classifier backend against the stand-in: chat-templated token ids with the tiny
classifier's tokenizer, truncation, reply shapes, bad replies failing typed."""

from __future__ import annotations

import asyncio
import math

import pytest
from standin_helpers import standin_server, stats
from standin_server import score_of

from rewardkit import RewardEngine
from rewardkit.backends.served_classifier import ServedClassifierRM, _score_of
from rewardkit.batch import to_samples
from rewardkit.config import RewardModelConfig
from rewardkit.errors import ConfigError


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory):
    from tiny_models import build_tiny_classifier

    return str(build_tiny_classifier(tmp_path_factory.mktemp("served") / "rm"))


def test_token_ids_rendered_with_the_rm_chat_template_and_left_truncated(tiny_rm):
    from transformers import AutoTokenizer

    records = [
        {"prompt": [{"role": "user", "content": "two plus two?"}], "response": "four"},
        {"prompt": "long " * 200, "response": "tail end"},
        {"prompt": "ünïcødé ✓", "response": ""},
    ]
    server = standin_server(placement="standalone", model_path=tiny_rm)
    cfg = {
        "executor": "inline",
        "reward_model": {
            "enable": True,
            "backend": "served-classifier",
            "model_path": tiny_rm,
            "server": server,
            "rollout": {"max_length": 64},
        },
    }
    with RewardEngine(cfg) as engine:
        result = engine.compute(records)
        backend = engine.backend
        sent = [backend.encode(s)[0] for s in to_samples(records)]
    tok = AutoTokenizer.from_pretrained(tiny_rm)
    assert result.status == ["ok"] * 3
    assert all(isinstance(x, list) and isinstance(x[0], int) for x in sent)  # token ids, not text
    first = tok.apply_chat_template(
        [{"role": "user", "content": "two plus two?"}, {"role": "assistant", "content": "four"}],
        tokenize=False,
    )
    assert tok.decode(sent[0], skip_special_tokens=False).replace(" ", "") == first.replace(" ", "")
    assert result.samples[1].extra["truncated"] is True and result.samples[1].extra["num_tokens"] == 64
    assert len(sent[1]) == 64 and "tail end" in tok.decode(sent[1])  # left truncation keeps the response
    if tok.bos_token_id is not None:
        assert sent[1][0] == tok.bos_token_id
    assert result.scores == pytest.approx([score_of(" ".join(map(str, ids))) for ids in sent])
    assert [s.extra["rm_logit"] for s in result.samples] == pytest.approx(result.scores)


@pytest.mark.parametrize(
    ("item", "label", "expected"),
    [
        ({"index": 0, "probs": [0.25], "num_classes": 1}, 0, 0.25),  # vLLM /classify
        ({"index": 0, "probs": [0.1, 0.9]}, 1, 0.9),
        ({"index": 0, "data": [[1.0], [2.5]]}, 0, 2.5),  # vLLM /pooling, token-level: the last row
        ({"index": 0, "embedding": [3.0]}, 0, 3.0),  # SGLang
        ({"index": 0, "score": 1.5}, 0, 1.5),
    ],
)
def test_reply_shapes(item, label, expected):
    assert _score_of(item, label) == expected


def test_a_label_out_of_range_is_an_error():
    with pytest.raises(ValueError, match="out of range"):
        _score_of({"probs": [0.5]}, 3)


def test_settings_are_validated():
    with pytest.raises(ConfigError, match="base_url"):
        ServedClassifierRM(RewardModelConfig(model_path="m", rollout={"base_url": "ftp://x"}))
    with pytest.raises(ConfigError, match="Did you mean 'token_budget'"):
        ServedClassifierRM(
            RewardModelConfig(model_path="m", rollout={"base_url": "http://a", "token_budgte": 1})
        )


def test_pooling_api_and_empty_batch():
    server = standin_server(placement="standalone")
    cfg = {
        "executor": "inline",
        "reward_model": {
            "enable": True,
            "backend": "served-classifier",
            "server": server,
            "rollout": {"api": "pooling"},
        },
    }
    with RewardEngine(cfg) as engine:
        assert asyncio.run(engine.backend.ascore([])) == []
        result = engine.compute([{"prompt": "p", "response": "r"}])
        events = stats(engine.servers.urls[0])["events"]
    assert events == ["pooling"] and result.scores == [score_of("pr")]
    assert math.isfinite(result.scores[0])


def test_requests_are_packed_by_the_token_budget_like_the_transformers_backend():
    from rewardkit.backends.discriminative import pack_batches

    records = [{"prompt": "p" * (i % 5), "response": "r" * (3 * i + 1)} for i in range(20)]
    lengths = [len(r["prompt"]) + len(r["response"]) for r in records]  # chars_per_token 1: length = chars
    server = standin_server(placement="standalone")
    rollout = {"token_budget": 120, "chars_per_token": 1.0}
    cfg = {
        "executor": "inline",
        "reward_model": {
            "enable": True,
            "backend": "served-classifier",
            "server": server,
            "rollout": rollout,
        },
    }
    with RewardEngine(cfg) as engine:
        result = engine.compute(records)
        requests = stats(engine.servers.urls[0])["events"].count("classify")
    expected = pack_batches(lengths, 120)
    assert 1 < requests == len(expected)
    assert result.metrics["rm/batches"] == len(expected) and result.metrics["rm/tokens"] == sum(lengths)
    assert [s.extra["num_tokens"] for s in result.samples] == lengths
    assert result.scores == pytest.approx([score_of(r["prompt"] + r["response"]) for r in records])
