"""The ``remote`` backend against an OpenRLHF-style reward server (POST {query, prompts, labels} → {rewards})."""

from __future__ import annotations

import time

import pytest

from rewardkit.batch import to_samples
from rewardkit.errors import ConfigError


def batch(n, **extra):
    return to_samples(
        [
            {"prompt": f"Q{i}: ", "response": f"answer {i % 3}", "ground_truth": str(i % 2), **extra}
            for i in range(n)
        ]
    )


async def test_protocol_chunks_and_order(server, make_remote):
    rm = make_remote(batch_size=4)
    samples = batch(10)
    res = await rm.ascore(samples)
    assert [r.status for r in res] == ["ok"] * 10
    # the server rewards 1.0 when the label appears in the response part of the query
    expected = [1.0 if s.ground_truth in s.response else 0.0 for s in samples]
    assert [r.score for r in res] == expected
    assert len(server.requests) == 3  # chunks of 4, 4, 2
    first = server.requests[0]["text"].split("\n")
    assert first[0] == "Q0: answer 0"  # query = prompt + response
    assert res[0].extra["rm_extra"] == {"scores": expected[0]}
    m = rm.metrics()
    assert m["requests"] == 3 and m["samples"] == 10
    await rm.aclose()


async def test_legacy_query_only_protocol_and_query_template(server, make_remote):
    rm = make_remote(send_prompts=False, query_template="<q>{prompt}</q><a>{response}</a>")
    res = await rm.ascore(to_samples([{"prompt": "hi", "response": "there"}]))
    assert res[0].score == pytest.approx(len("<q>hi</q><a>there</a>") / 100)
    await rm.aclose()


async def test_wrong_length_rewards_fail_that_chunk_clearly(server, make_remote):
    rm = make_remote(batch_size=2)
    samples = to_samples(
        [
            {"prompt": "a", "response": "x", "ground_truth": "x"},
            {"prompt": "b", "response": "y @@short=1@@", "ground_truth": "y"},
            {"prompt": "c", "response": "z", "ground_truth": "z"},
        ]
    )
    res = await rm.ascore(samples)
    assert [(r.status, r.reason) for r in res] == [
        ("failed", "invalid_return"),
        ("failed", "invalid_return"),
        ("ok", None),
    ]
    assert "returned 1 rewards for 2 queries" in res[0].error
    await rm.aclose()


async def test_retries_breaker_and_dedup_on_the_shared_core(server, make_remote, dead_url):
    rm = make_remote(batch_size=2, max_retries=2)
    samples = to_samples(
        [
            {"prompt": "p", "response": "a @@tag=r1;fail=503x1@@", "ground_truth": "a"},
            {"prompt": "p", "response": "b", "ground_truth": "b"},
            {"prompt": "p", "response": "b", "ground_truth": "b"},
            {"prompt": "p", "response": "c @@tag=r2;fail=400x9@@", "ground_truth": "c"},
        ]
    )
    res = await rm.ascore(samples)
    assert [(r.status, r.reason) for r in res] == [
        ("ok", None),
        ("ok", None),
        ("ok", None),
        ("failed", "http"),
    ]
    assert res[0].extra["retries"] == 1
    m = rm.metrics()
    assert m["dedup/saved"] == 1 and m["retries"] == 1
    await rm.aclose()

    dead = make_remote(
        base_url=dead_url, batch_size=1, breaker_threshold=2, breaker_cooldown_s=0.3, max_concurrency=1
    )
    start = time.monotonic()
    res = await dead.ascore(batch(20))
    assert len(res) == 20 and {r.reason for r in res} <= {"http", "circuit_open"}
    assert sum(r.reason == "circuit_open" for r in res) >= 18
    assert dead.metrics()["requests"] <= 8  # two refusals, then one probe at a time
    assert time.monotonic() - start < 5
    await dead.aclose()


async def test_deadline_and_garbage(server, make_remote):
    rm = make_remote(batch_size=1, batch_timeout_s=1.0, request_timeout_s=5)
    res = await rm.ascore(
        to_samples(
            [
                {"prompt": "p", "response": "slow @@delay=3@@"},
                {"prompt": "p", "response": "junk @@tag=g;garbage=9@@"},
                {"prompt": "p", "response": "fine"},
            ]
        )
    )
    assert [(r.status, r.reason) for r in res] == [("failed", "timeout"), ("failed", "http"), ("ok", None)]
    await rm.aclose()


async def test_non_numeric_rewards_and_empty_batch(make_remote):
    from aiohttp import web

    async def handler(request):
        body = await request.json()
        return web.json_response({"rewards": [None, "1.5", "inf"][: len(body["query"])]})

    app = web.Application()
    app.router.add_post("/get_reward", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        rm = make_remote(base_url=f"http://127.0.0.1:{port}")
        assert await rm.ascore([]) == []
        res = await rm.ascore(to_samples([{"response": "a"}, {"response": "b"}, {"response": "c"}]))
        assert [(r.status, r.reason, r.score) for r in res] == [
            ("failed", "invalid_return", None),
            ("ok", None, 1.5),
            ("failed", "invalid_return", None),
        ]
        await rm.aclose()
    finally:
        await runner.cleanup()


def test_remote_settings_validation():
    from rewardkit.backends.remote import RemoteRM
    from rewardkit.config import RewardModelConfig

    with pytest.raises(ConfigError, match="batch_size"):
        RemoteRM(
            RewardModelConfig(
                enable=True, backend="remote", rollout={"base_url": "http://x", "batch_size": 0}
            )
        )
    with pytest.raises(ConfigError, match="query_template"):
        RemoteRM(
            RewardModelConfig(
                enable=True,
                backend="remote",
                rollout={"base_url": "http://x", "query_template": "{prompt}{answer}"},
            )
        )
    with pytest.raises(ConfigError, match="unknown key"):
        RemoteRM(
            RewardModelConfig(
                enable=True, backend="remote", rollout={"base_url": "http://x", "cache_path": "c"}
            )
        )


async def test_remote_backend_against_rewardkit_serve(tmp_path, make_remote):
    """Interop: the remote backend as OpenRLHF's client, ``rewardkit serve`` as the reward server."""
    from aiohttp import web

    from rewardkit import server as server_mod

    crf = tmp_path / "crf.py"
    crf.write_text(
        "def compute_score(solution_str, ground_truth):\n    return float(ground_truth in solution_str)\n"
    )
    config = {"executor": "inline", "custom_reward_function": {"path": str(crf)}}
    app = server_mod.create_app(config, token="tok", max_batch=3)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        rows = [{"prompt": f"Q{i} ", "response": f"A {i % 4}", "ground_truth": str(i % 2)} for i in range(7)]
        rm = make_remote(base_url=f"http://127.0.0.1:{port}", api_key="tok", batch_size=3)
        res = await rm.ascore(to_samples(rows))
        assert [r.score for r in res] == [1.0 if r["ground_truth"] in r["response"] else 0.0 for r in rows]
        too_big = make_remote(base_url=f"http://127.0.0.1:{port}", api_key="tok", batch_size=5)
        res = await too_big.ascore(to_samples(rows[:5]))
        assert {(r.status, r.reason) for r in res} == {("failed", "http")}  # 413: not retried
        assert "413" in res[0].error and too_big.metrics()["requests"] == 1
        no_token = make_remote(base_url=f"http://127.0.0.1:{port}", max_retries=0)
        assert (await no_token.ascore(to_samples(rows[:1])))[0].reason == "http"
        for b in (rm, too_big, no_token):
            await b.aclose()
    finally:
        await runner.cleanup()
