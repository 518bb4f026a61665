"""Score parsers: turn a judge's text into a number, or say clearly that they cannot.

Built-ins (configured as a name, or ``{"name": ..., **options}``):

* ``score_line``: the number on the ``Score: N`` line (``Score: 7/10``, ``**Score:** 8`` work too); a
  malformed number (``1e2``, ``1,000``, ``0x10``) or several lines with different scores are an error
* ``last_int``: the last integer in the text (``1,000``, ``1e2``, ``0x10`` are not integers)
* ``json``: a field of the last JSON object (a ```json block is preferred); option ``field``
  (default ``"score"``, dotted paths allowed)
* ``yes_no``: the last of the words ``yes`` / ``no`` (options ``yes``, ``no``: word lists;
  ``yes_value`` 1.0, ``no_value`` 0.0)
* ``regex``: group 1 (or ``group``) of the last match of ``pattern``

Every parser raises :class:`ParseError` when the text holds no score; the backend then reports
the sample ``failed`` / ``unparseable`` with the judge's text, never a 0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from rewardkit.errors import ConfigError

Parser = Callable[[str], float]

_NUMBER = r"[-+]?\d+(?:\.\d+)?"
# A number ends at a word boundary: "1e2", "1,000", "0x10", "7.5.1" are not the number 1, 1, 0, 7.5.
_END = r"(?![\w]|[.,]\d)"
_SCORE_KEY = re.compile(r"\bscore\b\**\s*[:=]\s*\**\s*", re.IGNORECASE)
_PLAIN_NUMBER = re.compile(_NUMBER + _END)
_INT = re.compile(r"(?<![\w.])(?<!\d,)[-+]?\d+" + _END)
_JSON_BLOCK = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)


class ParseError(ValueError):
    """The judge's text holds no score this parser understands."""


def _to_float(value: Any, what: str) -> float:
    if isinstance(value, bool):
        return float(value)
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ParseError(f"{what} is {value!r:.60}, not a number") from None
    if math.isnan(out) or math.isinf(out):
        raise ParseError(f"{what} is {out}")
    return out


def score_line() -> Parser:
    """The number on the ``Score:`` line; several lines must agree.

    The number must be a plain decimal that ends there: ``Score: 1e2``, ``Score: 1,000`` or
    ``score: 0x10`` are not read as 1, 1 or 0 but rejected, and so is a second ``Score:`` with
    another value later in the text (which one did the judge mean?).
    """

    def parse(text: str) -> float:
        values: list[float] = []
        for key in _SCORE_KEY.finditer(text):
            m = _PLAIN_NUMBER.match(text, key.end())
            if m is None:
                token = text[key.end() : key.end() + 20].split(maxsplit=1)
                if token and token[0][0] in "0123456789+-":
                    raise ParseError(f"judge score {token[0]!r:.30} is not a plain number")
                continue  # "score: (see below)" and the like: prose, not a score
            values.append(_to_float(m.group(), "judge score"))
        if not values:
            raise ParseError("no 'Score: N' line in the judge's answer")
        if len(set(values)) > 1:
            shown = ", ".join(f"{v:g}" for v in values[:5])
            raise ParseError(f"the judge's answer gives several different scores ({shown})")
        return values[-1]

    return parse


def last_int() -> Parser:
    """The last integer in the text."""

    def parse(text: str) -> float:
        found = _INT.findall(text)
        if not found:
            raise ParseError("no integer in the judge's answer")
        return float(int(found[-1]))

    return parse


def _json_objects(text: str) -> list[Any]:
    decoder = json.JSONDecoder()
    out = []
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        out.append(obj)
        i = text.find("{", end)
    return out


def json_field(field: str = "score") -> Parser:
    """Field ``field`` (dotted path) of the last JSON object, preferring a fenced ```json block."""
    path = field.split(".")

    def parse(text: str) -> float:
        candidates: list[Any] = []
        for block in _JSON_BLOCK.findall(text):
            candidates.extend(_json_objects(block))
        if not candidates:
            candidates = _json_objects(text)
        for obj in reversed(candidates):
            value: Any = obj
            for part in path:
                if not isinstance(value, dict) or part not in value:
                    break
                value = value[part]
            else:
                return _to_float(value, f"JSON field {field!r}")
        raise ParseError(f"no JSON object with a {field!r} field in the judge's answer")

    return parse


def yes_no(
    yes: list[str] | tuple[str, ...] = ("yes",),
    no: list[str] | tuple[str, ...] = ("no",),
    yes_value: float = 1.0,
    no_value: float = 0.0,
) -> Parser:
    """The last yes/no word: ``yes_value`` or ``no_value``."""
    words = {w.lower(): yes_value for w in yes} | {w.lower(): no_value for w in no}
    if not words:
        raise ConfigError("yes_no parser: give at least one yes or no word")
    pattern = re.compile(
        r"(?<![\w-])(" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")(?![\w-])",
        re.IGNORECASE,
    )

    def parse(text: str) -> float:
        found = pattern.findall(text)
        if not found:
            raise ParseError(f"no {'/'.join(sorted(words))} verdict in the judge's answer")
        return words[found[-1].lower()]

    return parse


def regex(pattern: str, group: int = 1) -> Parser:
    """Group ``group`` of the last match of ``pattern``."""
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"regex parser: bad pattern {pattern!r}: {e}") from None
    if compiled.groups < group:
        raise ConfigError(f"regex parser: pattern {pattern!r} has no group {group}")

    def parse(text: str) -> float:
        matches = list(compiled.finditer(text))
        if not matches:
            raise ParseError(f"pattern {pattern!r} does not match the judge's answer")
        return _to_float(matches[-1].group(group), f"regex group {group}")

    return parse


PARSERS: dict[str, Callable[..., Parser]] = {
    "score_line": score_line,
    "last_int": last_int,
    "json": json_field,
    "yes_no": yes_no,
    "regex": regex,
}


def build_parser(spec: str | dict[str, Any]) -> Parser:
    """A parser from a name or ``{"name": ..., **options}``; a :class:`ConfigError` names bad options."""
    if isinstance(spec, str):
        name, options = spec, {}
    elif isinstance(spec, dict) and isinstance(spec.get("name"), str):
        name, options = spec["name"], {k: v for k, v in spec.items() if k != "name"}
    else:
        raise ConfigError(f"parser must be a name or {{'name': ..., options}}, got {spec!r:.80}")
    factory = PARSERS.get(name)
    if factory is None:
        raise ConfigError(f"unknown judge parser {name!r}; known: {', '.join(sorted(PARSERS))}")
    try:
        return factory(**options)
    except TypeError as e:
        raise ConfigError(f"judge parser {name!r}: bad options {sorted(options)}: {e}") from None
