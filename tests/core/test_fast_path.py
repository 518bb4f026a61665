"""The fast path for cheap in-process scorers: the calling thread, results identical to the normal path."""

from __future__ import annotations

import json
import threading

import pytest

import rewardkit
from rewardkit.engine import RewardEngine
from rewardkit.executors.base import Executor
from rewardkit.integrations import verl as rk_verl
from rewardkit.testing import install_plugin

CHEAP_PLUGIN = """
import asyncio
import rewardkit

def flaky(response):
    if response == "raise":
        raise ValueError("boom")
    if response == "nan":
        return float("nan")
    if response == "none":
        return None
    if response == "text":
        return "1.0"
    if response == "badfloat":
        return BadFloat()
    if response == "cancel":
        raise asyncio.CancelledError("from the scorer")
    return {"score": 0.5, "why": response[:3]}

class BadFloat:  # a return whose conversion to a score raises something float() does not expect
    def __float__(self):
        raise RuntimeError("no float here")

@rewardkit.hookimpl
def register_scorers(register):
    register(flaky, name="flaky", data_sources=["flaky"], cheap=True)
"""


def _gsm8k_records(path, n=300):
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:n]]
    out = []
    for i, row in enumerate(rows):
        body, _, gold = row["answer"].rpartition("####")
        answer = gold.strip() if i % 2 else "7"
        out.append(
            {
                "data_source": "openai/gsm8k",
                "prompt": row["question"],
                "response": f"{body.strip()}\n#### {answer}",
                "ground_truth": gold.strip(),
                "extra_info": {"index": i},
            }
        )
    out += out[:20]  # duplicates (the normal path dedups them)
    out += [
        {"data_source": "openai/gsm8k", "response": "", "ground_truth": "3"},  # empty response
        {"data_source": "openai/gsm8k", "response": "答案是 #### 42 ✓", "ground_truth": "42"},
        {"data_source": "openai/gsm8k", "response": "x" * 60_000 + " #### 1", "ground_truth": "1"},
        {"data_source": "no/such-source", "response": "#### 1", "ground_truth": "1"},
        {"response": "#### 1", "ground_truth": "1"},  # no data_source at all
    ]
    return out


def _normal(engine, records):
    return engine._ensure_loop().run(engine._score(engine._samples(records, None)))


def _same(fast, slow):
    assert len(fast.samples) == len(slow.samples)
    for a, b in zip(fast.samples, slow.samples, strict=True):
        assert (a.status, a.score, a.reason, a.error, a.extra, a.components) == (
            b.status,
            b.score,
            b.reason,
            b.error,
            b.extra,
            b.components,
        )
    drop = ("timing/total_s", "timing/samples_per_s")
    assert {k: v for k, v in fast.metrics.items() if k not in drop} == {
        k: v for k, v in slow.metrics.items() if k not in drop
    }


@pytest.mark.parametrize("executor", ["auto", "inline"])
def test_fast_path_equals_the_normal_path_on_gsm8k(gsm8k_test_path, executor):
    records = _gsm8k_records(gsm8k_test_path)
    with RewardEngine({"executor": executor}) as engine:
        fast = engine.compute_here(records)
        assert fast is not None
        slow = _normal(engine, records)
        _same(fast, slow)
        statuses = set(fast.status)
        assert statuses == {"ok", "failed"}
        assert {r.reason for r in fast.samples if r.status == "failed"} == {"input_too_large", "unroutable"}
        assert 0 < fast.scores.count(1.0) < len(records)
        _same(engine.compute(records), slow)  # compute takes the same path


def test_failures_of_a_cheap_scorer_stay_typed_on_the_fast_path():
    responses = ("raise", "nan", "none", "text", "ok!", "", "badfloat", "cancel")
    records = [{"data_source": "flaky", "response": r} for r in responses]
    with install_plugin(CHEAP_PLUGIN, name="flaky"), RewardEngine({"executor": "inline"}) as engine:
        fast = engine.compute_here(records)
        assert fast is not None
        _same(fast, _normal(engine, records))  # the same text too, where building the result raised
        assert engine.score_one_here(engine._samples(records[-1:], None)[0]) == fast.samples[-1]
        assert fast.status == ["failed", "failed", "abstained", "failed", "ok", "ok", "failed", "failed"]
        assert [r.reason for r in fast.samples] == [
            "error",
            "invalid_return",
            None,
            "invalid_return",
            None,
            None,
            "error",
            "error",
        ]
        assert "ValueError: boom" in fast.samples[0].error
        assert fast.samples[4].extra == {"why": "ok!"}


def test_a_cheap_call_starts_no_thread_loop_or_executor(monkeypatch):
    started: list[str] = []
    real_start = threading.Thread.start

    def counting_start(self):
        started.append(self.name)
        return real_start(self)

    calls: list[str] = []
    monkeypatch.setattr(threading.Thread, "start", counting_start)
    with RewardEngine({"executor": "auto"}) as engine:
        executor = engine.executor
        for name in ("run", "run_batch"):
            real = getattr(executor, name)

            async def counted(*a, _real=real, _name=name, **kw):
                calls.append(_name)
                return await _real(*a, **kw)

            monkeypatch.setattr(executor, name, counted)
        for i in range(50):
            r = engine.score_one(
                {"data_source": "openai/gsm8k", "response": f"#### {i}", "ground_truth": "7"}
            )
            assert r.status == "ok" and r.score == float(i == 7)
        assert engine._loop is None  # the engine's loop thread was never started
    assert started == [] and calls == []


def test_scorers_that_may_hang_and_deadlines_take_the_normal_path(write_module):
    gsm8k = [{"data_source": "openai/gsm8k", "response": "#### 1", "ground_truth": "1"}]
    for config in ({"batch_timeout_s": 30}, {"timeout_s": 5}, {"executor": "process"}):
        with RewardEngine(config) as engine:
            assert engine.compute_here(gsm8k) is None
            assert engine.compute(gsm8k).scores == [1.0]
    path = write_module("mine.py", "def compute_score(solution_str):\n    return 1.0\n")
    with RewardEngine({"executor": "inline", "custom_reward_function": {"path": str(path)}}) as engine:
        assert engine.compute_here([{"response": "x"}]) is None  # custom code is not declared cheap
    assert not Executor.runs_here(None, [])  # type: ignore[arg-type]


def test_strict_routing_still_raises_on_the_fast_path():
    with (
        RewardEngine({"executor": "inline", "strict_routing": True}) as engine,
        pytest.raises(rewardkit.SampleError),
    ):
        engine.compute_here([{"data_source": "no/such", "response": "x"}])


def test_compute_score_finds_its_engine_without_reading_the_config_again(monkeypatch):
    rk_verl.close_engines()
    cfg = {"executor": "inline"}
    looked_up: list[object] = []
    real = rk_verl.get_engine
    monkeypatch.setattr(rk_verl, "get_engine", lambda c=None: looked_up.append(c) or real(c))
    outs = [
        rk_verl.compute_score("openai/gsm8k", f"#### {i}", "3", {"i": i}, rewardkit_config=cfg)
        for i in range(20)
    ]
    assert len(looked_up) == 1
    assert [o["score"] for o in outs] == [float(i == 3) for i in range(20)]
    cfg["failure_score"] = -1.0  # edited in place: a new engine for the new content
    out = rk_verl.compute_score("no/such", "#### 3", "3", rewardkit_config=cfg)
    assert len(looked_up) == 2 and out["status"] == "failed" and out["score"] == -1.0
    rk_verl.close_engines()


async def test_acompute_score_scores_cheap_samples_in_the_callers_loop(monkeypatch):
    rk_verl.close_engines()
    cfg = {"executor": "inline"}
    hops: list[object] = []
    monkeypatch.setattr("asyncio.to_thread", lambda *a, **k: hops.append(a) or pytest.fail("thread hop"))
    out = await rk_verl.acompute_score("openai/gsm8k", "#### 5", "5", rewardkit_config=cfg)
    assert out["score"] == 1.0 and out["status"] == "ok" and hops == []
    assert rk_verl.get_engine(cfg)._loop is None
    rk_verl.close_engines()


def test_managers_that_change_scoring_keep_their_path():
    """DAPO subclasses the naive manager: its length penalty must not be skipped by the fast path."""
    cfg = {
        "executor": "inline",
        "reward_manager": {
            "name": "dapo",
            "kwargs": {
                "overlong_buffer_cfg": {"enable": True, "len": 4, "penalty_factor": 1.0},
                "max_resp_len": 8,
            },
        },
    }
    long = {"data_source": "openai/gsm8k", "response": "#### 1", "ground_truth": "1", "response_length": 8}
    with RewardEngine(cfg) as engine:
        assert engine.compute_here([long]) is None
        assert (
            engine.score_one_here(rewardkit.Sample(0, "#### 1", data_source="openai/gsm8k", ground_truth="1"))
            is None
        )
        assert engine.compute([long]).scores[0] < 1.0  # the penalty applied


def test_score_one_here_routes_once_per_data_source_and_falls_back_when_unroutable():
    with RewardEngine({"executor": "inline"}) as engine:
        ok = engine.score_one_here(
            rewardkit.Sample(0, "#### 2", data_source="openai/gsm8k", ground_truth="2")
        )
        assert ok is not None and ok.status == "ok" and ok.score == 1.0
        assert list(engine.manager._plans) == ["openai/gsm8k"]
        lost = engine.score_one_here(rewardkit.Sample(0, "#### 2", data_source="no/such", ground_truth="2"))
        assert lost is not None and lost.status == "failed" and lost.reason == "unroutable"
        assert list(engine.manager._plans) == ["openai/gsm8k"]  # the unroutable one is not kept
        big = engine.score_one_here(
            rewardkit.Sample(0, "x" * 60_000, data_source="openai/gsm8k", ground_truth="2")
        )
        assert big is not None and big.reason == "input_too_large"


FIELDS_PLUGIN = """
import rewardkit

def reads_extra(response, extra_info):
    if response == "raise":
        raise ValueError("boom")
    if response == "nan":
        return float("nan")
    return {"score": float(extra_info.get("w", 0.25)), "keys": sorted(extra_info)}

def reads_sample(sample):
    return 1.0

def reads_prompt(prompt, response):
    return float(len(prompt))

@rewardkit.hookimpl
def register_scorers(register):
    register(reads_extra, name="reads_extra", data_sources=["extra"], cheap=True)
    register(reads_sample, name="reads_sample", data_sources=["sample"], cheap=True)
    register(reads_prompt, name="reads_prompt", data_sources=["prompt"], cheap=True)
"""


def test_compute_score_on_plain_fields_equals_the_sample_path(monkeypatch):
    """verl's compute_score calls the scorer with the fields it reads, without building a Sample;
    whatever the sample, the result (failures, extras, too large input, unroutable) is the usual one."""
    calls = [
        (
            "openai/gsm8k",
            "so it is #### 1,234",
            "1234",
            {"index": 1, "num_turns": None, "rollout_reward_scores": {}},
        ),
        ("openai/gsm8k", "", "3", None),  # empty response
        ("openai/gsm8k", "答案 #### 42 ✓", "42", {}),
        ("openai/gsm8k", "x" * 60_000 + " #### 1", "1", {}),  # over max_input_chars
        ("extra", "ok", None, {"w": 0.75, "nested": {"a": [1, 2]}}),
        ("extra", "raise", None, {}),
        ("extra", "nan", None, {}),
        ("sample", "x", None, {}),  # reads the sample: the usual path
        ("prompt", "x", None, {}),  # reads the prompt (verl passes none): the usual path
        ("no/such-source", "#### 1", "1", {}),
        (None, "#### 1", "1", {}),
    ]
    with install_plugin(FIELDS_PLUGIN, name="fields_probe"), RewardEngine({"executor": "inline"}) as engine:
        usual = []
        for ds, response, gt, extra in calls:
            sample = rewardkit.Sample(
                0, response, data_source=ds, ground_truth=gt, extra_info=dict(extra or {})
            )
            r = engine.score_one_here(sample) or engine.compute([sample]).samples[0]
            usual.append((r.status, r.score, r.reason, r.error and r.error.split(" (at ")[0], r.extra))
        fields = []
        for ds, response, gt, extra in calls:
            r = engine.score_fields_here(ds, response, gt, extra)
            if r is None:
                sample = rewardkit.Sample(
                    0, response, data_source=ds, ground_truth=gt, extra_info=dict(extra or {})
                )
                r = engine.score_one_here(sample) or engine.compute([sample]).samples[0]
            fields.append((r.status, r.score, r.reason, r.error and r.error.split(" (at ")[0], r.extra))
        assert fields == usual
        taken = [engine.score_fields_here(ds, resp, gt, extra) is not None for ds, resp, gt, extra in calls]
        assert taken == [True, True, True, False, True, True, True, False, False, False, False]
        assert [u[0] for u in usual] == ["ok"] * 3 + [
            "failed",
            "ok",
            "failed",
            "failed",
            "ok",
            "ok",
            "failed",
            "failed",
        ]
        assert usual[3][2] == "input_too_large" and usual[5][3] == "ValueError: boom"
        assert usual[6][2] == "invalid_return" and usual[9][2] == "unroutable"
        assert usual[4][1] == 0.75 and usual[4][4] == {"keys": ["nested", "w"]}


def test_verl_compute_score_takes_the_fields_path_and_reports_the_same(monkeypatch):
    monkeypatch.delenv(rk_verl.ENV_CONFIG, raising=False)
    cfg = {"executor": "inline"}
    try:
        first = rk_verl.compute_score("openai/gsm8k", "#### 7", "7", {"index": 0}, rewardkit_config=cfg)
        engine = rk_verl._engine_for(cfg)
        monkeypatch.setattr(rk_verl, "_record", lambda *a: pytest.fail("a Sample was built"))
        again = rk_verl.compute_score("openai/gsm8k", "#### 7", "7", {"index": 1}, rewardkit_config=cfg)
        assert first == again and first["score"] == 1.0 and first["status"] == "ok"
        assert engine.manager._field_plans["openai/gsm8k"] is not None
        monkeypatch.undo()
        with pytest.raises(rewardkit.SampleError, match="response.*must be a string"):  # validated as before
            rk_verl.compute_score("openai/gsm8k", 7, "7", None, rewardkit_config=cfg)
    finally:
        rk_verl.close_engines()


SHAPES_PLUGIN = """
import functools
import rewardkit

def reversed_order(ground_truth, response, bonus=0.0):
    if ground_truth != "a":  # (the arguments swapped)
        return -1.0
    return float(response == ground_truth) + bonus

def keyword_only(response, *, ground_truth):
    return float(response == ground_truth)

def alias(solution_str, ground_truth, extra_info):
    return {"score": float(solution_str == ground_truth), "n": len(extra_info)}

def _kwargs_only(fn):
    @functools.wraps(fn)
    def wrapper(**kwargs):  # takes keywords only, though its signature (fn's) says otherwise
        return fn(**kwargs)
    return wrapper

@_kwargs_only
def wrapped(response, ground_truth):
    return float(response == ground_truth)

def whole(sample):
    return float(sample.response == sample.ground_truth)

@rewardkit.hookimpl
def register_scorers(register):
    for fn in (reversed_order, keyword_only, alias, wrapped, whole):
        register(fn, name=fn.__name__, data_sources=[fn.__name__], cheap=True)
"""


def test_the_fast_path_passes_each_scorer_shape_its_fields():
    """The fast path passes a plain function's fields positionally (no keyword dict per sample):
    whatever the parameter order, aliases, keyword-only parameters, wrappers that take keywords
    only or configured keyword arguments, each scorer gets what the normal path gives it."""
    from rewardkit.scoring import call_with, fast_fields

    names = ["reversed_order", "keyword_only", "alias", "wrapped", "whole"]
    records = [
        {"data_source": ds, "response": r, "ground_truth": "a", "extra_info": {"k": 1}}
        for ds in names
        for r in ("a", "b")
    ]
    with install_plugin(SHAPES_PLUGIN, name="shapes"), RewardEngine({"executor": "inline"}) as engine:
        fast = engine.compute_here(records)
        assert fast is not None
        _same(fast, _normal(engine, records))
        assert fast.scores == [1.0, 0.0] * len(names)
        assert fast.extra["n"][4:6] == [1, 1]
        specs = {n: engine.manager.context.route(rewardkit.Sample(0, "", data_source=n)) for n in names}
        assert fast_fields(specs["reversed_order"]) == ("ground_truth", "response")
        assert fast_fields(specs["alias"]) == ("response", "ground_truth", "extra_info")
        for by_keyword in ("keyword_only", "wrapped", "whole"):
            assert fast_fields(specs[by_keyword]) is None, by_keyword
        bonus = specs["reversed_order"].with_kwargs({"bonus": 0.5})
        assert fast_fields(bonus) == ("ground_truth", "response")
        assert fast_fields(specs["reversed_order"].with_kwargs({"response": "a"})) is None
        assert (
            call_with(bonus, bonus.kwargs, ("a", "a")).score == 1.5
        )  # positional fields, configured keywords
