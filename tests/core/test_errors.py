"""Every rewardkit exception survives pickling with its fields (Ray and process pools pickle them)."""

from __future__ import annotations

import pickle

import pytest

from rewardkit import errors

CASES = [
    errors.RewardKitError("plain"),
    errors.ConfigError("bad config"),
    errors.SampleError(3, "data_source", "unknown data source 'x'", reason="unroutable"),
    errors.SampleError(None, None, "not a list"),
    errors.DuplicateNameError("scorer", "gsm8k", "plugin_a", "plugin_b"),
    errors.UnknownNameError("scorer", "gsm8kk", ["gsm8k", "math"], hint="install rewardkit-x"),
    errors.BrokenPluginError("plugin y failed to import"),
    errors.ScorerTimeout("took too long"),
]


@pytest.mark.parametrize("err", CASES, ids=lambda e: type(e).__name__)
def test_every_error_pickles_with_its_fields(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
    assert back.args == err.args
    assert vars(back) == vars(err)


def test_sample_error_fields_after_pickle():
    back = pickle.loads(pickle.dumps(errors.SampleError(7, "data_source", "no scorer", reason="unroutable")))
    assert (back.index, back.field, back.reason, back.detail) == (7, "data_source", "unroutable", "no scorer")
    assert str(back) == "sample 7, field 'data_source': no scorer"
    assert isinstance(back, ValueError)


def test_unknown_name_error_keeps_suggestion_after_pickle():
    back = pickle.loads(pickle.dumps(errors.UnknownNameError("scorer", "gsm8kk", ["gsm8k"])))
    assert back.known == ["gsm8k"] and "Did you mean 'gsm8k'?" in str(back)
    assert isinstance(back, KeyError)


def test_every_public_error_class_is_covered():
    classes = {
        obj
        for obj in vars(errors).values()
        if isinstance(obj, type) and issubclass(obj, errors.RewardKitError)
    }
    assert classes == {type(e) for e in CASES}
