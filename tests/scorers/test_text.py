"""Shared text helpers: boxed extraction and number normalisation, including adversarial inputs."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from rewardkit.scorers._text import last_boxed, last_number, matching_brace, normalize_number, truncate


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{42}.", "42"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\left\\{1,2\\right\\}}", "\\left\\{1,2\\right\\}"),
        ("\\boxed{a{b{c}d}e}", "a{b{c}d}e"),
        ("\\fbox{7}", "7"),
        ("\\boxed 5$ done", "5"),
        ("\\boxed {x}", "x"),
        ("\\boxed{3} and later \\fbox{4}", "4"),
        ("\\boxed{}", ""),
        ("\\boxed{√2 + π}", "√2 + π"),
        ("\\boxedsomething \\boxed{9} \\boxedx", "9"),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize("text", ["", "no box here", "\\boxed{1} \\boxed{unclosed", "\\boxed{{}", "\\boxed"])
def test_last_boxed_none(text):
    assert last_boxed(text) is None


def test_matching_brace_skips_escaped_braces():
    text = "{a\\}b}"
    assert matching_brace(text, 0) == len(text) - 1
    assert matching_brace("{{}", 0) is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("72", "72"),
        ("72.0", "72"),
        ("1,234", "1234"),
        ("$18", "18"),
        ("5.", "5"),
        ("-3", "-3"),
        ("\\$4", "4"),
    ],
)
def test_normalize_number(text, value):
    assert normalize_number(text) == Decimal(value)


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "nan", "inf", "1" * 20_000])
def test_normalize_number_rejects(text):
    assert normalize_number(text) is None


def test_last_number_and_truncate():
    assert last_number("a 1, b -2.5 c") == "-2.5"
    assert last_number("none") is None
    assert truncate("x" * 500, 10) == "x" * 9 + "…"
    assert truncate(None) is None


@pytest.mark.parametrize(
    "text",
    [
        "1" * 1_000_000,
        "\\boxed{" + "{" * 1_000_000,
        "\\boxed" * 200_000,
        "1," * 500_000,
        "\\" * 1_000_000,
    ],
    ids=["digits", "open-braces", "many-boxes", "commas", "backslashes"],
)
def test_helpers_are_linear_on_huge_inputs(text):
    start = time.perf_counter()
    last_boxed(text)
    last_number(text)
    assert time.perf_counter() - start < 10  # linear: milliseconds; catastrophic backtracking: hours


def test_boxes_lists_every_balanced_box_in_order():
    from rewardkit.scorers._text import boxes

    text = "a \\boxed{1} b \\fbox{2} c \\boxed{\\frac{1}{\\boxed{3}}} d \\boxed 4 e \\boxedx"
    assert [c for _s, _e, c in boxes(text)] == ["1", "2", "\\frac{1}{\\boxed{3}}", "4"]
    start, end, _ = boxes(text)[0]
    assert text[start:end] == "\\boxed{1}"
    assert boxes("\\boxed{1} \\boxed{2") == [(0, 9, "1")]  # an unbalanced box ends the scan
    assert boxes("") == [] and boxes("no box") == []
    assert len(boxes("\\boxed{1}" * 100_000)) == 100_000  # linear


def test_first_sentence_skips_stops_inside_maths():
    from rewardkit.scorers._text import first_sentence

    assert first_sentence(" $16\\pi$. I hope it is correct.") == " $16\\pi$"
    assert first_sentence(" \\(3.5\\). Next") == " \\(3.5\\)"
    assert first_sentence(":\n\\[ x = 1. \\]\nDone.") == ":\n\\[ x = 1. \\]"
    assert first_sentence(" Verna received $7.00 in change. Bye") == " Verna received $7.00 in change"
    assert first_sentence("no stop at all") == "no stop at all"
    assert len(first_sentence("x" * 10_000)) == 400
