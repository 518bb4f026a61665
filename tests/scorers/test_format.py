"""Format rewards: think_format, boxed_format, regex_format."""

from __future__ import annotations

import time

import pytest

from rewardkit.scorers.format import boxed_format, regex_format, think_format


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think>reasoning</think>The answer is 4.", 1.0),
        ("  <think>\nmulti\nline\n</think>\n\n#### 4", 1.0),
        ("<think>reasoning</think>", 0.0),
        ("<think>reasoning</think>   \n", 0.0),
        ("<think>no close tag. The answer is 4", 0.0),
        ("The answer is 4", 0.0),
        ("reasoning</think>answer", 0.0),
        ("<think>a</think>b</think>c", 0.0),
        ("<think>a<think>b</think>c", 0.0),
        ("<think>a</think>b<think>c", 0.0),
        ("", 0.0),
        ("<think>思考</think>答案：四", 1.0),
    ],
)
def test_think_format(response, expected):
    assert think_format(response) == expected


def test_think_format_options():
    assert think_format("reasoning</think>answer", require_open_tag=False) == 1.0
    assert think_format("<think>a<think>b</think>c", allow_nested=True) == 1.0


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("so \\boxed{4}", 1.0),
        ("\\boxed{}", 0.0),
        ("\\boxed{4", 0.0),
        ("4", 0.0),
        ("", 0.0),
        ("\\fbox{x}", 1.0),
    ],
)
def test_boxed_format(response, expected):
    assert boxed_format(response) == expected


def test_regex_format_modes_and_flags():
    pattern = r"<think>.*</think>\s*<answer>.*</answer>"
    good = "<think>\nx\n</think>\n<answer>4</answer>\n"
    assert regex_format(good, pattern=pattern) == 1.0
    assert regex_format(good + "trailing", pattern=pattern) == 0.0
    assert regex_format(good + "trailing", pattern=pattern, mode="match") == 1.0
    assert regex_format("x " + good, pattern=pattern, mode="search") == 1.0
    assert regex_format("ANSWER", pattern="answer") == 0.0
    assert regex_format("ANSWER", pattern="answer", flags="i") == 1.0
    assert regex_format(" a ", pattern="a", strip=False) == 0.0
    with pytest.raises(ValueError, match="mode"):
        regex_format("a", pattern="a", mode="all")
    with pytest.raises(ValueError, match="flag"):
        regex_format("a", pattern="a", flags="z")


def test_huge_inputs():
    start = time.perf_counter()
    big = "<think>" + "x" * 1_000_000
    assert think_format(big) == 0.0
    assert think_format(big + "</think>ok") == 1.0
    assert boxed_format("\\boxed{" * 100_000) == 0.0
    assert time.perf_counter() - start < 10
