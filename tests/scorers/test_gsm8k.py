"""The gsm8k scorer on the real GSM8K test split and on hand-written edge cases."""

from __future__ import annotations

import time

import pytest

from rewardkit.scorers._text import truncate
from rewardkit.scorers.gsm8k import compute_score, extract_answer, parse_ground_truth

from .conftest import perturb


def test_reference_answers_score_one(gsm8k_records):
    for rec in gsm8k_records:
        for method in ("flexible", "strict"):
            out = compute_score(rec["answer"], rec["answer"], method=method)
            assert out == {"score": 1.0, "acc": True, "pred": out["pred"]}, rec["answer"]
        assert compute_score(rec["answer"], rec["final"])["acc"]


def test_perturbed_answers_score_zero(gsm8k_records):
    for rec in gsm8k_records:
        wrong = rec["answer"].rsplit("####", 1)[0] + "#### " + perturb(rec["final"])
        out = compute_score(wrong, rec["final"])
        assert out["score"] == 0.0 and out["acc"] is False and out["pred"] == perturb(rec["final"])


def test_other_answer_formats_on_real_data(gsm8k_records):
    for rec in gsm8k_records[:200]:
        body = rec["answer"].rsplit("####", 1)[0]
        n = rec["final"]
        for response in (
            f"{body}\nSo the final answer is \\boxed{{{n}}}.",
            f"{body}\nThe answer is {n}.",
            f"{body}\nAnswer: {n}",
            f"{body}\nTherefore she has {n} left.",
        ):
            assert compute_score(response, rec["answer"])["acc"], response


@pytest.mark.parametrize(
    ("response", "pred"),
    [
        ("#### 1,234", "1,234"),
        ("work #### 5 ... #### 6", "6"),
        ("\\boxed{\\$18}", "18"),
        ("\\boxed{18 \\text{ dollars}}", "18"),
        ("The answer is: $-7.", "-7"),
        ("the Answer is **12**", "12"),
        ("**Answer:** 3", "3"),
        ("Q: x\nA: 44", "44"),
        ("I get 3 apples and 4 pears, 7 fruit", "7"),
        ("no digits at all", None),
        ("", None),
        ("ünïcødé ✓ ٣ answer is 9 ✓", "9"),
    ],
)
def test_extract_answer(response, pred):
    assert extract_answer(response) == pred


def test_number_forms_compare_by_value():
    assert compute_score("#### 1,234", "1234")["acc"]
    assert compute_score("The answer is $72.", "72")["acc"]
    assert compute_score("#### 72.0", 72)["acc"]
    assert compute_score("#### 72.50", "72.5")["acc"]
    assert compute_score("#### -3", "-3")["acc"]
    assert not compute_score("#### 3", "-3")["acc"]
    assert compute_score("#### 0.5", 0.5)["pred"] == "0.5"
    assert compute_score("#### 72.0", 72)["pred"] == "72"


def test_strict_requires_hashes():
    assert compute_score("The answer is 72", "72", method="strict") == {
        "score": 0.0,
        "acc": False,
        "pred": None,
    }
    assert compute_score("#### 72", "72", method="strict")["score"] == 1.0
    with pytest.raises(ValueError, match="method"):
        compute_score("#### 72", "72", method="loose")


def test_format_score_and_score_options():
    assert compute_score("#### 71", "72", format_score=0.1)["score"] == 0.1
    assert compute_score("nothing", "72", format_score=0.1)["score"] == 0.0
    assert compute_score("#### 72", "72", score=2.0)["score"] == 2.0


@pytest.mark.parametrize(
    ("gt", "value"),
    [("72", 72), (72, 72), (72.0, 72), ("Some work.\n#### 1,000", 1000), ("#### $5", 5), ("it is 9", 9)],
)
def test_ground_truth_forms(gt, value):
    assert parse_ground_truth(gt) == value


@pytest.mark.parametrize("gt", [None, True, "no number", [1], ""])
def test_bad_ground_truth_raises(gt):
    with pytest.raises(ValueError):
        compute_score("#### 1", gt)


@pytest.mark.parametrize(
    "response",
    [
        "1" * 1_000_000,
        "answer is" + " " * 1_000_000,
        "\n" * 1_000_000,
        "A:" + " " * 1_000_000 + "x",
        "#### " * 200_000,
        "1 " * 500_000,
    ],
    ids=["digits", "answer-spaces", "newlines", "A-spaces", "hashes", "numbers"],
)
def test_huge_responses_return_quickly(response):
    start = time.perf_counter()
    out = compute_score(response, "7")
    assert out["acc"] is False
    assert time.perf_counter() - start < 10


def test_a_negative_dollar_amount_is_negative():
    """ProcessBench gsm8k-6: ``\\boxed{-$15}`` for a gold of 15 is wrong, not a match on ``15``."""
    assert compute_score("I will answer the opposite. \\boxed{-$15}", "15")["acc"] is False
    assert compute_score("\\boxed{-$15}", "-15")["acc"] is True
    assert compute_score("#### -$15", "-15")["acc"] is True
    assert compute_score("costs $20 - $5 = $15", "15")["acc"] is True


def test_parsed_numbers_are_cached_by_text_but_long_ones_are_not_kept():
    """Golds and answers are parsed once per distinct text; a huge number is compared, not cached."""
    from rewardkit.scorers import gsm8k

    gsm8k._number.cache_clear()
    gsm8k._gold_of_text.cache_clear()
    for _ in range(3):
        assert compute_score("so #### 1,234", "1234")["acc"] is True
        assert compute_score("so #### 1235", "1,234")["acc"] is False
    assert gsm8k._number.cache_info().currsize == 2 and gsm8k._gold_of_text.cache_info().currsize == 2
    huge = "9" * 5000
    assert compute_score(f"#### {huge}", huge) == {"score": 1.0, "acc": True, "pred": truncate(huge)}
    assert compute_score(f"#### {huge}8", huge)["acc"] is False
    assert gsm8k._number.cache_info().currsize == 2 and gsm8k._gold_of_text.cache_info().currsize == 2


def test_the_last_hashes_answer_is_found_from_the_end_as_a_forward_scan_finds_it():
    """``####`` is searched backwards (a long response is not scanned whole); on random texts
    over the characters that matter (runs of ``#``, digits, separators) it gives what the last
    match of a forward scan gives."""
    import random

    from rewardkit.scorers import gsm8k

    rng = random.Random(7)
    alphabet = ["#", "#", "####", " ", "\t", "$", "-", ".", ",", "1", "7", "x", "\n"]
    texts = ["", "####", "#####5", "#### 5 ####", "####-$3 #### x", "a #### 1,2.5", "# ### ####.5"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(20000)]
    for text in texts:
        assert gsm8k._last_hashes(text) == gsm8k._last(gsm8k._HASHES, text), repr(text)
