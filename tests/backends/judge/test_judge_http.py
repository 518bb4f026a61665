"""The generative judge against a real scripted HTTP server: nothing lost, every failure typed."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from rewardkit.batch import to_samples


def samples_of(*responses, **fields):
    return to_samples([{"prompt": "Rate this.", "response": r, **fields} for r in responses])


async def test_scores_parse_and_normalise(server, make_judge):
    rm = make_judge()
    res = await rm.ascore(samples_of("plain", "x @@reply=Fine.|Score: 10@@", "x @@reply=Score: 0@@"))
    assert [r.status for r in res] == ["ok"] * 3
    assert [r.score for r in res] == [0.7, 1.0, 0.0]
    assert res[0].extra["judge_text"].endswith("Score: 7")
    assert res[0].extra["retries"] == 0 and res[0].extra["cached"] is False and res[0].extra["truncated"] == 0
    assert res[0].extra["latency_s"] > 0
    raw = make_judge(normalize_to=None)
    assert [r.score for r in await raw.ascore(samples_of("x @@reply=Score: 9@@"))] == [9.0]
    m = rm.metrics()
    assert m["requests"] == 3 and m["samples"] == 3 and m["tokens/prompt"] > 0 and m["tokens/completion"] > 0
    assert 0 < m["latency/p50_s"] <= m["latency/p99_s"]
    assert rm.metrics()["requests"] == 0  # collected metrics reset
    await rm.aclose()
    await raw.aclose()


async def test_unparseable_and_out_of_range_keep_the_judge_text(server, make_judge):
    rm = make_judge()
    res = await rm.ascore(
        samples_of("x @@reply=I cannot decide.@@", "x @@reply=Score: 11@@", "x @@reply=Score: -1@@")
    )
    assert [r.status for r in res] == ["failed"] * 3
    assert [r.reason for r in res] == ["unparseable"] * 3
    assert all(r.score is None for r in res)
    assert res[0].extra["judge_text"] == "I cannot decide."
    assert "outside score_range [0, 10]" in res[1].error
    assert rm.metrics()["failed/unparseable"] == 3
    await rm.aclose()


async def test_transient_failures_are_retried(server, make_judge):
    # (a higher breaker threshold: six failures in a row would, rightly, open the circuit)
    rm = make_judge(request_timeout_s=0.5, max_retries=3, breaker_threshold=50)
    res = await rm.ascore(
        samples_of(
            "a @@tag=t500;fail=500x2@@",
            "b @@tag=t503;fail=503x1@@",
            "c @@tag=t408;fail=408x1@@",
            "d @@tag=thang;hang=1@@",
            "e @@tag=tdrop;drop=1@@",
        )
    )
    assert [r.status for r in res] == ["ok"] * 5, [r.error for r in res]
    assert [r.extra["retries"] for r in res] == [2, 1, 1, 1, 1]
    m = rm.metrics()
    assert m["retries"] == 6 and m["requests"] == 11
    assert m["errors/5xx"] == 3 and m["errors/408"] == 1 and m["errors/timeout"] == 1
    assert m["errors/connection"] == 1
    await rm.aclose()


async def test_permanent_failures_fail_with_the_right_reason(server, make_judge):
    rm = make_judge(request_timeout_s=0.4, max_retries=2, breaker_threshold=100)
    res = await rm.ascore(
        samples_of(
            "a @@tag=p500;fail=500x99@@",
            "b @@tag=phang;hang=99@@",
            "c @@tag=pdrop;drop=99@@",
            "d @@tag=p400;fail=400x99@@",
            "e @@tag=p422;fail=422x99@@",
            "f @@tag=pgarbage;garbage=99@@",
            "ok",
        )
    )
    assert [r.status for r in res] == ["failed"] * 6 + ["ok"]
    assert [r.reason for r in res[:6]] == ["http", "timeout", "http", "http", "http", "http"]
    assert "gave up after 3 attempts" in res[0].error and "HTTP 500" in res[0].error
    assert "scripted failure 400" in res[3].error  # the server's own message
    assert "not JSON" in res[5].error
    per_tag = {
        t: sum(r["tag"] == t for r in server.requests)
        for t in ("p500", "phang", "pdrop", "p400", "p422", "pgarbage")
    }
    # retried where it can help, never for other 4xx or a garbage body
    assert per_tag == {"p500": 3, "phang": 3, "pdrop": 3, "p400": 1, "p422": 1, "pgarbage": 3}
    await rm.aclose()


async def test_retry_after_is_respected(server, make_judge):
    rm = make_judge(backoff_base_s=0.001, backoff_cap_s=0.002)
    res = await rm.ascore(samples_of("a @@tag=ra;fail=429x1;retry_after=0.5@@", "b @@tag=rb;fail=429x1@@"))
    assert [r.status for r in res] == ["ok", "ok"]
    times = {t: [r["t"] for r in server.requests if r["tag"] == t] for t in ("ra", "rb")}
    gap_after, gap_plain = times["ra"][1] - times["ra"][0], times["rb"][1] - times["rb"][0]
    assert gap_after >= 0.45  # waited the server's Retry-After ...
    assert gap_plain < 0.25  # ... where its own backoff alone would have been short
    capped = make_judge(backoff_base_s=0.001, retry_after_cap_s=0.05, batch_timeout_s=10)
    start = time.monotonic()
    assert (await capped.ascore(samples_of("c @@tag=rc;fail=429x1;retry_after=30@@")))[0].status == "ok"
    assert time.monotonic() - start < 10 / 4
    await rm.aclose()
    await capped.aclose()


async def test_retry_after_past_the_deadline_times_out(server, make_judge):
    rm = make_judge(batch_timeout_s=0.5)
    start = time.monotonic()
    res = await rm.ascore(samples_of("a @@tag=rd;fail=429x1;retry_after=20@@"))
    assert res[0].reason == "timeout" and "HTTP 429" in res[0].error
    assert time.monotonic() - start < 20 / 4
    await rm.aclose()


async def test_batch_deadline_fails_only_the_slow_samples(server, make_judge):
    rm = make_judge(batch_timeout_s=1.0, request_timeout_s=10)
    start = time.monotonic()
    res = await rm.ascore(samples_of("fast1", "slow @@delay=3@@", "fast2", "slow2 @@hang=5;tag=dl@@"))
    elapsed = time.monotonic() - start
    assert [r.status for r in res] == ["ok", "failed", "ok", "failed"]
    assert res[1].reason == res[3].reason == "timeout"
    assert "deadline" in res[1].error
    assert elapsed < 2.5  # well before the slow answer would have come (3 s)
    assert rm.metrics()["failed/timeout"] == 2
    await rm.aclose()


async def test_nothing_is_lost_in_a_chaotic_batch(server, make_judge):
    rm = make_judge(request_timeout_s=0.25, max_retries=2, breaker_threshold=1000, max_concurrency=8)
    script = {
        "ok": ("{i}", "ok", None),
        "flaky": ("{i} @@tag=c{i};fail=500x1@@", "ok", None),
        "drop": ("{i} @@tag=c{i};drop=1@@", "ok", None),
        "dead": ("{i} @@tag=c{i};fail=503x9@@", "failed", "http"),
        "bad": ("{i} @@reply=whatever@@", "failed", "unparseable"),
        "no": ("{i} @@tag=c{i};fail=401x1@@", "failed", "http"),
        "hang": ("{i} @@tag=c{i};hang=9@@", "failed", "timeout"),
        "slow": ("{i} @@delay=0.05@@", "ok", None),
    }
    kinds = list(script) * 8
    responses = [script[k][0].format(i=i) for i, k in enumerate(kinds)]
    res = await rm.ascore(samples_of(*responses))
    assert len(res) == len(kinds)
    for k, r in zip(kinds, res, strict=True):
        assert (k, r.status, r.reason) == (k, script[k][1], script[k][2]), r.error
    m = rm.metrics()
    assert m["samples"] == len(kinds)
    assert m["failed/http"] == 16 and m["failed/unparseable"] == 8 and m["failed/timeout"] == 8
    await rm.aclose()


async def test_identical_requests_are_sent_once(server, make_judge):
    rm = make_judge()
    responses = ["a", "b", "a", "c", "a", "b", "c", "c", "a", "a"]
    res = await rm.ascore(samples_of(*responses))
    assert len(server.requests) == 3
    assert all(r.status == "ok" for r in res)
    m = rm.metrics()
    assert m["dedup/saved"] == 7 and m["requests"] == 3
    res[0].extra["mark"] = 1  # results are independent objects
    assert "mark" not in res[2].extra
    server.reset()
    nodedup = make_judge(dedup=False)
    await nodedup.ascore(samples_of(*responses))
    assert len(server.requests) == 10
    await rm.aclose()
    await nodedup.aclose()


async def test_cache_hit_on_second_run_with_a_new_instance(server, make_judge, tmp_path):
    path = tmp_path / "judge.sqlite"
    batch = samples_of("one @@reply=Score: 2@@", "two @@reply=Score: 4@@", "three @@tag=cf;fail=400x1@@")
    first = make_judge(cache_path=str(path))
    r1 = await first.ascore(batch)
    assert [r.status for r in r1] == ["ok", "ok", "failed"]
    assert first.metrics()["cache/hits"] == 0
    await first.aclose()
    n = len(server.requests)
    second = make_judge(cache_path=str(path), normalize_to=[0, 100])  # a new scale re-parses cached text
    r2 = await second.ascore(batch)
    assert [r.score for r in r2] == [20.0, 40.0, 70.0]
    assert [r.extra["cached"] for r in r2] == [True, True, False]
    assert len(server.requests) == n + 1  # only the request that failed before is sent again
    m = second.metrics()
    assert m["cache/hits"] == 2 and m["requests"] == 1
    assert m["latency/p50_s"] > 0  # request latencies only: cache hits do not count as 0 s
    other_template = make_judge(cache_path=str(path), template="Judge: {response}\nScore:")
    await other_template.ascore(batch[:1])
    assert len(server.requests) == n + 2  # a different template is a different request
    await second.aclose()
    await other_template.aclose()


async def test_truncation_is_marked_and_reported(server, make_judge):
    rm = make_judge(max_prompt_chars=1500)
    long = "START " + "blah " * 2000 + " END"
    res = await rm.ascore(samples_of(long, "short"))
    assert [r.status for r in res] == ["ok", "ok"]
    cut = res[0].extra["truncated"]
    assert cut > 8000 and res[1].extra["truncated"] == 0
    sent = server.requests[0]["text"] if "START" in server.requests[0]["text"] else server.requests[1]["text"]
    assert f"[... truncated {cut} characters ...]" in sent
    assert "START" in sent and "END" in sent and len(sent) <= 1500
    assert rm.metrics()["truncated"] == 1
    tail = make_judge(context_length=600, max_tokens=100, chars_per_token=3, truncate="tail")
    res = await tail.ascore(samples_of(long))
    sent = server.requests[-1]["text"]
    assert res[0].extra["truncated"] > 0 and "END" not in sent and len(sent) <= 1500
    await rm.aclose()
    await tail.aclose()


async def test_prompt_over_budget_and_missing_fields_fail_alone(server, make_judge):
    rm = make_judge(template="correctness", max_prompt_chars=800)
    batch = to_samples(
        [
            {"prompt": "q" * 2000, "response": "r", "ground_truth": "1"},
            {"prompt": "q", "response": "r"},
            {"prompt": "What is 6*7?", "response": "The answer is 42.", "ground_truth": "42"},
            {"prompt": "What is 6*7?", "response": "The answer is 41.", "ground_truth": "42"},
        ]
    )
    res = await rm.ascore(batch)
    assert [(r.status, r.reason) for r in res] == [
        ("failed", "input_too_large"),
        ("failed", "error"),
        ("ok", None),
        ("ok", None),
    ]
    assert "ground_truth" in res[1].error
    assert [r.score for r in res[2:]] == [1.0, 0.0]
    assert len(server.requests) == 2
    await rm.aclose()


async def test_pairwise_and_completions_api(server, make_judge):
    rm = make_judge(template="pairwise", api="completions")
    batch = to_samples(
        [
            {
                "prompt": "p",
                "response": "mine @@reply=Answer: yes@@",
                "extra_info": {"reference_response": "theirs"},
            },
            {
                "prompt": "p",
                "response": "mine2 @@reply=Answer: no@@",
                "extra_info": {"reference_response": "theirs"},
            },
        ]
    )
    res = await rm.ascore(batch)
    assert [r.score for r in res] == [1.0, 0.0]
    assert {r["path"] for r in server.requests} == {"/v1/completions"}
    assert "[Response B]\ntheirs" in server.requests[0]["text"]
    await rm.aclose()


async def test_empty_batch_unicode_and_empty_response(server, make_judge):
    rm = make_judge(api_key="sk-test")
    assert await rm.ascore([]) == []
    res = await rm.ascore(samples_of("", "答案是 42 ✓ @@reply=Score: 8@@"))
    assert [r.score for r in res] == [0.7, 0.8]
    assert {r["auth"] for r in server.requests} == {"Bearer sk-test"}
    await rm.aclose()


async def test_in_flight_cap_and_rpm_budget(server, make_judge):
    rm = make_judge(max_concurrency=3)
    res = await rm.ascore(samples_of(*[f"s{i} @@delay=0.05@@" for i in range(15)]))
    assert all(r.status == "ok" for r in res)
    assert 2 <= server.max_concurrent <= 3
    server.reset()
    limited = make_judge(rpm=1200)  # 20 requests/s, one second of burst
    start = time.monotonic()
    await limited.ascore(samples_of(*[f"r{i}" for i in range(30)]))
    assert time.monotonic() - start >= 0.45  # the 10 requests past the burst are spread over 0.5 s
    times = sorted(r["t"] for r in server.requests)
    assert times[-1] - times[0] >= 0.3
    await rm.aclose()
    await limited.aclose()


async def test_circuit_breaker_fails_fast_against_a_dead_port(dead_url, make_judge):
    rm = make_judge(
        base_url=dead_url,
        breaker_threshold=3,
        breaker_cooldown_s=0.5,
        max_retries=5,
        max_concurrency=4,
        batch_timeout_s=20,
    )
    start = time.monotonic()
    res = await rm.ascore(samples_of(*[f"s{i}" for i in range(40)]))
    elapsed = time.monotonic() - start
    assert all(r.status == "failed" for r in res)
    reasons = [r.reason for r in res]
    assert set(reasons) <= {"http", "circuit_open"} and reasons.count("circuit_open") >= 36
    msg = next(r.error for r in res if r.reason == "circuit_open")
    assert "circuit open" in msg and re.search(r"failed \d+ times in a row", msg)
    m = rm.metrics()
    assert m["requests"] <= 12  # not 40 samples x 6 attempts: the first wave, then one probe at a time
    assert elapsed < 20 / 4
    # A later batch is not failed for a cooldown: it sends one probe, and fails only when it fails.
    again = await rm.ascore(samples_of("later", "later2", "later3"))
    assert [r.reason for r in again] == ["circuit_open"] * 3 and rm.metrics()["requests"] == 1
    await rm.aclose()


async def test_half_open_sends_one_probe_and_queued_requests_wait_for_it(server, make_judge):
    rm = make_judge(breaker_threshold=2, breaker_cooldown_s=5, max_retries=1)
    server.queue = [{"fail": "500"}] * 5  # four first attempts fail, then the first probe
    res = await rm.ascore(samples_of("a", "b", "c", "d"))
    assert [r.status for r in res] == ["ok"] * 4  # queued, never failed, while the server recovered
    assert rm.http.breaker.times_opened == 1 and rm.http.breaker.state == "closed"
    sent = server.requests
    assert [q["status"] for q in sent] == [500] * 5 + [200] * 4
    # one probe at a time, spaced: the second went only after the first had failed
    assert sent[5]["t"] - sent[4]["t"] >= 0.15
    assert all(q["t"] >= sent[5]["t"] for q in sent[6:])  # the rest only after the probe's answer
    await rm.aclose()


def test_session_follows_the_running_event_loop(server, make_judge):
    rm = make_judge()
    for _ in range(2):
        res = asyncio.run(rm.ascore(samples_of("x")))
        assert res[0].status == "ok"
    assert rm.http.sessions_created == 2
    rm.close()
    rm.close()  # idempotent
    assert rm.state == "closed"
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(rm.ascore(samples_of("x")))


def test_unknown_error_kinds_are_counted_by_status(server, make_judge):
    rm = make_judge(max_retries=0)
    asyncio.run(rm.ascore(samples_of("x @@tag=k;fail=404x1@@")))
    assert re.search("errors/404", " ".join(rm.metrics()))


async def test_adaptive_concurrency_keeps_up_with_an_overloaded_server(make_judge):
    from .judge_server import ScriptedServer

    busy = ScriptedServer(service_time=0.02, capacity=4, overflow="429").start()
    try:
        batch = samples_of(*[f"s{i}" for i in range(80)])
        adaptive = make_judge(base_url=busy.base_url, max_concurrency=16, max_retries=8)
        res = await adaptive.ascore(batch)
        assert all(r.status == "ok" for r in res)
        m = adaptive.metrics()
        assert m["in_flight_limit/min"] <= 8
        fixed = make_judge(
            base_url=busy.base_url, max_concurrency=16, max_retries=8, adaptive_concurrency=False
        )
        await fixed.ascore(samples_of(*[f"t{i}" for i in range(80)]))
        m_fixed = fixed.metrics()
        assert m.get("errors/429", 0) < m_fixed["errors/429"] / 2  # far fewer wasted requests
        await adaptive.aclose()
        await fixed.aclose()
    finally:
        busy.stop()


async def test_a_broken_cache_file_warns_and_scores_on(server, make_judge, tmp_path):
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    rm = make_judge(cache_path=str(bad))
    with pytest.warns(UserWarning, match="scoring without it"):
        res = await rm.ascore(samples_of("x"))
    assert res[0].status == "ok"
    assert rm.metrics()["cache/errors"] >= 1
    await rm.aclose()


async def test_odd_extra_info_fails_that_sample_only(server, make_judge):
    rm = make_judge(template="{response} / {extra_info[meta][level]}")
    batch = to_samples(
        [
            {"response": "a", "extra_info": {"meta": {"level": "3"}}},
            {"response": "b", "extra_info": {"meta": "flat string"}},
        ]
    )
    res = await rm.ascore(batch)
    assert [(r.status, r.reason) for r in res] == [("ok", None), ("failed", "error")]
    await rm.aclose()


def test_two_event_loops_at_once_share_one_backend(server, make_judge):
    import threading

    rm = make_judge()
    results = {}

    def run(name):
        results[name] = asyncio.run(rm.ascore(samples_of(*[f"{name}{i} @@delay=0.02@@" for i in range(10)])))

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(r.status == "ok" for n in ("a", "b") for r in results[n])
    assert rm.http.sessions_created == 2
    assert rm.metrics()["samples"] == 20


async def test_unparseable_and_cut_off_answers_are_not_cached(server, make_judge, tmp_path):
    path = tmp_path / "judge.sqlite"
    batch = samples_of(
        "a @@tag=ua;reply=I cannot decide.@@",
        "b @@tag=ub;reply=Long reasoning... Score: 6;finish=length@@",
        "c @@tag=uc;reply=Score: 4@@",
    )
    first = make_judge(cache_path=str(path))
    r1 = await first.ascore(batch)
    assert [(r.status, r.reason) for r in r1] == [("failed", "unparseable"), ("ok", None), ("ok", None)]
    assert [r.extra.get("judge_cut_off") for r in r1] == [False, True, False]  # a cut is never silent
    assert first.metrics()["judge_cut_off"] == 1
    await first.aclose()
    second = make_judge(cache_path=str(path))
    r2 = await second.ascore(batch)
    assert [r.extra["cached"] for r in r2] == [False, False, True]  # only the clean answer was kept
    assert sorted(r["tag"] for r in server.requests) == ["ua", "ua", "ub", "ub", "uc"]
    await second.aclose()


async def test_cache_key_covers_everything_that_changes_the_answer(server, make_judge, tmp_path):
    path = str(tmp_path / "judge.sqlite")
    rows = [{"prompt": "What is 6*7?", "response": "42", "ground_truth": "42"}]
    base = {"cache_path": path, "template": "correctness"}
    judges = []

    def judge(**rollout):
        judges.append(make_judge(**rollout))
        return judges[-1]

    await judge(**base).ascore(to_samples(rows))
    assert len(server.requests) == 1
    await judge(**base).ascore(to_samples(rows))  # same everything: a hit
    assert len(server.requests) == 1
    variants = [
        {"model": "another-judge"},
        {"temperature": 0.7},
        {"max_tokens": 64},
        {"seed": 3},
        {"system_prompt": "Be strict."},
        {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
        {"api": "completions"},
    ]
    for i, v in enumerate(variants, start=2):
        await judge(**base, **v).ascore(to_samples(rows))
        assert len(server.requests) == i, f"{v} must not reuse another request's answer"
    for field, value in (("ground_truth", "41"), ("prompt", "What is 7*6?"), ("response", "41")):
        await judge(**base).ascore(to_samples([{**rows[0], field: value}]))
        assert server.requests[-1]["text"] != server.requests[0]["text"]
    assert len(server.requests) == len(variants) + 4
    for j in judges:
        await j.aclose()


async def test_server_errors_with_retry_after_wait_too(server, make_judge):
    rm = make_judge(backoff_base_s=0.001, backoff_cap_s=0.002)
    res = await rm.ascore(samples_of("a @@tag=s503;fail=503x1;retry_after=0.4@@"))
    assert res[0].status == "ok" and res[0].extra["retries"] == 1
    t = [r["t"] for r in server.requests if r["tag"] == "s503"]
    assert t[1] - t[0] >= 0.35
    await rm.aclose()


async def test_a_reply_without_completion_text_fails_typed_and_odd_usage_is_ignored(make_judge):
    from aiohttp import web

    async def handler(request):
        body = await request.json()
        content = "Score: 5" if "fine" in body["messages"][-1]["content"] else None
        return web.json_response(
            {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": "many", "completion_tokens": None},
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        rm = make_judge(base_url=f"http://127.0.0.1:{port}")
        res = await rm.ascore(samples_of("x", "y", "fine"))
        assert [(r.status, r.reason) for r in res] == [("failed", "http")] * 2 + [("ok", None)]
        assert res[2].score == 0.5  # odd usage counts do not cost the judgement
        assert "NoneType, not a string" in res[0].error and res[0].extra["latency_s"] > 0
        await rm.aclose()
    finally:
        await runner.cleanup()


async def test_tpm_budget_spreads_requests_and_is_corrected_by_usage(server, make_judge):
    batch = samples_of(*[f"t{i} " + "word " * 80 for i in range(12)])
    probe = make_judge(max_tokens=10)
    est = probe._request(batch[0]).est_tokens
    tpm = est * 4 * 60  # four requests' estimate per second, one second of burst
    limited = make_judge(max_tokens=10, tpm=tpm)
    res = await limited.ascore(batch)
    assert [r.status for r in res] == ["ok"] * 12
    times = sorted(r["t"] for r in server.requests)
    # 12 requests at about 4 a second with 4 up front: they cannot all go out at once
    assert times[-1] - times[0] >= 0.5
    m = limited.metrics()
    used = m["tokens/prompt"] + m["tokens/completion"]
    assert 0 < used < 12 * est  # the server's usage (smaller than the estimate) was counted
    await probe.aclose()
    await limited.aclose()


def test_sessions_left_on_closed_event_loops_are_closed_cleanly(server, make_judge):
    import gc
    import warnings

    rm = make_judge()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        for _ in range(2):  # the second call finds the first loop closed and disposes of its session
            assert asyncio.run(rm.ascore(samples_of("x", "y")))[0].status == "ok"
        rm.close()
        gc.collect()
    leaked = [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
    assert leaked == []


async def test_a_failed_hedge_retries_instead_of_waiting_for_the_stalled_attempt(server, make_judge):
    rm = make_judge(request_timeout_s=2.0, stall_after_s=0.1, max_retries=3)
    server.queue = [{"hang": "1"}, {"fail": "503"}]  # the first attempt hangs, its hedge gets a 503
    res = await rm.ascore(samples_of("x"))
    assert res[0].status == "ok" and res[0].extra["attempts"] == 3
    m = rm.metrics()
    assert m["hedged"] == 1 and m.get("errors/timeout", 0) == 0  # never waited out the hung one
    assert [q["status"] for q in server.requests] == [-1, 503, 200]
    await rm.aclose()
