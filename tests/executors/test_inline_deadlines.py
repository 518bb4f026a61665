"""The inline executor never hangs silently: batch deadlines bound hung scorers; broken exceptions fail alone."""

from __future__ import annotations

import asyncio
import time

import pytest

from rewardkit.batch import Sample
from rewardkit.engine import RewardEngine
from rewardkit.executors.base import ScoreTask
from rewardkit.executors.inline import InlineExecutor, batch_deadline
from rewardkit.scoring import ScorerSpec

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def inline(make_config):
    return lambda **cfg: InlineExecutor(make_config(**cfg))


async def bounded(coro, limit=30.0):
    """Fail the test (instead of hanging it) when the executor ignores its deadline."""
    start = time.monotonic()
    out = await asyncio.wait_for(coro, limit)
    return out, time.monotonic() - start


async def test_batch_timeout_bounds_a_hung_sync_scorer(inline, spec, task):
    ex = inline(batch_timeout_s=1.0)
    tasks = [
        task(spec("good"), 0, "1", "1"),
        task(spec("sleepy"), 1, sleep=0.05),
        task(spec("hang"), 2),
        task(spec("good"), 3, "1", "1"),
    ]
    results, took = await bounded(ex.run(tasks))
    assert [r.status for r in results] == ["ok", "ok", "failed", "failed"]  # finished ones are kept
    assert results[2].reason == "timeout" and results[2].extra["thread_left_running"] is True
    assert "left running" in results[2].error and "executor: process" in results[2].error
    assert results[3].reason == "timeout" and "thread_left_running" not in results[3].extra
    assert took < 20


async def test_batch_timeout_bounds_an_async_scorer_without_timeout_s(inline, spec, task):
    ex = inline(batch_timeout_s=0.5, timeout_s=None)
    tasks = [task(spec("await_forever"), 0), task(spec("nap"), 1, sleep=0.01)]
    results, _ = await bounded(ex.run(tasks))
    assert [r.status for r in results] == ["failed", "ok"]
    assert results[0].reason == "timeout" and "thread_left_running" not in results[0].extra


async def test_batch_timeout_bounds_a_hung_batch_scorer(inline, spec):
    ex = inline(batch_timeout_s=0.5)
    samples = [Sample(i, "x") for i in range(3)]
    results, _ = await bounded(ex.run_batch(spec("batch_hang"), samples))
    assert [r.reason for r in results] == ["timeout"] * 3
    assert all(r.extra["thread_left_running"] for r in results)
    good = await ex.run_batch(spec("batch_good"), [Sample(0, "a", ground_truth="a")])
    assert good[0].score == 1.0


async def test_a_callers_deadline_bounds_the_run(inline, spec, task):
    """What a Ray worker uses to pass on the time left of the manager's batch deadline."""
    with batch_deadline(time.monotonic() + 0.5):
        results, _ = await bounded(inline().run([task(spec("good"), 0, "1", "1"), task(spec("hang"), 1)]))
    assert [r.status for r in results] == ["ok", "failed"] and results[1].reason == "timeout"


def test_engine_compute_returns_at_the_batch_deadline(scorer_file):
    config = {
        "executor": "inline",
        "batch_timeout_s": 1.0,
        "custom_reward_function": {"path": str(scorer_file), "name": "sleepy"},
    }
    with RewardEngine(config) as engine:
        result = engine.compute(
            [
                {"response": "a", "extra_info": {"sleep": 0.01}},
                {"response": "b", "extra_info": {"sleep": 3600}},
            ]
        )
    assert result.status == ["ok", "failed"] and result.reasons == [None, "timeout"]


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("__str__ is broken too")


def sync_unprintable(response):
    if response == "bad":
        raise Unprintable()
    return 1.0


async def async_unprintable(response):
    if response == "bad":
        raise Unprintable()
    return 1.0


@pytest.mark.parametrize("fn", [sync_unprintable, async_unprintable])
async def test_an_exception_whose_str_raises_fails_only_its_sample(inline, fn):
    spec = ScorerSpec(fn.__name__, fn)
    tasks = [ScoreTask(spec, Sample(i, r)) for i, r in enumerate(["ok", "bad", "ok"])]
    results, _ = await bounded(inline().run(tasks))
    assert [r.status for r in results] == ["ok", "failed", "ok"]
    assert results[1].reason == "error" and "Unprintable" in results[1].error
