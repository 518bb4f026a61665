"""The judge client against a nasty server (tests/backends/judge/fault_server.py), in miniature.

Each test is one failure case of issue 17: one-off faults that a retry fixes must cost nothing
but time; a down server must be found out by a probe, not by a fixed cooldown; stalls and 429s must
not starve the server; a dead replica must not stop the batch. Counts are asserted, never times.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from rewardkit.batch import to_samples
from rewardkit.config import RewardModelConfig

from .fault_server import FaultPlan, FaultServer

FAST = {
    "backoff_base_s": 0.01,
    "backoff_cap_s": 0.1,
    "request_timeout_s": 0.5,
    "temperature": 0.7,  # sampling: a cut-off judgement is asked again by default
}


def batch(n: int, tag: str = "s"):
    """``n`` samples, each wanting the score ``i % 11``."""
    return to_samples([{"prompt": "Rate this.", "response": f"{tag}{i} [[want={i % 11}]]"} for i in range(n)])


def right(results, n: int) -> int:
    """Samples scored with the score the server meant (``n`` results expected)."""
    assert len(results) == n  # nothing lost
    return sum(r.status == "ok" and abs(r.score - (i % 11) / 10) < 1e-9 for i, r in enumerate(results))


def wrong(results, n: int) -> int:
    """Samples scored ``ok`` with another score."""
    assert len(results) == n
    return sum(r.status == "ok" and abs(r.score - (i % 11) / 10) > 1e-9 for i, r in enumerate(results))


@pytest.fixture
def judge():
    from rewardkit.backends.generative import GenerativeRM

    made = []

    def make(base_url, **rollout):
        cfg = {"base_url": base_url, "model": "judge", **FAST, **rollout}
        rm = GenerativeRM(RewardModelConfig(enable=True, backend="generative", rollout=cfg))
        made.append(rm)
        return rm

    yield make
    for rm in made:
        rm.close()


@pytest.fixture
def servers():
    started = []

    def start(rate=0.0, capacity=16, service_time=0.002, **plan):
        srv = FaultServer(FaultPlan(rate=rate, stall_s=3.0, **plan), capacity, service_time, lifetime_s=60)
        started.append(srv.start())
        return srv

    yield start
    for srv in started:
        srv.stop()


async def test_ten_percent_one_off_faults_cost_nothing_but_time(judge, servers):
    srv = servers(rate=0.1)
    rm = judge(srv.base_url)
    res = await rm.ascore(batch(200))
    assert len(res) == 200
    assert right(res, 200) == 200 and wrong(res, 200) == 0
    assert set(srv.faults) == {"stall", "reset", "429", "503", "500", "garbage", "cutoff"}
    faulted = [r for r in res if r.extra["attempts"] > 1]
    assert len(faulted) >= 10
    assert all(r.extra["replica"] == srv.base_url and r.extra["final_reason"] == "ok" for r in res)
    assert any(r.extra["reasks"] == 1 for r in res)  # the cut-off answers were asked again
    m = rm.metrics()
    assert m.get("failed/circuit_open", 0) == 0 and m.get("errors/circuit_open", 0) == 0
    await rm.aclose()


async def test_thirty_percent_faults_never_open_the_circuit_while_the_server_answers(judge, servers):
    srv = servers(rate=0.3)
    rm = judge(srv.base_url, max_concurrency=32)
    res = await rm.ascore(batch(300))
    assert right(res, 300) >= 297 and wrong(res, 300) == 0
    assert not [r for r in res if r.reason == "circuit_open"]
    assert rm.http.breaker.times_opened == 0
    await rm.aclose()


async def test_an_unparseable_or_cut_off_judgement_is_asked_again(judge, servers):
    srv = servers(rate=1.0, kinds={"cutoff": 1.0})
    sampled = judge(srv.base_url)
    res = await sampled.ascore(batch(20))
    assert [r.status for r in res] == ["ok"] * 20
    assert {(r.extra["reasks"], r.extra["attempts"]) for r in res} == {(1, 2)}
    assert sampled.metrics()["reasks"] == 20
    greedy = judge(srv.base_url, temperature=0.0)  # greedy decoding: asking again changes nothing
    res = await greedy.ascore(batch(20, "g"))
    assert {r.reason for r in res} == {"unparseable"} and res[0].extra["final_reason"] == "cut_off"
    forced = judge(srv.base_url, temperature=0.0, reask=True)
    assert {r.status for r in await forced.ascore(batch(20, "h"))} == {"ok"}
    await sampled.aclose()
    await greedy.aclose()
    await forced.aclose()


async def test_restart_mid_batch_scores_everything_and_nothing_waits_a_cooldown(judge, servers):
    srv = servers(capacity=4, service_time=0.01)
    rm = judge(srv.base_url, max_concurrency=8, batch_timeout_s=30)
    srv.restart(after_s=0.1, down_s=0.5, warmup_s=1.0)
    res = await rm.ascore(batch(300))
    assert srv.restarts == 1
    assert right(res, 300) == 300
    statuses = Counter(s for _, s in srv.log)
    assert statuses[503] >= 1  # it did see the restart's 503s
    # the next batch, right after, goes straight through
    before = len(srv.log)
    res2 = await rm.ascore(batch(20, "n"))
    assert right(res2, 20) == 20 and len(srv.log) - before == 20
    await rm.aclose()


async def test_next_batch_inside_the_cooldown_still_sends_requests(judge, servers):
    srv = servers()
    rm = judge(srv.base_url, breaker_cooldown_s=30, max_retries=1)
    srv.restart(after_s=0.0, down_s=1.0)
    await asyncio.sleep(0.2)
    first = rm.ascore(batch(10))
    res = await first  # started while the server is down: waits for a probe, is scored when it is back
    assert right(res, 10) == 10
    assert rm.http.breaker.times_opened == 1
    res = await rm.ascore(batch(10, "later"))
    assert right(res, 10) == 10
    await rm.aclose()


async def test_stalled_requests_do_not_hold_the_in_flight_slots(judge, servers):
    srv = servers(rate=0.15, kinds={"stall": 1.0}, capacity=8)
    rm = judge(srv.base_url, max_concurrency=8, request_timeout_s=2.0, stall_after_s=0.1, hedge=False)
    res = await rm.ascore(batch(200))
    assert right(res, 200) == 200
    first_stall = next(t for t, s in srv.log if s == -1)
    answered_meanwhile = sum(1 for t, s in srv.log if s == 200 and first_stall < t < first_stall + 1.5)
    # With the stalls holding the 8 slots for their 2 s timeout, a few dozen at most would be answered.
    assert answered_meanwhile >= 120
    m = rm.metrics()
    assert m["stalled"] >= 20
    assert m["in_flight_limit/min"] == 8  # a timeout is a lost request, not congestion
    await rm.aclose()


async def test_a_stalled_attempt_is_raced_by_a_hedge_instead_of_waiting_out_its_timeout(judge, servers):
    srv = servers(rate=0.15, kinds={"stall": 1.0}, capacity=8)
    rm = judge(srv.base_url, max_concurrency=8, request_timeout_s=2.0, stall_after_s=0.1)
    res = await rm.ascore(batch(200))
    assert right(res, 200) == 200
    m = rm.metrics()
    stalled = srv.faults["stall"]
    assert stalled >= 20 and m["hedged"] >= stalled
    assert m.get("errors/timeout", 0) == 0  # the hedge answered; the stalled attempt was dropped
    assert sum(r.extra["attempts"] == 2 for r in res) >= stalled
    await rm.aclose()


def test_the_limit_has_a_floor_and_recovers_after_a_429_burst():
    from rewardkit.runtime.concurrency import ConcurrencyController

    ctl = ConcurrencyController(64)
    assert ctl.floor == 16
    for _ in range(6):  # six waves of nothing but 429s
        for _ in range(int(ctl.limit)):
            ctl.congested(time.monotonic() + 1)
    assert ctl.limit == 16  # not 1: the server is kept busy
    successes = 0
    while ctl.limit < 63.5 and successes < 5000:
        ctl.succeeded()
        successes += 1
    assert ctl.limit >= 63.5 and successes < 2000
    ctl.lost_one()
    assert ctl.limit >= 63.5 and ctl.lost == 1
    burst = ConcurrencyController(64)
    for _ in range(2):  # an overload: two waves of 429s
        for _ in range(int(burst.limit)):
            burst.congested(time.monotonic() + 1)
    assert burst.limit == 16
    for _ in range(200):  # about four rounds of successes at the reduced limit
        burst.succeeded()
    assert burst.limit >= 48  # most of it back: a burst costs a few round trips


async def test_a_429_burst_cuts_the_limit_and_it_grows_back(judge, servers):
    srv = servers(rate=0.05, kinds={"429": 1.0}, capacity=16)
    rm = judge(srv.base_url, max_concurrency=16)
    res = await rm.ascore(batch(300))
    assert right(res, 300) == 300
    m = rm.metrics()
    assert m["errors/429"] >= 5 and 4 <= m["in_flight_limit/min"] < 16  # cut, never below the floor
    srv.plan.rate = 0.0  # the burst is over
    assert right(await rm.ascore(batch(300, "calm")), 300) == 300
    router = rm.http.sessions.states()[0].extra
    assert router.ctls[0].limit >= 15  # grown back to the maximum
    await rm.aclose()


async def test_a_dead_replica_is_taken_out_and_retries_go_to_the_other(judge, servers):
    a, b = servers(capacity=8), servers(capacity=8)
    rm = judge([a.base_url, b.base_url], max_concurrency=8)
    warm = await rm.ascore(batch(40, "w"))
    assert {r.extra["replica"] for r in warm} == {a.base_url, b.base_url}  # both used
    threading_stop = asyncio.get_running_loop().run_in_executor(None, a.stop)
    await threading_stop
    res = await rm.ascore(batch(200))
    assert right(res, 200) == 200
    assert {r.extra["replica"] for r in res} == {b.base_url}
    assert rm.http.replicas[0].breaker.state != "closed"
    await rm.aclose()


async def test_a_replica_that_comes_back_is_probed_back_in(judge, servers):
    a, b = servers(capacity=8), servers(capacity=8)
    rm = judge([a.base_url, b.base_url], max_concurrency=8)
    a.restart(after_s=0.0, down_s=0.6)
    await asyncio.sleep(0.1)
    res = await rm.ascore(batch(100, "down"))  # a is down: b scores everything
    assert right(res, 100) == 100 and {r.extra["replica"] for r in res} == {b.base_url}
    assert rm.http.replicas[0].breaker.times_opened == 1
    await asyncio.sleep(1.2)  # a is back; the next batch's probe finds it
    res = await rm.ascore(batch(200, "up"))
    assert right(res, 200) == 200
    assert sum(r.extra["replica"] == a.base_url for r in res) >= 40
    assert rm.http.replicas[0].breaker.state == "closed"
    await rm.aclose()


async def test_routing_is_sticky_by_prompt_prefix(judge, servers):
    a, b = servers(), servers()
    rm = judge([a.base_url, b.base_url], max_concurrency=64)
    first = await rm.ascore(batch(60))
    again = await rm.ascore(batch(60))
    same = sum(x.extra["replica"] == y.extra["replica"] for x, y in zip(first, again, strict=True))
    assert same >= 54  # the same prompt goes to the same replica (its prefix cache)
    assert len({r.extra["replica"] for r in first}) == 2
    await rm.aclose()


def test_base_url_list_is_validated():
    from rewardkit.backends.generative import GenerativeRM
    from rewardkit.errors import ConfigError

    def make(url):
        cfg = {"base_url": url, "model": "m"}
        return GenerativeRM(RewardModelConfig(enable=True, backend="generative", rollout=cfg))

    assert len(make(["http://127.0.0.1:1", "http://127.0.0.1:2/"]).http.replicas) == 2
    for bad in ([], ["http://127.0.0.1:1", "http://127.0.0.1:1"], ["ftp://x"]):
        with pytest.raises(ConfigError):
            make(bad)
