"""DAPO maths (verl's ``math_dapo`` reward): an ``Answer: ...`` line, Minerva-style normalisation, ±1.

Semantics follow verl's ``verl/utils/reward_score/math_dapo.py`` so rewards are comparable with
runs made there:

* only the last 300 characters of the response are looked at;
* the answer is the last ``Answer: <rest of line>`` (case-insensitive); prediction and reference are
  normalised the Minerva way (units, ``\\text{}``, ``\\frac12``, thousands separators...) and
  compared as strings;
* without an ``Answer:`` line, the last ``\\boxed{...}`` of the final 100 characters is compared to
  the reference as written, without normalisation (verl 0.9.1's fallback; ``boxed_fallback=False``
  turns it off, as in older verl);
* ``strict_box_verify=True``: only the last ``\\boxed{...}`` in the final 100 characters counts,
  compared to the reference *without* normalisation;
* the score is ``+1.0`` (correct) or ``-1.0`` (wrong), with ``acc`` and ``pred`` alongside
  (``pred`` is ``"[INVALID]"`` when no answer was found).
"""

from __future__ import annotations

import re
from typing import Any

INVALID = "[INVALID]"
#: How much of the response verl looks at (the longest MATH-500 answer has 159 characters).
TAIL_CHARS = 300
BOX_TAIL_CHARS = 100

_ANSWER = re.compile(r"Answer\s*:\s*([^\n]+)", re.IGNORECASE)

# Minerva normalisation tables (lm-evaluation-harness hendrycks_math, as used by verl).
_REPLACE = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
_DROP = (
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    "\\mathrm{th}",
    "^\\circ",
    "^{\\circ}",
    "\\;",
    ",\\!",
    "{,}",
    '"',
    "\\dots",
)
_REWRITES = (
    (re.compile(r"(.*?)(\$)(.*?)(\$)(.*)"), "$\\3$"),  # keep the first $...$ span
    (re.compile(r"(\\text\{)(.*?)(\})"), "\\2"),
    (re.compile(r"(\\textbf\{)(.*?)(\})"), "\\2"),
    (re.compile(r"(\\overline\{)(.*?)(\})"), "\\2"),
    (re.compile(r"(\\boxed\{)(.*)(\})"), "\\2"),
    (re.compile(r"(frac)([^{])(.)"), "frac{\\2}{\\3}"),  # \frac12 -> \frac{1}{2}
    (re.compile(r"(sqrt)([^{])"), "sqrt{\\2}"),  # \sqrt2 -> \sqrt{2}
)


def normalize_final_answer(answer: str) -> str:
    """Minerva normalisation of a final answer, as verl's ``math_dapo`` applies it."""
    text = answer.split("=")[-1]
    for old, new in _REPLACE:
        text = text.replace(old, new)
    for junk in _DROP:
        text = text.replace(junk, "")
    for pattern, repl in _REWRITES:
        text = pattern.sub(repl, text)
    text = text.replace("$", "")
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


def last_boxed_brace(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (brace form only, as verl), or ``None``."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    close = _naive_matching_brace(text, start)
    return None if close is None else text[start + len("\\boxed{") : close]


def _naive_matching_brace(text: str, start: int) -> int | None:
    # verl counts every brace, escaped or not; keep that so scores agree.
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def verify(
    response: str, ground_truth: str, strict_box_verify: bool = False, boxed_fallback: bool = True
) -> tuple[bool, str]:
    """``(correct, pred)`` for an already-truncated response, as verl 0.9.1's ``math_dapo.verify``."""
    box_tail = response[-BOX_TAIL_CHARS:]
    if strict_box_verify:
        pred = last_boxed_brace(box_tail)
        return pred == ground_truth, INVALID if pred is None else pred
    matches = _ANSWER.findall(response)
    gold = normalize_final_answer(ground_truth)
    # verl normalises the "[INVALID]" marker too; it never matches a real reference
    pred = normalize_final_answer(matches[-1] if matches else INVALID)
    if pred != INVALID or not boxed_fallback:
        return pred == gold, pred
    boxed = last_boxed_brace(box_tail)
    if boxed is not None:  # verl compares the box as written, not normalised
        return boxed == ground_truth, boxed
    return pred == gold, pred


def compute_score(
    response: str, ground_truth: Any, strict_box_verify: bool = False, boxed_fallback: bool = True
) -> dict[str, Any]:
    """Score a DAPO maths response: ``{"score": 1.0 | -1.0, "acc": bool, "pred": str}``, as verl 0.9.1.

    Without an ``Answer:`` line the last ``\\boxed{...}`` of the final 100 characters is compared as
    written (``boxed_fallback=False``: no fallback, the response is wrong).
    """
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, str | int | float):
        raise ValueError(f"math_dapo: ground_truth must be text or a number, got {ground_truth!r:.80}")
    correct, pred = verify(
        (response or "")[-TAIL_CHARS:], str(ground_truth), strict_box_verify, boxed_fallback
    )
    return {"score": 1.0 if correct else -1.0, "acc": bool(correct), "pred": pred}
