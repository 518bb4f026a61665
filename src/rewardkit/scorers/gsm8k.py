"""GSM8K: grade-school maths word problems with a single numeric answer.

The final answer is taken from, in order of preference: ``#### N`` (GSM8K's own format),
``\\boxed{N}``, ``the answer is N``, an ``Answer: N`` / ``A: N`` line, and finally the last number
in the response (``method="flexible"``, the default). ``method="strict"`` accepts only ``#### N``,
as verl's strict mode does. Numbers compare by value: ``1,234`` = ``1234``, ``$72.`` = ``72.0`` = ``72``.
"""

from __future__ import annotations

import functools
import re
from decimal import Context, Decimal
from typing import Any

from rewardkit.scorers._text import last_boxed, last_number, normalize_number, truncate

_NUM = r"((?:-\$?)?\d[\d,]*(?:\.\d+)?|-?\.\d+)"
# Single character-class quantifiers only: linear on any input.
_HASHES = re.compile(r"####[ \t$]*" + _NUM)
_ANSWER_IS = re.compile(r"answer\s+is[\s:$*]*" + _NUM, re.IGNORECASE)
_ANSWER_LINE = re.compile(r"^[ \t*#>]*(?:final[ \t]+)?(?:answer|a)[ \t*]*:[ \t*$]*" + _NUM, re.I | re.M)

METHODS = ("flexible", "strict")


def _last(pattern: re.Pattern, text: str) -> str | None:
    last = None
    for m in pattern.finditer(text):
        last = m.group(1)
    return last


def _last_hashes(text: str) -> str | None:
    """``_last(_HASHES, text)``, searched from the end: a match holds no ``#`` past its first four,
    so no two matches overlap and the last one starts at the last ``####`` that matches."""
    end = len(text)
    while (at := text.rfind("####", 0, end)) >= 0:
        m = _HASHES.match(text, at)
        if m is not None:
            return m.group(1)
        end = at + 3  # (candidates overlapping this one included)
    return None


def extract_answer(response: str, method: str = "flexible") -> str | None:
    """The final numeric answer in ``response`` as written (``"1,234"``), or ``None``."""
    if method not in METHODS:
        raise ValueError(f"gsm8k: method must be one of {METHODS}, got {method!r}")
    found = _last_hashes(response)
    if found is not None or method == "strict":
        return found
    boxed = last_boxed(response)
    if boxed is not None:
        inner = last_number(boxed)
        if inner is not None:
            return inner
    for pattern in (_ANSWER_IS, _ANSWER_LINE):
        found = _last(pattern, response)
        if found is not None:
            return found
    return last_number(response)


def _canonical(value: Decimal) -> str:
    # normalize() rounds to the context's 28 digits: give it every digit of the number
    text = format(value.normalize(Context(prec=max(28, len(value.as_tuple().digits)))), "f")
    return "0" if text in ("-0", "") else text


@functools.lru_cache(maxsize=65536)
def _number(text: str) -> tuple[Decimal, str] | None:
    """``normalize_number`` of an answer or gold text and its canonical form, once per distinct text
    (a GRPO group repeats its gold, and answers repeat across samples)."""
    value = normalize_number(text)
    return None if value is None else (value, _canonical(value))


@functools.lru_cache(maxsize=16384)
def _gold_of_text(ground_truth: str) -> Decimal | None:
    text = ground_truth.rsplit("####", 1)[-1] if "####" in ground_truth else ground_truth
    value = normalize_number(text)
    if value is None:
        tail = last_number(text)
        value = normalize_number(tail) if tail is not None else None
    return value


def parse_ground_truth(ground_truth: Any) -> Decimal:
    """The reference answer as a number: ``72``, ``"72"``, ``"1,234"`` or a full GSM8K answer ending in ``#### 72``."""
    if isinstance(ground_truth, bool) or ground_truth is None:
        raise ValueError(f"gsm8k: ground_truth must be a number or text, got {ground_truth!r}")
    if isinstance(ground_truth, int | float | Decimal):
        value = normalize_number(str(ground_truth))
    elif isinstance(ground_truth, str):
        value = (
            _gold_of_text(ground_truth)
            if len(ground_truth) <= 1000
            else _gold_of_text.__wrapped__(ground_truth)
        )
    else:
        raise ValueError(f"gsm8k: ground_truth must be a number or text, got {type(ground_truth).__name__}")
    if value is None:
        raise ValueError(f"gsm8k: no number in ground_truth {truncate(str(ground_truth), 80)!r}")
    return value


def compute_score(
    response: str,
    ground_truth: Any,
    method: str = "flexible",
    format_score: float = 0.0,
    score: float = 1.0,
) -> dict[str, Any]:
    """Score a GSM8K response: ``score`` if its final answer equals the reference, else ``format_score``
    when an answer was found, else ``0.0``.

    Returns ``{"score", "acc" (bool), "pred" (the answer found, canonical form, or None)}``.
    """
    gold = parse_ground_truth(ground_truth)
    raw = extract_answer(response or "", method)
    if raw is None:
        return {"score": 0.0, "acc": False, "pred": None}
    pred = _number(raw) if len(raw) <= 1000 else _number.__wrapped__(raw)
    if pred is None:  # e.g. "####" followed by "1.2.3"
        return {"score": float(format_score), "acc": False, "pred": truncate(raw)}
    acc = pred[0] == gold
    return {"score": float(score if acc else format_score), "acc": acc, "pred": truncate(pred[1])}
