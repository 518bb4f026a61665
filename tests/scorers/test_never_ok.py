"""Never ``ok`` with a bad number: text returned as a score, a lost response, a judge's malformed score."""

from __future__ import annotations

import pytest

from rewardkit import RewardEngine
from rewardkit.backends.judge_parsers import ParseError, build_parser
from rewardkit.batch import to_sample, to_samples
from rewardkit.errors import SampleError
from rewardkit.scoring import to_result


@pytest.mark.parametrize("value", ["1.0", "0", b"1", {"score": "1.0"}, {"score": "nan"}])
def test_a_score_returned_as_text_is_invalid_return(value):
    r = to_result(value)
    assert (r.status, r.reason, r.score) == ("failed", "invalid_return", None)
    assert "not a number" in r.error


def test_a_custom_function_returning_text_fails_that_sample_only(tmp_path):
    path = tmp_path / "text_score.py"
    path.write_text("def compute_score(response):\n    return '1.0' if response == 'a' else 1.0\n")
    with RewardEngine({"custom_reward_function": {"path": str(path)}}) as engine:
        result = engine.compute([{"response": "a"}, {"response": "b"}])
    assert result.status == ["failed", "ok"] and result.reasons[0] == "invalid_return"


@pytest.mark.parametrize("field", ["response", "solution_str"])
def test_a_none_response_is_a_sample_error_naming_the_field(field):
    with pytest.raises(SampleError, match=f"sample 3, field '{field}': is None") as info:
        to_sample({field: None, "ground_truth": "1"}, 3)
    assert info.value.index == 3 and info.value.field == field
    with pytest.raises(SampleError, match="response"), RewardEngine() as engine:
        engine.compute(
            [{"response": "\\boxed{1}", "ground_truth": "1", "data_source": "math"}, {"response": None}]
        )
    assert to_samples([{"response": ""}])[0].response == ""  # empty is a real (wrong) answer, not an error


@pytest.mark.parametrize(
    "text",
    [
        "Score: 1e309",
        "Score: 1,000",
        "Score: 1e2",
        "score: 0x10",
        "Score: 7.5.1",
        "Score: 8\nOn second thought the final score: 3",
        "**Score:** 9\nscore = 2",
    ],
)
def test_score_line_rejects_malformed_or_conflicting_scores(text):
    with pytest.raises(ParseError):
        build_parser("score_line")(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("Score: 8.", 8.0), ("Score: 8, well argued", 8.0), ("Score: 7/10", 7.0), ("Score: 6\n\nScore: 6", 6.0)],
)
def test_score_line_still_reads_plain_scores(text, value):
    assert build_parser("score_line")(text) == value


@pytest.mark.parametrize("text", ["I rate it 1e2", "I rate it 1,000", "rating 0x10", "1e309"])
def test_last_int_does_not_read_part_of_a_number(text):
    with pytest.raises(ParseError):
        build_parser("last_int")(text)


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ("json", '{"score": 1e309}'),
        ("json", '{"score": NaN}'),
        ({"name": "regex", "pattern": r"rating=(\S+)"}, "rating=0x10"),
        ({"name": "regex", "pattern": r"rating=(\S+)"}, "rating=1,000"),
        ({"name": "regex", "pattern": r"rating=(\S+)"}, "rating=inf"),
    ],
)
def test_other_parsers_reject_non_numbers(spec, text):
    with pytest.raises(ParseError):
        build_parser(spec)(text)


@pytest.mark.parametrize("score", [float("nan"), float("inf"), "1.0", None])
def test_an_ok_result_object_with_a_bad_score_is_invalid_return(score):
    from rewardkit.result import SampleResult

    r = to_result(SampleResult(score=score, status="ok"))
    assert (r.status, r.reason) == ("failed", "invalid_return")
    assert to_result(SampleResult.ok(0.5)).score == 0.5  # a good one passes through
