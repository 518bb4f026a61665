"""Format rewards: does the response have the expected shape? Usually a small component of a composite reward.

No data source routes to these by default; name them in ``reward.scorers``.
"""

from __future__ import annotations

import functools
import re

from rewardkit.scorers._text import last_boxed

OPEN_THINK = "<think>"
CLOSE_THINK = "</think>"


def think_format(response: str, require_open_tag: bool = True, allow_nested: bool = False) -> float:
    """1.0 if the response is ``<think>...</think>`` followed by a non-empty answer, else 0.0.

    ``require_open_tag=False`` accepts a response that starts inside the reasoning (the chat template
    already emitted ``<think>``, as DeepSeek-R1-style templates do). Exactly one ``</think>`` is
    allowed, and no ``<think>`` after it, unless ``allow_nested=True``.
    """
    text = (response or "").lstrip()
    if text.startswith(OPEN_THINK):
        body_start = len(OPEN_THINK)
    elif require_open_tag:
        return 0.0
    else:
        body_start = 0
    close = text.find(CLOSE_THINK, body_start)
    if close < 0:
        return 0.0
    thinking, answer = text[body_start:close], text[close + len(CLOSE_THINK) :]
    if not answer.strip():
        return 0.0
    if not allow_nested and (OPEN_THINK in thinking or OPEN_THINK in answer or CLOSE_THINK in answer):
        return 0.0
    return 1.0


def boxed_format(response: str) -> float:
    """1.0 if the response holds a balanced, non-empty ``\\boxed{...}`` (or ``\\fbox{}``/``\\boxed N``), else 0.0."""
    boxed = last_boxed(response or "")
    return 1.0 if boxed is not None and boxed.strip() else 0.0


_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE, "a": re.ASCII}
MODES = ("fullmatch", "search", "match")


@functools.lru_cache(maxsize=256)
def _compile(pattern: str, flags: str) -> re.Pattern:
    value = 0
    for f in flags:
        if f not in _FLAGS:
            raise ValueError(f"regex_format: unknown flag {f!r}; use letters from {''.join(_FLAGS)!r}")
        value |= _FLAGS[f]
    return re.compile(pattern, value)


def regex_format(
    response: str, pattern: str, mode: str = "fullmatch", flags: str = "s", strip: bool = True
) -> float:
    """1.0 if ``response`` matches the regular expression ``pattern``, else 0.0.

    ``mode``: ``"fullmatch"`` (the whole response, the default), ``"match"`` (a prefix) or
    ``"search"`` (anywhere). ``flags``: letters among ``imsxa`` (default ``"s"``: ``.`` matches
    newlines). ``strip`` removes surrounding whitespace first. The pattern comes from your config:
    keep it free of nested quantifiers such as ``(a+)+`` (they backtrack catastrophically).
    """
    if mode not in MODES:
        raise ValueError(f"regex_format: mode must be one of {MODES}, got {mode!r}")
    compiled = _compile(pattern, flags)
    text = (response or "").strip() if strip else (response or "")
    return 1.0 if getattr(compiled, mode)(text) is not None else 0.0
