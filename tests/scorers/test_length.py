"""cosine_length: the cosine length reward, with correctness from another scorer."""

from __future__ import annotations

import math

import pytest

from rewardkit.batch import Sample
from rewardkit.scorers.length import cosine, cosine_length

from .conftest import perturb


def sample(response, gt="7", ds="openai/gsm8k", length=None):
    return Sample(index=0, response=response, ground_truth=gt, data_source=ds, response_length=length)


def test_cosine_endpoints():
    assert cosine(0, 2.0, 1.0) == pytest.approx(2.0)
    assert cosine(1, 2.0, 1.0) == pytest.approx(1.0)
    assert cosine(0.5, 2.0, 1.0) == pytest.approx(1.5)


async def test_short_correct_beats_long_correct_and_wrong_is_negative(gsm8k_records):
    for rec in gsm8k_records[:50]:
        right = rec["answer"]
        padded = "Let me think. " * 40 + right
        wrong = right.rsplit("####", 1)[0] + "#### " + perturb(rec["final"])
        r_short = await cosine_length(right, sample(right, rec["final"]))
        r_long = await cosine_length(padded, sample(padded, rec["final"]))
        r_wrong = await cosine_length(wrong, sample(wrong, rec["final"]))
        assert 0.5 <= r_long["score"] < r_short["score"] <= 1.0
        assert r_short["acc"] and not r_wrong["acc"]
        assert -1.0 <= r_wrong["score"] <= -0.5


async def test_formula_with_paper_settings():
    opts = dict(
        max_length=100, max_value_correct=2, min_value_correct=1, min_value_wrong=-10, max_value_wrong=0
    )
    right = await cosine_length("#### 7", sample("#### 7", length=50), **opts)
    assert right["score"] == pytest.approx(1 + 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert right["length"] == 50  # tokens from the sample win over characters
    wrong = await cosine_length("#### 8", sample("#### 8", length=0), **opts)
    assert wrong["score"] == pytest.approx(-10)
    wrong_long = await cosine_length("#### 8", sample("#### 8", length=100), **opts)
    assert wrong_long["score"] == pytest.approx(0)
    over = await cosine_length("#### 8", sample("#### 8", length=500), exceed_value=-10, **opts)
    assert over["score"] == -10
    clamped = await cosine_length("#### 7", sample("#### 7", length=500), **opts)
    assert clamped["score"] == pytest.approx(1)
    chars = await cosine_length("#### 7", sample("#### 7", length=500), unit="chars", **opts)
    assert chars["length"] == 6


async def test_base_scorer_choice_and_errors():
    s = sample("\\boxed{7}", ds=None)
    assert (await cosine_length(s.response, s, base="math"))["acc"] is True
    with pytest.raises(ValueError, match="base"):
        await cosine_length(s.response, s)
    with pytest.raises(ValueError, match="itself"):
        await cosine_length(s.response, s, base="cosine_length")
    with pytest.raises(ValueError, match="response_length"):
        await cosine_length(s.response, s, base="math", unit="tokens")
    with pytest.raises(ValueError, match="max_length"):
        await cosine_length(s.response, s, base="math", max_length=0)
    bad_gt = sample("#### 1", gt=None)
    with pytest.raises(RuntimeError, match="failed"):
        await cosine_length(bad_gt.response, bad_gt)


async def test_empty_response_is_short_and_wrong():
    out = await cosine_length("", sample(""))
    assert out == {"score": -1.0, "acc": False, "length": 0}


async def test_a_sync_base_scorer_does_not_block_the_event_loop(monkeypatch):
    import asyncio
    import time

    from rewardkit.scorers import gsm8k

    real = gsm8k.extract_answer

    def slow_extract(response, method="flexible"):
        time.sleep(0.5)
        return real(response, method)

    monkeypatch.setattr(gsm8k, "extract_answer", slow_extract)  # the registered gsm8k scorer is sync
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.ensure_future(tick())
    out = await cosine_length("#### 7", sample("#### 7"))
    ticker.cancel()
    assert out["acc"] is True
    assert ticks >= 10  # the loop kept running while the base scorer slept 0.5 s
