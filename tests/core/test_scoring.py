import asyncio
import math
import pickle
import threading

import pytest

from rewardkit.batch import to_sample
from rewardkit.errors import ConfigError
from rewardkit.scoring import (
    ScorerSpec,
    ainvoke,
    invoke,
    invoke_batch,
    load_function,
    ref_of,
    resolve_ref,
    signature_of,
    to_result,
)

SAMPLE = to_sample(
    {"prompt": "q", "response": "42", "data_source": "ds", "ground_truth": "42", "extra_info": {"k": 1}}, 0
)


def verl_style(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": float(solution_str == ground_truth), "ds": data_source, "k": extra_info["k"]}


def only_response(response):
    return len(response)


def takes_sample(sample):
    return sample.index + 0.5


async def async_scorer(response, ground_truth):
    await asyncio.sleep(0)
    return response == ground_truth


def raises(response):
    raise RuntimeError("scorer exploded")


class NotAnException(BaseException):
    pass


def raises_base(response):
    raise NotAnException("like math-verify's timeout")


def with_kwargs(response, **kwargs):
    return kwargs.get("bonus", 0.0)


def test_keyword_injection_by_parameter_name():
    r = invoke(ScorerSpec("v", verl_style), SAMPLE)
    assert (r.status, r.score, r.extra) == ("ok", 1.0, {"ds": "ds", "k": 1})
    assert invoke(ScorerSpec("o", only_response), SAMPLE).score == 2.0
    assert invoke(ScorerSpec("s", takes_sample), SAMPLE).score == 0.5


def test_async_scorer_sync_and_async_paths():
    spec = ScorerSpec("a", async_scorer)
    assert signature_of(async_scorer).is_async
    assert invoke(spec, SAMPLE).score == 1.0
    assert asyncio.run(ainvoke(spec, SAMPLE)).score == 1.0


def test_async_scorer_invoked_from_a_thread_with_no_loop():
    out = []
    t = threading.Thread(target=lambda: out.append(invoke(ScorerSpec("a", async_scorer), SAMPLE)))
    t.start()
    t.join()
    assert out[0].score == 1.0


@pytest.mark.parametrize("fn", [raises, raises_base])
def test_exceptions_become_typed_failures_never_zero(fn):
    r = invoke(ScorerSpec("x", fn), SAMPLE)
    assert r.status == "failed" and r.reason == "error" and r.score is None
    assert type(r.error) is str and ("scorer exploded" in r.error or "NotAnException" in r.error)
    assert "test_scoring.py" in r.error  # where it raised
    assert "scoring.py:" not in r.error.replace("test_scoring.py:", "")  # not rewardkit's calling code


@pytest.mark.parametrize(
    ("value", "status", "score", "reason"),
    [
        (True, "ok", 1.0, None),
        (0, "ok", 0.0, None),
        (None, "abstained", None, None),
        ({"score": None, "why": "n/a"}, "abstained", None, None),
        ({"acc": 1}, "failed", None, "invalid_return"),
        ("1.5", "failed", None, "invalid_return"),  # text is not a score, even when it looks like one
        ("high", "failed", None, "invalid_return"),
        (float("nan"), "failed", None, "invalid_return"),
        (float("inf"), "failed", None, "invalid_return"),
        ([1.0], "failed", None, "invalid_return"),
    ],
)
def test_return_values(value, status, score, reason):
    r = to_result(value)
    assert (r.status, r.score, r.reason) == (status, score, reason)


def test_input_size_cap():
    big = to_sample({"response": "9" * 1001}, 0)
    r = invoke(ScorerSpec("o", only_response), big, max_input_chars=1000)
    assert r.reason == "input_too_large" and "1001 characters" in r.error
    assert asyncio.run(ainvoke(ScorerSpec("o", only_response), big, 1000)).reason == "input_too_large"


def test_configured_kwargs_checked_against_signature():
    spec = ScorerSpec("w", with_kwargs).with_kwargs({"bonus": 2.5})
    assert invoke(spec, SAMPLE).score == 2.5
    with pytest.raises(
        ConfigError, match=r"does not accept keyword argument\(s\) nope; it accepts: response"
    ):
        ScorerSpec("o", only_response).with_kwargs({"nope": 1})


def test_batch_scorer_lists_and_wrong_length():
    def batch(responses, ground_truths):
        return [float(r == g) for r, g in zip(responses, ground_truths, strict=True)]

    samples = [SAMPLE, to_sample({"response": "1", "ground_truth": "2"}, 1)]
    assert [r.score for r in invoke_batch(ScorerSpec("b", batch, batch=True), samples)] == [1.0, 0.0]
    short = invoke_batch(ScorerSpec("b", lambda responses: [1.0], batch=True), samples)
    assert [r.reason for r in short] == ["invalid_return", "invalid_return"]
    assert "returned 1 results for 2 samples" in short[0].error
    boom = invoke_batch(ScorerSpec("b", lambda responses: 1 / 0, batch=True), samples)
    assert [r.reason for r in boom] == ["error", "error"]


def test_load_function_from_file_module_and_pkg(write_module):
    path = write_module(
        "my_reward.py",
        "def compute_score(solution_str):\n    return 0.75\n\ndef other(response):\n    return 1\n",
    )
    fn, ref = load_function(str(path))
    assert fn(solution_str="") == 0.75 and ref == f"{path}:compute_score"
    fn2, _ = load_function(str(path), "other")
    assert fn2(response="") == 1
    fn3, ref3 = load_function("math:sqrt")
    assert fn3(4) == 2 and ref3 == "math:sqrt"
    fn4, ref4 = load_function("pkg://os.path", "basename")
    assert ref4 == "os.path:basename"


def test_load_function_errors_are_clear(tmp_path, write_module):
    with pytest.raises(ConfigError, match="file not found"):
        load_function(str(tmp_path / "missing.py"))
    bad = write_module("bad.py", "raise ImportError('no deps here')\n")
    with pytest.raises(ConfigError, match="error while importing .*bad.py: ImportError: no deps here"):
        load_function(str(bad))
    ok = write_module("ok.py", "x = 1\n")
    with pytest.raises(ConfigError, match="has no function 'compute_score'"):
        load_function(str(ok))
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module_xyz'"):
        resolve_ref("no_such_module_xyz:f")
    with pytest.raises(ConfigError, match="bad function reference"):
        resolve_ref("nocolon")


def test_spec_from_file_pickles_by_reference(write_module):
    path = write_module("pick.py", "def compute_score(solution_str):\n    return len(solution_str)\n")
    fn, ref = load_function(str(path))
    spec = ScorerSpec("custom", fn, ref, kwargs={})
    data = pickle.dumps(spec)
    assert b"pick.py:compute_score" in data
    again = pickle.loads(data)
    assert invoke(again, SAMPLE).score == 2.0


def test_ref_of():
    assert ref_of(only_response) == f"{__name__}:only_response"
    assert ref_of(lambda r: r) is None
    assert ref_of(math.sqrt) == "math:sqrt"
