"""The math scorer's answer extraction: one hand-written case (or more) per rule, and its limits."""

from __future__ import annotations

import pytest

from rewardkit.scorers import math_boxed
from rewardkit.scorers.math_boxed import compute_score


def graded(response: str, gold: str, **kwargs) -> tuple[bool, str | None]:
    out = compute_score(response, gold, **kwargs)
    assert out["score"] == (1.0 if out["acc"] else 0.0)
    return out["acc"], out["extracted_by"]


@pytest.mark.parametrize(
    ("response", "gold", "rule"),
    [
        ("so $\\boxed{12}$ apples", "12", "boxed"),
        ("first \\boxed{3}, finally \\boxed{4}", "4", "boxed"),  # a correction, not a tuple
        ("the values are \\(\\boxed{-1}\\) and \\(\\boxed{-9}\\).", "-1,-9", "boxed_multi"),
        ("So $x=\\boxed{1}$, $y=\\boxed{2}$.", "(1,2)", "boxed_multi"),
        ("\\boxed{5} and again \\boxed{5}", "5", "boxed"),  # repeated box: one answer
        ("Final Answer: The final answer is $16\\pi$. I hope it is correct.", "16\\pi", "answer_sentence"),
        ("Let me think.\nAnswer: 7", "7", "answer_sentence"),
        ("... so the answer is 12 apples.\nThat was fun.", "12", "answer_sentence"),
        ("The final answer is:\n\\[ \\dfrac{3}{4} \\]", "\\frac34", "answer_sentence"),
        ("**Answer:** Verna received $7.00 in change.", "7", "answer_sentence"),
        ("Therefore, the value of \\(d\\) is \\(3\\).", "3", "conclusion"),
        ("Thus the total cost will be \\$324.", "324", "conclusion"),
        ("Therefore, it holds: \\[ V = 20 \\times 2 = 40 \\text{ cubic inches} \\]", "40", "conclusion"),
        ("So, after all that, Raymond has $8 left.", "8", "conclusion"),
        ("So she earned \\$1,250 in total.", "1250", "conclusion"),  # an escaped dollar is currency
        ("The final answer is 1,234.", "1234", "answer_sentence"),
        ("Answer: $(1; 2)$ and that is all", "(1;2)", "answer_sentence"),  # ";" does not end a sentence
        ("We measure it with a protractor: the angle is 45°", "45", "math_verify"),
        ("Adding up gives $x = 5$", "5", "math_verify"),
    ],
)
def test_each_rule_finds_the_final_answer(response, gold, rule):
    assert graded(response, gold) == (True, rule)


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        ("Answer: 8", "7"),
        ("The final answer is $15\\pi$.", "16\\pi"),
        ("Therefore, the value of \\(d\\) is \\(4\\).", "3"),
        ("the values are \\(\\boxed{-1}\\) and \\(\\boxed{-8}\\).", "-1,-9"),
        ("the values are \\(\\boxed{-1}\\) and \\(\\boxed{-9}\\).", "-1"),  # a tuple is not its first part
        ("the angle is 46°", "45"),
        (
            "Therefore, we now compute 3 + 4.\nNext we take 2 + 2 = 4 and then 2 + 3 = 5, add them and"
            + " x" * 100,
            "7",
        ),
    ],
)
def test_wrong_answers_stay_wrong_under_every_rule(response, gold):
    assert graded(response, gold)[0] is False


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("8\\sqrt{3} \\text{ square inches}", "8\\sqrt{3}"),
        ("8\\sqrt{3}", "8\\sqrt{3} \\text{ square inches}"),
        ("\\text{A,D}", "A,D"),
        ("A,D", "\\text{A,D}"),
        ("\\text{(B)}", "B"),
        ("45^{\\circ}", "45°"),
        ("45°", "45^\\circ"),
        ("45", "45°"),
        ("\\dfrac{1}{2}", "\\tfrac12"),
        ("\\tfrac{3}{4}", "0.75"),
        ("15", "\\15"),  # a lost "$" before a number
        ("10{,}000", "10000"),
    ],
)
def test_decorations_are_normalised_on_both_sides(gold, answer):
    assert graded(f"The result is $\\boxed{{{answer}}}$.", gold) == (True, "boxed")


def test_strict_box_rewards_only_boxed_answers():
    assert graded("Answer: 7", "7", strict_box=True) == (False, None)
    assert graded("Therefore, the value of \\(d\\) is \\(3\\).", "3", strict_box=True) == (False, None)
    assert graded("so \\boxed{7}", "7", strict_box=True) == (True, "boxed")
    assert graded("\\(\\boxed{-1}\\) and \\(\\boxed{-9}\\)", "-1,-9", strict_box=True) == (
        True,
        "boxed_multi",
    )


def test_an_unparseable_box_gives_way_to_the_answer_sentence():
    assert graded("\\boxed{}\nThe final answer is 6.", "6") == (True, "answer_sentence")


def test_no_answer_at_all():
    assert compute_score("I do not know.", "7") == {
        "score": 0.0,
        "acc": False,
        "pred": None,
        "extracted_by": None,
    }
    assert compute_score("", "7")["extracted_by"] is None


def test_the_rule_is_reported_in_the_result_extra():
    from rewardkit import RewardEngine

    samples = [
        {"response": "Answer: 7", "ground_truth": "7", "data_source": "HuggingFaceH4/MATH-500"},
        {"response": "\\boxed{7}", "ground_truth": "7", "data_source": "HuggingFaceH4/MATH-500"},
    ]
    with RewardEngine() as engine:
        result = engine.compute(samples)
    assert result.scores == [1.0, 1.0]
    assert [s.extra["extracted_by"] for s in result.samples] == ["answer_sentence", "boxed"]


@pytest.mark.parametrize("text", ["0", "7", "-5", "123456789012345678", "1000"])
def test_the_integer_fast_path_gives_what_math_verify_gives(text):
    import math_verify

    math_boxed.clear_caches()
    fast = math_boxed._parse_boxed(text)
    slow = math_verify.parse("\\boxed{" + text + "}", parsing_timeout=None)
    assert list(fast) == slow and [type(x) for x in fast] == [type(x) for x in slow]
    assert math_boxed._verdict(text, fast) is True
    assert math_boxed._verdict(text, math_boxed._parse_boxed(text + "1")) is False


def test_each_distinct_answer_and_gold_is_parsed_once():
    math_boxed.clear_caches()
    for _ in range(5):
        compute_score("The final answer is $\\frac{1}{2}$.", "0.5")
        compute_score("\\boxed{\\frac{2}{4}}", "0.5")
    boxed, free = math_boxed._parse_boxed.cache_info(), math_boxed._parse_free.cache_info()
    assert boxed.misses == 2 and free.misses == 1  # gold + one box; one answer sentence
    assert math_boxed._verdict.cache_info().misses == 2


def test_matrix_answers_are_verified_though_not_hashable():
    gold = "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"
    assert graded(f"\\boxed{{{gold}}}", gold) == (True, "boxed")
    assert graded("\\boxed{\\begin{pmatrix} 1 \\\\ 3 \\end{pmatrix}}", gold) == (False, "boxed")
    assert graded(f"The final answer is ${gold}$.", gold) == (True, "answer_sentence")


@pytest.mark.parametrize(("gold", "answer"), [("\\text{on}", "\\text{no}"), ("\\text{even}", "\\text{evne}")])
def test_words_in_text_stay_words_not_products_of_letters(gold, answer):
    assert graded(f"\\boxed{{{answer}}}", gold) == (False, "boxed")
    assert graded(f"\\boxed{{{gold}}}", gold) == (True, "boxed")


def test_trailing_blank_lines_do_not_hide_the_last_paragraph():
    assert graded("Work.\n\nTherefore, the value of \\(d\\) is \\(3\\).\n\n\n", "3") == (True, "conclusion")
