"""Structured-output scorers: does the response parse as JSON, and does it match a JSON Schema?

Validation is done by the :mod:`jsonschema` library (the schema's ``$schema`` picks the draft;
default 2020-12; ``format`` is checked).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

#: A fenced code block: ```json ... ``` (any or no language tag).
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n(.*?)```", re.DOTALL)
#: At most this many validation error messages are reported in ``extra``.
MAX_ERRORS = 5


class _NoJSON(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    # Python's json module accepts NaN and Infinity; JSON (RFC 8259) does not, nor do other parsers.
    raise _NoJSON(f"{name} is not a JSON value")


def _loads(text: str, what: str) -> Any:
    """``json.loads`` that refuses NaN/Infinity; raises :class:`_NoJSON` naming ``what`` failed."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise _NoJSON(f"{what}: {e.msg} at line {e.lineno} column {e.colno}") from None
    except _NoJSON as e:
        raise _NoJSON(f"{what}: {e}") from None


def extract_json(response: str) -> Any:
    """The JSON value in ``response``: the whole (stripped) text, else the first fenced block that parses.

    Blocks tagged ``json`` are tried before untagged ones. ``NaN`` and ``Infinity`` are not JSON.
    Raises :class:`ValueError` with the parser's message (the last failure) when nothing parses.
    """
    text = response.strip()
    if not text:
        raise _NoJSON("empty response")
    try:
        return _loads(text, "not JSON")
    except _NoJSON as e:
        error = e
    blocks = sorted(_FENCE.finditer(response), key=lambda m: m.group(1).lower() != "json")
    for m in blocks:
        if m.group(1).lower() not in ("", "json", "json5", "jsonc"):
            continue
        try:
            return _loads(m.group(2), "fenced block is not JSON")
        except _NoJSON as e:
            error = e
    raise error


def json_valid(response: str) -> dict[str, Any]:
    """1.0 if the response is valid JSON (bare or in a fenced block), else 0.0 with ``json_error``."""
    try:
        extract_json(response)
    except ValueError as e:
        return {"score": 0.0, "json_valid": False, "json_error": str(e)}
    return {"score": 1.0, "json_valid": True}


def _load_schema(ground_truth: Any) -> dict[str, Any] | bool:
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError as e:
            raise ValueError(f"ground_truth is a string but not a JSON Schema document: {e.msg}") from None
    if not isinstance(ground_truth, dict | bool):
        raise ValueError(
            f"ground_truth must be a JSON Schema (object or bool), got {type(ground_truth).__name__}"
        )
    return ground_truth


@functools.lru_cache(maxsize=256)
def _validator(schema_text: str):
    from jsonschema import Draft202012Validator, validators
    from jsonschema.exceptions import SchemaError

    schema = json.loads(schema_text)
    cls = validators.validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as e:  # the dataset's fault: raise, so the sample fails with this message
        where = "/".join(map(str, e.absolute_path)) or "(root)"
        raise ValueError(f"ground_truth is not a valid JSON Schema at {where}: {e.message[:200]}") from None
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _field_credit(validator, schema: dict[str, Any], instance: dict[str, Any]) -> tuple[int, int, list[str]]:
    """(valid fields, fields counted, names of bad fields) over required ∪ present declared properties."""
    props = schema.get("properties") or {}
    required = [r for r in schema.get("required") or [] if isinstance(r, str)]
    fields = list(dict.fromkeys([*required, *(p for p in props if p in instance)]))
    good, bad = 0, []
    for name in fields:
        if name not in instance:
            bad.append(name)
            continue
        sub = validator.evolve(schema=props.get(name, True))
        if sub.is_valid(instance[name]):
            good += 1
        else:
            bad.append(name)
    return good, len(fields), bad


def json_schema(response: str, ground_truth: Any, partial_credit: bool = True) -> dict[str, Any] | None:
    """How well the response's JSON matches the JSON Schema in ``ground_truth`` (a dict or JSON text).

    * no ground truth → abstain (``None``); a ground truth that is not a valid schema → the sample
      fails (the scorer raises);
    * the response is not JSON → 0.0 with ``json_error``;
    * fully valid → 1.0;
    * otherwise, with ``partial_credit`` and an object schema and instance, partial credit: each
      *field* (required properties, plus declared properties that are present) earns a point when
      present and valid against its sub-schema, and the whole document earns one more point when
      fully valid; the score is points / (fields + 1), so it is below 1.0 whenever anything is
      invalid. Without fields to count (or ``partial_credit=False``) an invalid document scores 0.0.

    ``extra`` gets ``json_valid``, ``schema_valid``, ``fields_valid``/``fields_total``, ``invalid_fields``
    and the first few ``schema_errors``.
    """
    if ground_truth is None or ground_truth == "":
        return None
    schema = _load_schema(ground_truth)
    validator = _validator(json.dumps(schema, sort_keys=True))
    try:
        instance = extract_json(response)
    except ValueError as e:
        return {"score": 0.0, "json_valid": False, "schema_valid": False, "json_error": str(e)}
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    out: dict[str, Any] = {"json_valid": True, "schema_valid": not errors}
    if errors:
        out["schema_errors"] = [
            f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:200]}"
            for e in errors[:MAX_ERRORS]
        ]
    counted = 0
    if isinstance(schema, dict) and isinstance(instance, dict):
        good, counted, bad = _field_credit(validator, schema, instance)
        out.update(fields_valid=good, fields_total=counted, invalid_fields=bad)
    if not errors:
        out["score"] = 1.0
    elif partial_credit and counted:
        out["score"] = good / (counted + 1)
    else:
        out["score"] = 0.0
    return out
