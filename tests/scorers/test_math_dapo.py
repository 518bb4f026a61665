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


def test_a_box_without_answer_line_is_wrong_as_in_verl():
    assert compute_score("so \\boxed{12}", "12") == {"score": -1.0, "acc": False, "pred": INVALID}


def test_opt_in_boxed_fallback_in_last_100_characters():
    assert compute_score("so \\boxed{12}", "12", boxed_fallback=True) == {
        "score": 1.0,
        "acc": True,
        "pred": "12",
    }
    assert not compute_score("\\boxed{12}" + "y" * 150, "12", boxed_fallback=True)["acc"]
    assert compute_score("\\boxed{12}\nAnswer: 13", "13", boxed_fallback=True)["acc"]  # the line wins


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
