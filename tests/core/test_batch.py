import json

import pytest

from rewardkit.batch import Sample, read_jsonl, to_sample, to_samples
from rewardkit.errors import SampleError


def test_plain_record_becomes_sample():
    s = to_sample(
        {
            "prompt": "2+2?",
            "response": "4",
            "data_source": "x",
            "ground_truth": "4",
            "uid": 7,
            "extra_info": {"a": 1},
        },
        3,
    )
    assert s == Sample(
        index=3, response="4", prompt="2+2?", data_source="x", ground_truth="4", extra_info={"a": 1}, uid="7"
    )


def test_verl_layout_and_solution_str_alias():
    s = to_sample({"solution_str": "ok", "reward_model": {"ground_truth": [1, 2], "style": "rule"}}, 0)
    assert s.response == "ok"
    assert s.ground_truth == [1, 2]


def test_unknown_fields_kept_in_extra_info_without_overwriting():
    s = to_sample({"response": "r", "extra_info": {"split": "train"}, "split": "test", "difficulty": 3}, 0)
    assert s.extra_info == {"split": "train", "difficulty": 3}


def test_chat_prompt_and_prompt_text():
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi ☃"}]
    s = to_sample({"prompt": msgs, "response": ""}, 0)
    assert s.prompt_text == "be brief\nhi ☃"
    assert s.response == ""


@pytest.mark.parametrize(
    ("record", "field", "fragment"),
    [
        ({"prompt": "p"}, "response", "missing"),
        ({"response": 42}, "response", "must be a string, got int"),
        ({"solution_str": ["a"]}, "solution_str", "got list"),
        ({"response": "r", "prompt": 3}, "prompt", "string or chat messages"),
        ({"response": "r", "prompt": [{"role": "user"}]}, "prompt[0]", "'content'"),
        ({"response": "r", "data_source": 5}, "data_source", "must be a string"),
        ({"response": "r", "reward_model": "gt"}, "reward_model", "must be a dict"),
        ({"response": "r", "extra_info": [1]}, "extra_info", "must be a dict"),
        ({"response": "r", "uid": 1.5}, "uid", "string or int"),
        ({"response": "r", "response_length": -1}, "response_length", "non-negative"),
        ({"response": "r", "response_length": True}, "response_length", "non-negative"),
    ],
)
def test_validation_errors_name_sample_and_field(record, field, fragment):
    with pytest.raises(SampleError) as info:
        to_samples([{"response": "fine"}, record])
    err = info.value
    assert err.index == 1
    assert err.field == field
    assert f"sample 1, field {field!r}" in str(err)
    assert fragment in str(err)


def test_non_dict_record_and_non_list_batch():
    with pytest.raises(SampleError, match="sample 0: expected a dict, got str"):
        to_samples(["just a string"])
    with pytest.raises(SampleError, match="expected a list of samples"):
        to_samples({"response": "r"})


def test_none_response_is_a_sample_error_and_empty_batch():
    with pytest.raises(SampleError, match="response"):
        to_samples([{"response": None}])
    assert to_samples([]) == []


def test_samples_are_reindexed_in_batch_order():
    a = Sample(index=9, response="a")
    assert [s.index for s in to_samples([a, {"response": "b"}])] == [0, 1]
    assert a.index == 9  # the caller's object is not mutated


def test_read_jsonl_skips_blank_lines_and_names_bad_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(
        json.dumps({"response": "a"}) + "\n\n" + json.dumps({"response": "b"}) + "\n", encoding="utf-8"
    )
    assert [s.response for s in read_jsonl(p)] == ["a", "b"]
    p.write_text('{"response": "a"}\n{not json}\n', encoding="utf-8")
    with pytest.raises(SampleError, match=r"r.jsonl:2: not valid JSON"):
        read_jsonl(p)
    p.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(SampleError, match=r"r.jsonl:1: expected a JSON object, got list"):
        read_jsonl(p)
