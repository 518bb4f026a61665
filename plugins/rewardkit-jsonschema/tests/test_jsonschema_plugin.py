"""Tests of the rewardkit-jsonschema plugin: the scorers, discovery as an installed package, the engine."""

from __future__ import annotations

import json

import pytest
import rewardkit_jsonschema
from rewardkit_jsonschema import extract_json, json_schema, json_valid

import rewardkit
from rewardkit.plugins import get_registries, reset
from rewardkit.testing import check_plugin

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture
def installed_registries():
    """The registries as the installed package's entry point provides them (fresh discovery)."""
    reset()
    yield get_registries()
    reset()


# -- extraction and json_valid -----------------------------------------------------------------


@pytest.mark.parametrize(
    "response, expected",
    [
        ('{"a": 1}', {"a": 1}),
        ("  [1, 2]\n", [1, 2]),
        ("42", 42),
        ('Here you go:\n```json\n{"a": "ü"}\n```\nDone.', {"a": "ü"}),
        ('```\n{"a": 1}\n```', {"a": 1}),
        ('```python\nx = 1\n```\n```json\n{"b": 2}\n```', {"b": 2}),
        ('```json\n{"a": \n```\n```json\n{"c": 3}\n```', {"c": 3}),
    ],
)
def test_extract_json_finds_bare_and_fenced_json(response, expected):
    assert extract_json(response) == expected


@pytest.mark.parametrize(
    "response",
    ["", "   ", "not json", "{'single': 'quotes'}", '```json\n{"a": }\n```', "NaN", '{"a": -Infinity}'],
)
def test_json_valid_scores_zero_with_a_reason_for_non_json(response):
    out = json_valid(response)
    assert out["score"] == 0.0 and out["json_valid"] is False
    assert out["json_error"]


def test_json_valid_scores_one_for_json():
    assert json_valid('{"ok": true}') == {"score": 1.0, "json_valid": True}


# -- json_schema -------------------------------------------------------------------------------


def test_fully_valid_document_scores_one():
    out = json_schema('{"name": "Ann", "age": 3, "email": "ann@example.org"}', PERSON)
    assert out["score"] == 1.0 and out["schema_valid"] is True
    assert out["fields_valid"] == out["fields_total"] == 3


@pytest.mark.parametrize(
    "doc, expected, bad",
    [
        ({"name": "Ann", "age": -1}, 1 / 3, ["age"]),  # 1 of 2 fields valid, document invalid
        ({"name": "Ann"}, 1 / 3, ["age"]),  # required field missing
        ({"name": "", "age": "x"}, 0.0, ["name", "age"]),
        ({"name": "Ann", "age": 3, "extra": 1}, 2 / 3, []),  # fields fine, additionalProperties broken
        ({"name": "Ann", "age": 3, "email": "nope"}, 2 / 4, ["email"]),  # format is checked
    ],
)
def test_partial_credit_per_field_stays_below_one(doc, expected, bad):
    out = json_schema(json.dumps(doc), PERSON)
    assert out["score"] == pytest.approx(expected)
    assert out["score"] < 1.0 and out["schema_valid"] is False
    assert out["invalid_fields"] == bad
    assert out["schema_errors"]


def test_partial_credit_follows_refs_to_definitions():
    schema = {
        "$defs": {"Age": {"type": "integer", "minimum": 0}},
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"$ref": "#/$defs/Age"}},
        "required": ["name", "age"],
    }
    out = json_schema('{"name": "Ann", "age": -1}', schema)
    assert out["score"] == pytest.approx(1 / 3) and out["invalid_fields"] == ["age"]
    assert json_schema('{"name": "Ann", "age": 1}', schema)["score"] == 1.0


def test_non_json_constants_are_not_valid_json():
    out = json_schema('{"name": "Ann", "age": NaN}', PERSON)
    assert out["score"] == 0.0 and out["json_valid"] is False and "NaN" in out["json_error"]


def test_partial_credit_can_be_turned_off():
    assert json_schema('{"name": "Ann"}', PERSON, partial_credit=False)["score"] == 0.0


def test_schema_as_json_text_and_non_object_schemas():
    assert json_schema("[1, 2]", json.dumps({"type": "array", "items": {"type": "integer"}}))["score"] == 1.0
    assert json_schema('[1, "x"]', {"type": "array", "items": {"type": "integer"}})["score"] == 0.0
    assert json_schema('"text"', PERSON)["score"] == 0.0  # an object schema, a string instance


def test_no_schema_abstains_and_non_json_scores_zero():
    assert json_schema('{"a": 1}', None) is None
    assert json_schema('{"a": 1}', "") is None
    out = json_schema("I refuse", PERSON)
    assert out["score"] == 0.0 and out["json_valid"] is False


def test_invalid_schema_raises_a_clear_error():
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        json_schema("{}", {"type": "nonsense"})
    with pytest.raises(ValueError, match="not a JSON Schema document"):
        json_schema("{}", "{not json")


def test_schema_draft_is_taken_from_dollar_schema():
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "number",
        "maximum": 5,
        "exclusiveMaximum": True,
    }
    assert json_schema("5", draft4)["score"] == 0.0
    assert json_schema("4.9", draft4)["score"] == 1.0


def test_huge_response_is_handled():
    doc = {"name": "A" * 200_000, "age": 1}
    assert json_schema(json.dumps(doc), PERSON)["score"] == 1.0


# -- as a plugin -------------------------------------------------------------------------------


def test_check_plugin_accepts_the_module():
    check = check_plugin(rewardkit_jsonschema)
    assert check.hooks == ["register_scorers"]
    assert check.registered == {"scorers": ["json_schema", "json_valid"]}
    assert check.warnings == []  # module-level functions, only known fields or defaults


def test_discovered_through_its_entry_point(installed_registries):
    info = next(p for p in installed_registries.plugins if p.name == "jsonschema")
    assert info.error is None and not info.builtin
    assert info.distribution == "rewardkit-jsonschema" and info.version == rewardkit_jsonschema.__version__
    assert installed_registries.scorers.name_for("structured_output") == "json_schema"
    assert installed_registries.scorers.name_for("json_valid") == "json_valid"


def test_scores_through_rewardkit_compute(installed_registries):
    samples = [
        {"data_source": "structured_output", "response": '{"name": "Ann", "age": 3}', "ground_truth": PERSON},
        {"data_source": "json_schema", "response": '```json\n{"name": "Ann"}\n```', "ground_truth": PERSON},
        {"data_source": "json_schema", "response": "no", "ground_truth": PERSON},
        {"data_source": "json_schema", "response": "{}", "ground_truth": None},
        {"data_source": "json_schema", "response": "{}", "ground_truth": {"type": 12}},
        {"data_source": "json_valid", "response": "[]"},
        {"data_source": "json_valid", "response": ""},
    ]
    result = rewardkit.compute(samples, {"executor": "inline"})
    assert result.status == ["ok", "ok", "ok", "abstained", "failed", "ok", "ok"]
    ok = [s for s, st in zip(result.scores, result.status, strict=True) if st == "ok"]
    assert ok == pytest.approx([1.0, 1 / 3, 0.0, 1.0, 0.0])
    assert result.reasons[4] == "error" and "not a valid JSON Schema" in result.errors[4]
    assert result.extra["invalid_fields"][1] == ["age"]
    assert result.metrics["reward/structured_output/mean"] == 1.0
