"""runtime.limits.TokenBucket (the one token bucket, with refund) and runtime.loop.LoopThread."""

import asyncio
import threading

import pytest

from rewardkit.runtime.limits import TokenBucket
from rewardkit.runtime.loop import LoopThread


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_try_take_only_takes_what_is_there():
    clock = Clock()
    b = TokenBucket(rate_per_s=2.0, burst=2.0, clock=clock)
    assert b.try_take(1) == 0.0 and b.try_take(1) == 0.0
    assert b.try_take(1) == pytest.approx(0.5)  # empty: half a second to one token
    assert b.level == pytest.approx(0.0)  # a refused take takes nothing
    clock.now = 0.5
    assert b.try_take(1) == 0.0


def test_reserve_goes_negative_in_order_and_refund_corrects_it():
    clock = Clock()
    b = TokenBucket(rate_per_s=10.0, burst=10.0, clock=clock)
    assert b.reserve(10) == 0.0
    assert b.reserve(5) == pytest.approx(0.5)
    assert b.reserve(5) == pytest.approx(1.0)  # queued behind the first reservation
    b.refund(5)  # the second one cost nothing in the end
    assert b.level == pytest.approx(-5.0)
    clock.now = 100.0
    assert b.reserve(0) == 0.0 and b.level == pytest.approx(10.0)  # refills up to the burst only


def test_rate_must_be_positive():
    with pytest.raises(ValueError, match="rate_per_s"):
        TokenBucket(rate_per_s=0, burst=1)


def test_loop_thread_runs_from_threads_and_loops_and_refuses_its_own_thread():
    lt = LoopThread("rk-test-loop")
    try:

        async def where():
            return asyncio.get_running_loop(), threading.current_thread()

        loop, thread = lt.run(where())
        assert loop is lt.loop and thread is lt.thread

        async def from_another_loop():
            return await lt.arun(where())

        assert asyncio.run(from_another_loop())[0] is lt.loop

        async def reenter():
            lt.run(where())

        with pytest.raises(RuntimeError, match="own loop"):
            lt.run(reenter())
    finally:
        lt.stop()
    assert lt.loop.is_closed() and not lt.thread.is_alive()
    lt.stop()  # idempotent
