"""`rewardkit serve` over real HTTP on 127.0.0.1: both protocols, auth, limits, load, metrics, shutdown."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from click.testing import CliRunner

from rewardkit.server import STATE, create_app, serve_command, split_query

TOKEN = "s3cret-token"


@pytest.fixture
async def make_client():
    clients = []

    async def make(config, **kwargs) -> TestClient:
        client = TestClient(TestServer(create_app(config, **kwargs), host="127.0.0.1"))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for c in clients:
        await c.close()


async def test_score_protocol(make_client, rk_config):
    client = await make_client(rk_config)
    samples = [
        {"prompt": "6*7?", "response": "42", "ground_truth": "42", "data_source": "toy"},
        {"prompt": [{"role": "user", "content": "hi"}], "response": "héllo 🙂", "ground_truth": "x"},
        {"response": "FAIL", "ground_truth": "x"},
        {"response": "ABSTAIN"},
        {"solution_str": "7", "reward_model": {"ground_truth": "7"}},
    ]
    resp = await client.post("/v1/score", json={"samples": samples})
    assert resp.status == 200
    body = await resp.json()
    assert body["scores"] == [1.0, 0.0, None, None, 1.0]
    assert body["status"] == ["ok", "ok", "failed", "abstained", "ok"]
    assert body["reasons"] == [None, None, "error", None, None]
    assert "asked to fail" in body["errors"][2]
    assert body["extra"]["acc"] == [True, False, None, None, True]
    assert body["metrics"]["reward/num_failed"] == 1.0

    empty = await client.post("/v1/score", json={"samples": []})
    assert empty.status == 200 and (await empty.json())["scores"] == []


async def test_openrlhf_protocol(make_client, rk_config):
    client = await make_client({**rk_config, "failure_score": -1.0}, strip_tokens=["</s>", "<pad>"])
    payload = {
        "query": ["<s>Q: 6*7? A: 42</s><pad><pad>", "<s>Q: 1+1? A: 3</s>", "<s>Q: break A: FAIL"],
        "prompts": ["<s>Q: 6*7? A: ", "<s>Q: 1+1? A: ", "<s>Q: break A: "],
        "labels": ["42", "2", "x"],
    }
    resp = await client.post("/get_reward", json=payload)
    assert resp.status == 200
    body = await resp.json()
    assert body["rewards"] == [1.0, 0.0, -1.0]  # failure -> the configured failure_score, and it says so
    assert body["scores"] == body["rewards"]
    assert body["status"] == ["ok", "ok", "failed"]
    assert body["extra_logs"]["failed"] == [0.0, 0.0, 1.0]

    # a bare query (old OpenRLHF clients send only "query"): the whole text is the response
    resp = await client.post("/get_reward", json={"query": ["42"], "labels": ["42"]})
    assert (await resp.json())["rewards"] == [1.0]

    # a query that does not contain its prompt fails alone (unroutable); the others are scored
    bad = await client.post(
        "/get_reward", json={"query": ["abc", "Q: 42"], "prompts": ["zzz", "Q: "], "labels": ["1", "42"]}
    )
    assert bad.status == 200
    body = await bad.json()
    assert body["status"] == ["failed", "ok"] and body["reasons"] == ["unroutable", None]
    assert "sample 0, field 'query': does not contain its prompt" in body["errors"][0]
    assert body["rewards"] == [-1.0, 1.0] and body["extra_logs"]["failed"] == [1.0, 0.0]
    assert body["scores"] == [-1.0, 1.0]  # scores: the scorer's acc where it gives one

    short = await client.post("/get_reward", json={"query": ["a", "b"], "prompts": ["a"]})
    assert short.status == 400 and (await short.json())["field"] == "prompts"


async def test_openrlhf_with_builtin_gsm8k_scorer(make_client, gsm8k_test_path):
    """Real GSM8K rows through /get_reward, routed by data source to the built-in gsm8k scorer."""
    from rewardkit.plugins import get_registries

    if "openai/gsm8k" not in get_registries().scorers.data_sources():
        pytest.skip("the built-in gsm8k scorer is not registered")
    rows = [json.loads(line) for line in gsm8k_test_path.read_text(encoding="utf-8").splitlines()[:6]]
    prompts = [f"<|im_start|>user\n{r['question']}<|im_end|>\n<|im_start|>assistant\n" for r in rows]
    responses = [r["answer"] if i % 2 == 0 else "I am not sure. #### 123456789" for i, r in enumerate(rows)]
    labels = [r["answer"].rsplit("####", 1)[1].strip() for r in rows]
    client = await make_client({"executor": "inline"}, strip_tokens=["</s>"])
    resp = await client.post(
        "/get_reward",
        json={
            "query": [p + a + "</s>" for p, a in zip(prompts, responses, strict=True)],
            "prompts": prompts,
            "labels": labels,
            "data_source": ["openai/gsm8k"] * len(rows),
        },
    )
    assert resp.status == 200
    assert (await resp.json())["rewards"] == [1.0, 0.0] * 3


async def test_openrlhf_example_client(make_client, rk_config):
    """examples/openrlhf_remote_rm.py sends what OpenRLHF sends, and reads the rewards back."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "openrlhf_remote_rm.py"
    spec = importlib.util.spec_from_file_location("openrlhf_remote_rm", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    client = await make_client(rk_config, token=TOKEN, strip_tokens=["</s>"])
    prompt = "<|im_start|>user\nWhat is 6 * 7?<|im_end|>\n<|im_start|>assistant\n"
    answer = await asyncio.to_thread(
        example.get_rewards,
        str(client.make_url("/get_reward")),
        [prompt + "42</s>", prompt + "41</s>"],
        [prompt, prompt],
        ["42", "42"],
        TOKEN,
    )
    assert answer["rewards"] == [1.0, 0.0] and answer["status"] == ["ok", "ok"]


def test_split_query():
    assert split_query("PROMPT answer", "PROMPT ") == "answer"
    assert split_query("<bos>PROMPT answer<eos><pad>", "PROMPT ", ("<eos>", "<pad>")) == "answer"
    assert split_query("no prompt here", "PROMPT") is None
    assert split_query("everything", None) == "everything"
    assert split_query("P", "P") == ""


async def test_auth(make_client, rk_config):
    client = await make_client(rk_config, token=TOKEN)
    body = {"samples": [{"response": "1", "ground_truth": "1"}]}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        resp = await client.post("/v1/score", json=body, headers=headers)
        assert resp.status == 401 and "token" in (await resp.json())["error"]
    assert (await client.get("/metrics")).status == 401
    assert (await client.post("/get_reward", json={"query": ["1"]})).status == 401
    ok = await client.post("/v1/score", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status == 200 and (await ok.json())["scores"] == [1.0]
    health = await client.get("/health")  # open, for load balancers
    assert health.status == 200 and (await health.json())["status"] == "ok"


async def test_malformed_and_oversize_requests_keep_the_server_up(make_client, rk_config):
    client = await make_client(rk_config, max_batch=8, max_body_mb=0.01)
    good = {"samples": [{"response": "1", "ground_truth": "1"}]}

    async def still_up():
        resp = await client.post("/v1/score", json=good)
        assert resp.status == 200 and (await resp.json())["scores"] == [1.0]

    cases = [
        (dict(data=b"{not json"), 400, "not valid JSON"),
        (dict(data=b""), 400, "empty"),
        (dict(json=[1, 2]), 400, "samples"),
        (dict(json={"samples": {"response": "1"}}), 400, "must be a list"),
        (dict(json={"samples": [{"response": "x"}] * 9}), 413, "limit of 8"),
        (dict(data=b'{"samples": ["' + b"x" * 20_000 + b'"]}'), 413, "byte limit"),
        (dict(data=b"\xff\xfe\x00"), 400, "not valid JSON"),
    ]
    for kwargs, status, text in cases:
        resp = await client.post("/v1/score", **kwargs)
        assert resp.status == status, kwargs
        assert resp.content_type == "application/json"
        assert text in (await resp.json())["error"]
        await still_up()

    async def chunks():  # no Content-Length: the limit still holds while reading
        for _ in range(30):
            yield b" " * 1000

    resp = await client.post("/v1/score", data=chunks())
    assert resp.status == 413
    await still_up()

    bad_sample = {"samples": [{"response": "1"}, {"response": "2", "prompt": 5}]}
    resp = await client.post("/v1/score", json=bad_sample)
    assert resp.status == 422
    err = await resp.json()
    assert (err["index"], err["field"]) == (1, "prompt")
    await still_up()

    missing = await client.get("/v2/nothing")
    assert missing.status == 404 and missing.content_type == "application/json"
    wrong_method = await client.get("/v1/score")
    assert wrong_method.status == 405
    await still_up()


async def test_unknown_data_source_fails_that_sample_only(make_client):
    client = await make_client({"executor": "inline"})
    samples = [
        {"response": "1", "data_source": "no/such-source"},
        {"response": "#### 3", "ground_truth": "3", "data_source": "openai/gsm8k"},
    ]
    resp = await client.post("/v1/score", json={"samples": samples})
    assert resp.status == 200  # was a 422 for the whole batch
    body = await resp.json()
    assert body["status"] == ["failed", "ok"] and body["reasons"] == ["unroutable", None]
    assert "field 'data_source'" in body["errors"][0] and "no/such-source" in body["errors"][0]
    assert body["metrics"]["reward/failed/unroutable"] == 1.0


async def test_strict_routing_answers_422_naming_the_sample(make_client):
    client = await make_client({"executor": "inline", "strict_routing": True})
    resp = await client.post(
        "/v1/score", json={"samples": [{"response": "1", "data_source": "no/such-source"}]}
    )
    assert resp.status == 422
    err = await resp.json()
    assert (err["index"], err["field"]) == (0, "data_source") and "no/such-source" in err["error"]


async def test_default_scorer_scores_openrlhf_requests(make_client):
    """OpenRLHF sends no data source: a default server answered 422; --default-scorer scores it."""
    plain = await make_client({"executor": "inline"})
    payload = {"query": ["Q: 2+2? #### 4"], "prompts": ["Q: 2+2? "], "labels": ["4"]}
    body = await (await plain.post("/get_reward", json=payload)).json()
    assert body["status"] == ["failed"] and body["reasons"] == ["unroutable"]
    client = await make_client({"executor": "inline", "extra_keys": ["pred"]}, default_scorer="gsm8k")
    body = await (await client.post("/get_reward", json=payload)).json()
    assert body["status"] == ["ok"] and body["rewards"] == [1.0] and body["extra_logs"]["acc"] == [1.0]
    assert "pred" not in body["extra_logs"]  # not a number: not for OpenRLHF's tensors
    bad = {"query": ["no prompt here"], "prompts": ["Q: "], "labels": ["4"]}
    assert (await (await client.post("/get_reward", json=bad)).json())["reasons"] == ["unroutable"]
    metrics = await (await client.get("/metrics")).text()
    assert 'rewardkit_sample_failures_total{reason="unroutable"} 1' in metrics
    with pytest.raises(Exception, match="unknown scorer 'gsm8kk'"):
        create_app({"executor": "inline"}, default_scorer="gsm8kk")


def test_serve_command_has_default_scorer_flag():
    res = CliRunner().invoke(serve_command, ["--help"])
    assert res.exit_code == 0 and "--default-scorer" in res.output


METRIC_LINE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_]+="[^"]*",?)*\})? (-?[0-9.e+-]+|\+Inf|NaN)$'
)


def parse_metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-z_]+ ", line), line
            continue
        assert METRIC_LINE.match(line), line
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


async def test_load_nothing_lost_and_metrics(make_client, rk_config):
    client = await make_client(rk_config)
    url = str(client.make_url("/v1/score"))
    n_requests, n_clients, per_request = 200, 16, 4
    answers: dict[int, list] = {}

    async def one_client(worker: int) -> None:
        async with aiohttp.ClientSession() as session:
            for r in range(worker, n_requests, n_clients):
                samples = [
                    {"response": str(r * 10 + j), "ground_truth": str(r * 10 + j if j % 2 == 0 else -1)}
                    for j in range(per_request)
                ]
                async with session.post(url, json={"samples": samples}) as resp:
                    assert resp.status == 200
                    answers[r] = (await resp.json())["scores"]

    await asyncio.wait_for(asyncio.gather(*(one_client(w) for w in range(n_clients))), timeout=120)
    assert sorted(answers) == list(range(n_requests))
    assert all(scores == [1.0, 0.0, 1.0, 0.0] for scores in answers.values())

    text = await (await client.get("/metrics")).text()
    m = parse_metrics(text)
    assert m['rewardkit_requests_total{endpoint="/v1/score",code="200"}'] == n_requests
    assert m['rewardkit_samples_total{status="ok"}'] == n_requests * per_request
    assert m['rewardkit_samples_total{status="failed"}'] == 0
    assert m['rewardkit_request_duration_seconds_count{endpoint="/v1/score"}'] == n_requests
    assert m['rewardkit_request_duration_seconds_bucket{endpoint="/v1/score",le="+Inf"}'] == n_requests
    buckets = [
        v
        for k, v in m.items()
        if k.startswith('rewardkit_request_duration_seconds_bucket{endpoint="/v1/score"')
    ]
    assert buckets == sorted(buckets)  # cumulative
    assert m["rewardkit_in_flight_requests"] == 0  # /metrics and /health do not count themselves


async def test_metrics_count_failures(make_client, rk_config):
    client = await make_client(rk_config)
    await client.post("/v1/score", json={"samples": [{"response": "FAIL"}, {"response": "ABSTAIN"}]})
    await client.post("/v1/score", data=b"nope")
    resp = await client.get("/metrics")
    assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    m = parse_metrics(await resp.text())
    assert m['rewardkit_sample_failures_total{reason="error"}'] == 1
    assert m['rewardkit_samples_total{status="abstained"}'] == 1
    assert m['rewardkit_requests_total{endpoint="/v1/score",code="400"}'] == 1


def test_cli_refuses_public_bind_without_token(monkeypatch):
    monkeypatch.delenv("REWARDKIT_SERVE_TOKEN", raising=False)
    result = CliRunner().invoke(serve_command, ["--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code == 2
    assert "without a token" in result.output and "--token" in result.output


async def test_serve_refuses_public_bind_without_token(rk_config):
    from rewardkit.server import serve

    app = create_app(rk_config)
    try:
        for host in ("0.0.0.0", "::", "192.0.2.1"):
            with pytest.raises(ValueError, match="without a token"):
                await serve(app, host, 0)
    finally:
        await app[STATE].engine.aclose()


def test_cli_reports_bad_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward:\n  executer: inline\n", encoding="utf-8")
    result = CliRunner().invoke(serve_command, ["--config", str(bad), "--port", "0"])
    assert (
        result.exit_code == 1 and "executer" in result.output and "Did you mean 'executor'" in result.output
    )
    missing = tmp_path / "missing_fn.yaml"
    missing.write_text(
        "reward:\n  custom_reward_function:\n    path: /nonexistent/reward.py\n", encoding="utf-8"
    )
    result = CliRunner().invoke(serve_command, ["--config", str(missing), "--port", "0"])
    assert result.exit_code == 1 and "/nonexistent/reward.py" in result.output


def _post(url: str, payload: dict, timeout: float = 60) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.mark.slow
def test_sigterm_finishes_the_in_flight_batch(tmp_path, scorer_path):
    config = tmp_path / "serve.yaml"
    config.write_text(
        f"reward:\n  executor: inline\n  custom_reward_function:\n    path: {scorer_path}\n", encoding="utf-8"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("REWARDKIT_SERVE_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rewardkit.server", "--config", str(config), "--port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if found:
                port = int(found.group(1))
        assert port, f"server did not start (rc={proc.poll()})"
        base = f"http://127.0.0.1:{port}"
        assert _post(base + "/v1/score", {"samples": [{"response": "1", "ground_truth": "1"}]})[1][
            "scores"
        ] == [1.0]

        slow: dict = {}
        batch = {"samples": [{"response": "SLEEP 2"}, {"response": "5", "ground_truth": "5"}]}
        thread = threading.Thread(target=lambda: slow.update(answer=_post(base + "/v1/score", batch)))
        thread.start()
        while _get(base + "/health")["in_flight"] < 1:  # the slow batch (not this health check)
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        thread.join(timeout=60)
        status, body = slow["answer"]
        assert status == 200 and body["scores"] == [1.0, 1.0]
        assert proc.wait(timeout=30) == 0
        err = proc.stderr.read()
        assert "draining 1 in-flight request(s)" in err and "stopped" in err
        with pytest.raises(urllib.error.URLError):
            _get(base + "/health")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
