"""Competition maths (MATH, MATH-500, AIME, NuminaMath): the last boxed answer, checked with math-verify.

The answer is the content of the last ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed N`` (balanced,
nested braces). Equivalence is decided by `math-verify <https://github.com/huggingface/Math-Verify>`_
(``\\frac{1}{2}`` = ``0.5`` = ``1/2``, ``x=3`` = ``3``, ``[1,3)`` = ``[1, 3)``, sets in any order...),
never by ad-hoc string rules. math-verify's own signal-based timeouts are switched off so the scorer
works on any thread and in any worker process; the executor's deadline stops a runaway comparison.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from rewardkit.scorers._text import last_boxed, truncate

_quieted = False


class _DropTimeoutWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


def _math_verify():
    global _quieted
    import math_verify

    if not _quieted:  # we disable math-verify's timeouts on purpose: its warning about it is noise
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_DropTimeoutWarning())
        _quieted = True
    return math_verify


def _parse(text: str) -> list:
    mv = _math_verify()
    return mv.parse("\\boxed{" + text + "}", parsing_timeout=None)


@functools.lru_cache(maxsize=4096)
def _parse_gold(text: str) -> tuple:
    return tuple(_parse(text))


def gold_answers(ground_truth: Any) -> list[str]:
    """The reference answer(s) as LaTeX strings.

    Accepts a string (a full solution containing ``\\boxed{...}`` is reduced to its box), a number,
    or a list of acceptable answers.
    """
    if isinstance(ground_truth, list | tuple):
        out = [a for g in ground_truth for a in gold_answers(g)]
        if not out:
            raise ValueError("math: ground_truth is an empty list")
        return out
    if isinstance(ground_truth, bool) or ground_truth is None:
        raise ValueError(f"math: ground_truth must be text or a number, got {ground_truth!r}")
    if isinstance(ground_truth, int | float):
        return [str(ground_truth)]
    if not isinstance(ground_truth, str):
        raise ValueError(f"math: ground_truth must be text or a number, got {type(ground_truth).__name__}")
    text = ground_truth.strip()
    if "\\boxed" in text or "\\fbox" in text:
        boxed = last_boxed(text)
        if boxed is not None:
            text = boxed.strip()
    text = text.strip("$ ").strip()
    if not text:
        raise ValueError("math: ground_truth is empty")
    return [text]


def is_equivalent(gold: str, pred: str) -> bool:
    """Whether ``pred`` is mathematically equivalent to ``gold`` according to math-verify (gold first)."""
    mv = _math_verify()
    parsed_gold = list(_parse_gold(gold))
    if not parsed_gold:
        raise ValueError(f"math: math-verify cannot parse the ground truth {truncate(gold, 80)!r}")
    parsed_pred = _parse(pred)
    if not parsed_pred:
        return False
    return bool(mv.verify(parsed_gold, parsed_pred, timeout_seconds=None))


def compute_score(response: str, ground_truth: Any, correct_score: float = 1.0, wrong_score: float = 0.0):
    """Score a maths response by its last boxed answer.

    Returns ``{"score": correct_score | wrong_score, "acc": bool, "pred": the boxed text or None}``.
    A response without a (balanced) box is wrong, with ``pred=None``.
    """
    golds = gold_answers(ground_truth)
    pred = last_boxed(response or "")
    if pred is None or not pred.strip():
        return {"score": float(wrong_score), "acc": False, "pred": None}
    pred = pred.strip()
    acc = any(is_equivalent(g, pred) for g in golds)
    return {"score": float(correct_score if acc else wrong_score), "acc": acc, "pred": truncate(pred)}
