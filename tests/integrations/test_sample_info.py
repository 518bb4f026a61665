"""The per-sample info the trainer integrations report: one key set, whatever the result."""

from __future__ import annotations

import json
import math

import pytest

from rewardkit.config import load_config
from rewardkit.integrations.sample_info import info_keys, sample_info
from rewardkit.result import SampleResult


def test_an_ok_rule_result_reports_the_base_keys_with_nothing_left_over():
    config = load_config(None)
    info = sample_info(SampleResult.ok(1.0, acc=True, pred="42"), config)
    assert info == {
        "score": 1.0,
        "status": "ok",
        "reason": "",
        "error": "",
        "acc": True,
        "pred": "42",
        "extra": "",
    }
    assert list(info) == info_keys(config)


def test_failures_extras_and_configured_keys_keep_the_same_key_set():
    config = load_config({"failure_score": -1.0, "extra_keys": ["judge"]})
    keys = info_keys(config)
    failed = sample_info(SampleResult.failed("timeout", "took too long", judge="slow"), config)
    assert list(failed) == keys
    assert failed["score"] == -1.0 and failed["status"] == "failed" and failed["reason"] == "timeout"
    assert failed["error"] == "took too long" and failed["judge"] == "slow" and failed["acc"] is None
    nan = sample_info(SampleResult(math.nan), config)  # a plugin's own ok nan: never reported as nan
    assert nan["score"] == 0.0  # (not failed: the abstain fallback, unset, so 0.0)
    plain_config = load_config(None)
    more = sample_info(SampleResult.ok(0.5, acc=False, why="x", n=2), plain_config)
    assert list(more) == info_keys(plain_config)
    assert json.loads(more["extra"]) == {"why": "x", "n": 2} and more["acc"] is False


def test_numpy_values_are_reported_as_python_values():
    np = pytest.importorskip("numpy")
    info = sample_info(SampleResult.ok(1.0, acc=np.bool_(True), pred=np.int64(7)), load_config(None))
    assert type(info["acc"]) is bool and info["acc"] is True
    assert type(info["pred"]) is int and info["pred"] == 7
