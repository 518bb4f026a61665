"""The inline executor: order, async deadlines and concurrency, a free event loop, typed failures."""

from __future__ import annotations

import asyncio
import time

import pytest

from rewardkit.executors.inline import InlineExecutor

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def inline(make_config):
    return lambda **cfg: InlineExecutor(make_config(**cfg))


async def test_mixed_sync_and_async_keep_their_order(inline, spec, task):
    good, nap, boom = spec("good"), spec("nap"), spec("boom")
    tasks = [task(good, 0, "1", "1"), task(nap, 1, sleep=0.01), task(boom, 2), task(good, 3, "0", "1")]
    results = await inline().run(tasks)
    assert [r.status for r in results] == ["ok", "ok", "failed", "ok"]
    assert [r.score for r in results] == [1.0, 1.0, None, 0.0]
    assert results[2].reason == "error" and "boom: x" in results[2].error
    assert await inline().run([]) == []


async def test_async_deadline_and_concurrency_limit(inline, spec, task):
    ex = inline(timeout_s=0.5, max_concurrency=3)
    nap = spec("nap")
    tasks = [task(nap, i, sleep=0.2) for i in range(9)] + [task(spec("await_forever"), 9)]
    results = await ex.run(tasks)
    assert results[9].reason == "timeout"
    assert all(r.status == "ok" for r in results[:9])
    assert max(r.extra["peak"] for r in results[:9]) <= 3


async def test_a_scorer_raising_cancelled_fails_alone(inline, spec, task):
    tasks = [
        task(spec("good"), 0, "1", "1"),
        task(spec("raise_cancelled"), 1),
        task(spec("araise_cancelled"), 2),
    ]
    results = await inline().run(tasks)
    assert results[0].score == 1.0
    assert [r.reason for r in results[1:]] == ["error", "error"]
    assert all("CancelledError" in r.error for r in results[1:])


async def test_cancelling_the_batch_still_cancels(inline, spec, task):
    run = asyncio.ensure_future(inline(timeout_s=30).run([task(spec("await_forever"), 0)]))
    await asyncio.sleep(0.1)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


async def test_sync_scorers_do_not_block_the_event_loop(inline, spec, task, tmp_path):
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.ensure_future(tick())
    start = time.monotonic()
    # a sync scorer that sleeps 0.5 s in total; the loop keeps ticking meanwhile
    results = await inline().run([task(spec("sleepy"), i, sleep=0.1) for i in range(5)])
    elapsed = time.monotonic() - start
    ticker.cancel()
    assert [r.score for r in results] == [1.0] * 5
    assert ticks >= 0.3 * elapsed / 0.01  # at least a third of the possible ticks happened


async def test_time_queued_for_a_sandbox_slot_is_not_counted(inline, spec, task):
    """Eight samples share one slot (2 s of work in all) under a 0.6 s deadline: none has hung."""
    ex = inline(timeout_s=0.6, max_concurrency=16)
    tasks = [task(spec("one_slot"), i) for i in range(8)] + [task(spec("await_forever"), 8)]
    results = await ex.run(tasks)
    assert [r.status for r in results[:8]] == ["ok"] * 8
    assert results[8].reason == "timeout"  # a real hang still times out meanwhile


async def test_async_scorer_that_ignores_cancellation_does_not_stall_the_batch(inline, spec, task):
    start = time.monotonic()
    results = await inline(timeout_s=0.3).run(
        [task(spec("ignore_cancel"), 0), task(spec("good"), 1, "1", "1")]
    )
    assert time.monotonic() - start < 15  # not held until the stray scorer ends (30 s)
    assert results[0].reason == "timeout" and results[1].score == 1.0
    for t in asyncio.all_tasks():  # the scorer is left behind in this loop: stop it for the test's sake
        if t is not asyncio.current_task():
            t.cancel()
