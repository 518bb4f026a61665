"""The math scorer: last boxed answer, equivalence through math-verify, any thread."""

from __future__ import annotations

import concurrent.futures
import sys
import threading
import time

import pytest

from rewardkit.scorers import math_boxed
from rewardkit.scorers.math_boxed import compute_score, gold_answers

from .conftest import perturb


@pytest.mark.parametrize(
    ("gold", "pred"),
    [
        ("\\frac{1}{2}", "0.5"),
        ("\\frac{1}{2}", "1/2"),
        ("0.5", "\\dfrac{1}{2}"),
        ("\\frac12", "\\tfrac{1}{2}"),
        ("3", "x=3"),
        ("3", "x = 3"),
        ("[1,3)", "[1, 3)"),
        ("(1,3]", "x \\in (1,3]"),
        ("\\sqrt{2}", "2^{1/2}"),
        ("\\{1,2\\}", "\\{2,1\\}"),
        ("x^2+2x+1", "(x+1)^2"),
        ("1,234", "1234"),
        ("90^\\circ", "90"),
        ("\\text{(A)}", "A"),
        ("-\\frac{3}{4}", "-0.75"),
    ],
)
def test_equivalent_forms(gold, pred):
    out = compute_score(f"Thus the answer is $\\boxed{{{pred}}}$.", gold)
    assert out["acc"] is True and out["score"] == 1.0 and out["pred"] == pred


@pytest.mark.parametrize(
    ("gold", "pred"),
    [("\\frac{1}{2}", "\\frac{1}{3}"), ("3", "x=4"), ("[1,3)", "(1,3)"), ("5", "6"), ("\\sqrt{2}", "2")],
)
def test_different_answers(gold, pred):
    out = compute_score(f"\\boxed{{{pred}}}", gold)
    assert out == {"score": 0.0, "acc": False, "pred": pred, "extracted_by": "boxed"}


def test_last_box_counts_and_nested_braces():
    assert compute_score("first \\boxed{3}, finally \\boxed{\\frac{1}{\\sqrt{4}}}", "0.5")["acc"]
    assert not compute_score("first \\boxed{0.5}, finally \\boxed{3}", "0.5")["acc"]
    assert compute_score("\\fbox{7}", "7")["acc"]
    assert compute_score("so \\boxed 7", "7")["acc"]


@pytest.mark.parametrize(
    "response", ["", "the answer is 7", "\\boxed{7", "\\boxed{}", "\\boxed{ }", "\\boxed{\\frac{7}{1}"]
)
def test_no_valid_box_is_wrong_with_strict_box(response):
    out = compute_score(response, "7", strict_box=True)
    assert out == {"score": 0.0, "acc": False, "pred": None, "extracted_by": None}


def test_ground_truth_forms():
    assert gold_answers("The sum is $\\boxed{\\frac{1}{2}}$.") == ["\\frac{1}{2}"]
    assert gold_answers("$5$") == ["5"]
    assert gold_answers(7) == ["7"]
    assert gold_answers(["1", "\\frac{2}{2}"]) == ["1", "\\frac{2}{2}"]
    assert compute_score("\\boxed{2}", ["1", "2"])["acc"]
    for bad in (None, True, "", [], {"a": 1}):
        with pytest.raises(ValueError):
            compute_score("\\boxed{1}", bad)


def test_unparseable_gold_raises():
    with pytest.raises(ValueError, match="cannot parse"):
        compute_score("\\boxed{1}", "}{")


def test_unicode_and_options():
    assert compute_score("résultat: \\boxed{π}", "\\pi")["acc"]
    out = compute_score("\\boxed{1}", "2", correct_score=1.0, wrong_score=-1.0)
    assert out["score"] == -1.0


def test_huge_response_returns_quickly():
    start = time.perf_counter()
    assert compute_score("1" * 1_000_000, "1")["acc"] is False
    assert compute_score("\\boxed{" + "{" * 500_000, "1")["acc"] is False
    assert compute_score("\\boxed{1} " * 200_000, "1")["acc"] is True
    assert time.perf_counter() - start < 10


def test_gsm8k_answers_boxed(gsm8k_records):
    for rec in gsm8k_records[:100]:
        n = rec["final"]
        assert compute_score(f"{rec['answer']} so \\boxed{{{n}}}", n)["acc"], n
        assert not compute_score(f"so \\boxed{{{perturb(n)}}}", n)["acc"], n


def test_works_off_the_main_thread():
    """math-verify's signal timeouts only work on the main thread; ours are off, so threads work."""
    results, errors = [], []

    def work():
        try:
            results.append(compute_score("\\boxed{\\frac{2}{4}}", "0.5"))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join(60)
    assert not errors and results[0]["acc"] is True
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda i: compute_score(f"\\boxed{{{i}/2}}", f"\\frac{{{i}}}{{2}}"), range(8)))
    assert all(o["acc"] for o in outs)


def test_gold_is_passed_first_to_math_verify():
    """math-verify's check is asymmetric: a gold inequality accepts the equivalent interval, not the
    other way round. Swapping the arguments flips both of these."""
    assert compute_score("\\boxed{(-\\infty,3)}", "x<3")["acc"] is True
    assert compute_score("\\boxed{x<3}", "(-\\infty,3)")["acc"] is False


def test_warm_up_builds_what_the_first_samples_would_and_leaves_no_answer_cached():
    """warm_up() (run by the process executor's fork server) imports sympy's late modules and leaves
    the parse and verdict caches empty, so a warmed process scores exactly as a fresh one."""
    math_boxed.clear_caches()
    math_boxed.warm_up()
    assert "sympy.physics.units" in sys.modules  # imported by sympy's first simplify()
    for cached in (math_boxed._parse_boxed, math_boxed._parse_free, math_boxed._verdict):
        assert cached.cache_info().currsize == 0
    assert math_boxed.compute_score("\\boxed{\\frac{1}{9}}", "\\frac{1}{9}")["acc"] is True
