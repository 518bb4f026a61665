"""math_dapo: verl's DAPO semantics (Answer: line, last 300 characters, Minerva normalisation, ±1)."""

from __future__ import annotations

import pytest

from rewardkit.scorers.math_dapo import INVALID, compute_score, normalize_final_answer

from .conftest import perturb


def test_gsm8k_answer_lines(gsm8k_records):
    for rec in gsm8k_records:
        body = rec["answer"].rsplit("####", 1)[0]
        assert compute_score(f"{body}\nAnswer: {rec['final']}", rec["final"]) == {
            "score": 1.0,
            "acc": True,
            "pred": rec["final"].replace(",", ""),
        }
        out = compute_score(f"{body}\nAnswer: {perturb(rec['final'])}", rec["final"])
        assert out["score"] == -1.0 and out["acc"] is False


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("x = 5", "5"),
        ("$\\frac12$", "\\frac{1}{2}"),
        ("\\text{10 dollars}", "10"),
        ("1,000", "1000"),
        ("\\boxed{7}", "7"),
        ("90^\\circ", "90"),
        ("\\sqrt2", "\\sqrt{2}"),
        ("5 \\text{ cm}", "5"),
        ("what a day", "whatday"),  # verl drops "a " and spaces verbatim
    ],
)
def test_normalisation(raw, normalised):
    assert normalize_final_answer(raw) == normalised


def test_last_answer_line_wins_and_case_insensitive():
    assert compute_score("Answer: 3\nanswer : 4", "4")["acc"]
    assert compute_score("ANSWER:\\frac{1}{2}", "\\frac12")["acc"]


def test_only_the_last_300_characters_count():
    long = "Answer: 5\n" + "x" * 400
    assert compute_score(long, "5") == {"score": -1.0, "acc": False, "pred": INVALID}
    assert compute_score("x" * 400 + "\nAnswer: 5", "5")["acc"]


def test_a_box_in_the_last_100_characters_counts_as_in_verl_0_9_1():
    assert compute_score("so \\boxed{12}", "12") == {"score": 1.0, "acc": True, "pred": "12"}
    assert not compute_score("\\boxed{12}" + "y" * 150, "12")["acc"]
    assert compute_score("\\boxed{12}\nAnswer: 13", "13")["acc"]  # the line wins
    assert not compute_score("\\boxed{12.0}", "12")["acc"]  # the box is compared as written


def test_boxed_fallback_off_is_older_verl():
    assert compute_score("so \\boxed{12}", "12", boxed_fallback=False) == {
        "score": -1.0,
        "acc": False,
        "pred": INVALID,
    }


def test_strict_box_verify_compares_raw():
    assert compute_score("\\boxed{12}", "12", strict_box_verify=True)["acc"]
    assert not compute_score("\\boxed{12.0}", "12", strict_box_verify=True)["acc"]
    assert not compute_score("Answer: 12", "12", strict_box_verify=True)["acc"]
    assert compute_score("Answer: 12", "12", strict_box_verify=True)["pred"] == INVALID


def test_empty_unicode_and_bad_ground_truth():
    assert compute_score("", "1") == {"score": -1.0, "acc": False, "pred": INVALID}
    assert compute_score("Answer: π", "π")["acc"]
    assert compute_score("Answer: 3", 3)["acc"]
    with pytest.raises(ValueError):
        compute_score("Answer: 3", None)


def test_huge_response():
    assert compute_score("1" * 1_000_000 + "\nAnswer: 2", "2")["acc"]


VERL_CASES = [
    ("Answer: 7", "7"),
    ("so \\boxed{7}", "7"),
    ("so \\boxed{7.0}", "7"),
    ("\\boxed{\\frac{1}{2}}", "\\frac12"),
    ("Answer: \\frac12", "\\frac{1}{2}"),
    ("Answer: 3\nanswer: 4", "4"),
    ("x" * 400 + "\\boxed{9}", "9"),
    ("\\boxed{9}" + "x" * 150, "9"),
    ("Answer: 10 dollars", "10"),
    ("", "1"),
    ("no answer at all", "[INVALID]"),
]


@pytest.mark.parametrize(("response", "gold"), VERL_CASES)
@pytest.mark.parametrize("strict", [False, True])
def test_same_verdicts_as_verls_own_math_dapo(response, gold, strict):
    verl = pytest.importorskip("verl.utils.reward_score.math_dapo")
    theirs = verl.compute_score(response, gold, strict_box_verify=strict)
    ours = compute_score(response, gold, strict_box_verify=strict)
    assert (ours["score"], ours["acc"]) == (theirs["score"], theirs["acc"])
    assert ours["pred"] == (INVALID if theirs["pred"] is None else theirs["pred"])
