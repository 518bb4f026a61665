"""Competition maths (MATH, MATH-500, NuminaMath...): the final answer, checked with math-verify.

The answer is found as a careful grader would (:func:`extract_answer`): the last box (several boxes
in the final sentence are one tuple), else the final-answer sentence, else a concluding "Therefore
... is X", else math-verify's own extraction of the response's end; the rule is reported as
``extracted_by``. Equivalence is decided by `math-verify <https://github.com/huggingface/Math-Verify>`_
(``\\frac{1}{2}`` = ``0.5`` = ``1/2``, ``x=3`` = ``3``, ``[1,3)`` = ``[1, 3)``, sets in any order...),
never by ad-hoc string rules. math-verify's own signal-based timeouts are switched off so the scorer
works on any thread and in any worker process; the executor's deadline stops a runaway comparison.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

from rewardkit.scorers._text import boxes, first_sentence, last_boxed, truncate

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


# Decorations math-verify's normalisation does not cover: a list of choices wrapped in \text{}
# (``\text{A,D}``, else read as one word; other words stay text: unwrapped, ``no`` would be the
# product n*o and equal ``on``), the degree sign, a stray backslash before a number
# (``\15``, a lost ``\$``). Everything else (units in \text{}, ^\circ, \dfrac, \tfrac, \left,
# thousands separators...) is left to math-verify's own NormalizationConfig, on both sides.
_TEXT_WRAPPER = re.compile(r"^\s*\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}\s*\.?\s*$")
_CHOICES = re.compile(r"\s*\(?[A-Za-z]\)?\s*(?:(?:,|and)\s*\(?[A-Za-z]\)?\s*)+")
_STRAY_BACKSLASH = re.compile(r"(?<!\\)\\(?=\d)")


def _clean(text: str) -> str:
    m = _TEXT_WRAPPER.match(text)
    if m and _CHOICES.fullmatch(m.group(1)):
        text = m.group(1)
    return _STRAY_BACKSLASH.sub("", text.replace("°", "^{\\circ}"))


def clear_caches() -> None:
    """Forget every parsed answer and verdict (for benchmarks and tests)."""
    for cached in (_parse_boxed, _parse_free, _verdict):
        cached.cache_clear()


# Answer shapes that make math-verify's LaTeX parser and sympy load and build what they otherwise
# build on first use (the parser's prediction tables, sympy.physics.units on the first simplify...):
# about 0.6 s of CPU that the first real samples of every fresh process would pay.
_WARM_UP = (
    ("\\boxed{\\frac{1}{9}}", "0.1111"),
    ("\\boxed{\\sqrt{34} + 3\\sqrt{10}}", "28"),
    ("\\boxed{(1, 3]}", "[1,3)"),
    ("\\boxed{\\{1, 2\\}}", "\\{2,1\\}"),
    ("\\boxed{x^2 + 2x + 1}", "(x+1)^2"),
    ("\\boxed{45^\\circ}", "\\frac{\\pi}{4}"),
    ("\\boxed{4:30 \\text{ p.m.}}", "4:30p.m."),
    ("\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    ("The final answer is $\\dfrac{3}{4}\\pi$. I hope it is correct.", "\\frac{3\\pi}{4}"),
    ("Therefore, the value of \\(d\\) is \\(3\\).", "3"),
)


def warm_up() -> None:
    """Load and build what math-verify and sympy set up lazily, then forget the answers scored.

    The process executor calls this once in its fork server, so that every worker (a replacement
    too) starts warm instead of paying it on its first samples; without math-verify it does nothing.
    """
    try:
        for response, gold in _WARM_UP:
            compute_score(response, gold)
    except ImportError:
        return
    finally:
        clear_caches()


def _parse(text: str) -> list:
    mv = _math_verify()
    return mv.parse("\\boxed{" + _clean(text) + "}", parsing_timeout=None)


# A plain integer parses to what math-verify gives for it, without its LaTeX parser (the common
# GSM8K / AIME case; tests/scorers/test_math_extraction.py checks the two agree).
_PLAIN_INT = re.compile(r"-?[1-9]\d{0,17}|0")


def _plain_int(text: str) -> tuple | None:
    if _PLAIN_INT.fullmatch(text):
        import sympy

        return (sympy.Integer(int(text)), text)
    return None


@functools.lru_cache(maxsize=8192)
def _parse_boxed(text: str) -> tuple:
    """A boxed answer (or a gold answer), parsed once per distinct text."""
    return _plain_int(text.strip()) or tuple(_parse(text))


def _parse_answer(text: str) -> tuple:
    """An answer found in a sentence: as free text, else as LaTeX; a chain ``a = b = 40`` gives its end."""
    if text.count("=") >= 2 and "," not in text:
        text = text[text.rindex("=") + 1 :].strip(" \t\n\\]).$")
    return _parse_free(text) or _parse_boxed(text)


@functools.lru_cache(maxsize=8192)
def _parse_free(text: str) -> tuple:
    """math-verify's own LaTeX-then-expression extraction of free text, parsed once per distinct text."""
    fast = _plain_int(text.strip())
    if fast is not None:
        return fast
    mv = _math_verify()
    targets = (mv.LatexExtractionConfig(), mv.ExprExtractionConfig())
    # "\\$" in prose is a dollar sign, not a delimiter: math-verify's expression search skips "\\$1,250"
    text = text.replace("°", "^{\\circ}").replace("\\$", "")
    return tuple(mv.parse(text, targets, parsing_timeout=None))


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


#: How much of the response's end the sentence and free-text rules read.
TAIL_CHARS = 1500
# The final-answer sentence: "The final answer is", "Final answer:", "Answer:", "the answer is".
_FINAL_ANSWER = re.compile(r"(?:final\s+answer|\banswer)(?:\s*\**\s*:|\s+is\b\s*:?)", re.IGNORECASE)
# "Therefore / Thus / Hence / So ..., ... is X" starting a sentence.
_CONCLUSION = re.compile(r"(?:^|(?<=[.!?\n])\s*)(?:therefore|thus|hence|so)\b", re.IGNORECASE | re.MULTILINE)
_IS = re.compile(r"\s(?:is|are|was|were|be|equals)\b:?", re.IGNORECASE)
# A conclusion is final only if little follows it ("I hope it is correct.").
_AFTER_CONCLUSION = 150
# Boxes this close together, with no sentence end between, are one answer ("\boxed{-1} and \boxed{-9}").
_BOX_GAP = 60
# Only connectives between them: "$\boxed{1}$, $\boxed{2}$", "\(\boxed{-1}\) and \(\boxed{-9}\)",
# "x=\boxed{1}, y=\boxed{2}" ("first \boxed{3}, finally \boxed{4}" is a correction, not a tuple).
_BOX_JOIN = re.compile(r"[\s$\\(),;]*(?:(?:and|or)\s+)?[\s$\\(]*(?:[A-Za-z]\w*\s*=\s*)?[\s$\\(]*")

#: Rules reported in ``extra.extracted_by``, most explicit first.
RULES = ("boxed", "boxed_multi", "answer_sentence", "conclusion", "math_verify")


def _final_boxes(text: str) -> tuple[str, str] | None:
    found = boxes(text)
    if not found:
        return None
    group = [found[-1]]
    for prev in reversed(found[:-1]):
        gap = text[prev[1] : group[-1][0]]
        if len(gap) > _BOX_GAP or not _BOX_JOIN.fullmatch(gap):
            break
        group.append(prev)
    parts = list(dict.fromkeys(c.strip() for _s, _e, c in reversed(group) if c.strip()))
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0], "boxed"
    return ", ".join(parts), "boxed_multi"


def extract_answer(response: str, strict_box: bool = False) -> tuple[str, str, tuple] | None:
    """The final answer of ``response`` as ``(text, rule, parsed)``, or ``None``.

    Rules, in order: the last box (``boxed``; several boxes in the final sentence are one tuple,
    ``boxed_multi``); the last final-answer sentence (``answer_sentence``: "The final answer is",
    "Answer:", "the answer is"); a concluding "Therefore/Thus/So ... is X" sentence in the last
    paragraph (``conclusion``); math-verify's own LaTeX/expression extraction of the response's end
    (``math_verify``). A rule whose text math-verify cannot parse gives way to the next one.
    ``strict_box=True`` keeps only the box rules.
    """
    boxed = _final_boxes(response)
    if boxed is not None:
        parsed = _parse_boxed(boxed[0])
        if parsed:
            return boxed[0], boxed[1], parsed
    if strict_box:
        return None
    tail = response[-TAIL_CHARS:].rstrip()
    last = None
    for m in _FINAL_ANSWER.finditer(tail):
        last = m
    if last is not None:
        sentence = first_sentence(tail[last.end() :]).strip(" \t\n*:")
        parsed = _parse_answer(sentence) if sentence else ()
        if parsed:
            return sentence, "answer_sentence", parsed
    paragraph = tail[tail.rfind("\n\n") + 1 :]  # the whole tail when it is one paragraph
    conclusion = None
    for m in _CONCLUSION.finditer(paragraph):
        conclusion = m
    if conclusion is not None:
        rest = paragraph[conclusion.end() :]
        sentence = first_sentence(rest)
        if len(rest) - len(sentence) <= _AFTER_CONCLUSION:
            verb = None
            for m in _IS.finditer(sentence):
                verb = m
            answer = (sentence[verb.end() :] if verb is not None else sentence).strip(" \t\n*:,")
            parsed = _parse_answer(answer) if answer else ()
            if parsed:
                return answer, "conclusion", parsed
    parsed = _parse_free(tail)
    if parsed:
        return str(parsed[-1]), "math_verify", parsed
    return None


def _is_int_pair(parsed) -> bool:
    import sympy

    return len(parsed) == 2 and isinstance(parsed[0], sympy.Integer) and isinstance(parsed[1], str)


@functools.lru_cache(maxsize=16384)
def _verdict(gold: str, pred: tuple) -> bool:
    mv = _math_verify()
    parsed_gold = list(_parse_boxed(gold))
    if not parsed_gold:
        raise ValueError(f"math: math-verify cannot parse the ground truth {truncate(gold, 80)!r}")
    if _is_int_pair(parsed_gold) and _is_int_pair(pred):  # what math-verify decides, without sympy
        return parsed_gold[0] == pred[0]
    return bool(mv.verify(parsed_gold, list(pred), timeout_seconds=None))


def _check(gold: str, pred: tuple) -> bool:
    try:
        hash(pred)
    except TypeError:  # a matrix answer (sympy's mutable Matrix): verified, not cached
        return _verdict.__wrapped__(gold, pred)
    return _verdict(gold, pred)


def is_equivalent(gold: str, pred: str) -> bool:
    """Whether the boxed-style answer ``pred`` is equivalent to ``gold`` according to math-verify."""
    parsed = _parse_boxed(pred)
    return bool(parsed) and _check(gold, parsed)


def compute_score(
    response: str,
    ground_truth: Any,
    correct_score: float = 1.0,
    wrong_score: float = 0.0,
    strict_box: bool = False,
):
    """Score a maths response by its final answer (see :func:`extract_answer` for how it is found).

    Returns ``{"score": correct_score | wrong_score, "acc": bool, "pred": the answer text or None,
    "extracted_by": the rule that found it, or None}``. ``strict_box=True`` rewards only boxed
    answers: an unboxed correct answer scores ``wrong_score``.
    """
    golds = gold_answers(ground_truth)
    for g in golds:  # an unusable reference is the data's fault: say so rather than score 0
        if not _parse_boxed(g):
            raise ValueError(f"math: math-verify cannot parse the ground truth {truncate(g, 80)!r}")
    found = extract_answer(response or "", strict_box=strict_box)
    if found is None:
        return {"score": float(wrong_score), "acc": False, "pred": None, "extracted_by": None}
    text, rule, parsed = found
    acc = any(_check(g, parsed) for g in golds)
    score = correct_score if acc else wrong_score
    return {"score": float(score), "acc": acc, "pred": truncate(text.strip()), "extracted_by": rule}
