"""The SandboxFusion client against a real aiohttp server on 127.0.0.1 that imitates ``/run_code``."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from rewardkit.scorers.code import compute_score
from rewardkit.scorers.sandbox import Limits, run_python
from rewardkit.scorers.sandbox_fusion import limiter_for, run_code_url, run_python_remote

ADD = {"inputs": ["1 2\n", "3 4\n", "5 5\n"], "outputs": ["3\n", "7", "10\n"]}


class FakeSandboxFusion:
    """Runs the code with the local sandbox and answers in SandboxFusion's response format."""

    def __init__(self):
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_concurrency = 0
        self.fail_next: list[int] = []  # HTTP statuses to answer before behaving
        self.sandbox_error = False

    async def run_code(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if self.fail_next:
            return web.Response(status=self.fail_next.pop(0), text="busy")
        if self.sandbox_error:
            return web.json_response({"status": "SandboxError", "message": "pod crashed", "run_result": None})
        self.in_flight += 1
        self.max_concurrency = max(self.max_concurrency, self.in_flight)
        try:
            await asyncio.sleep(0.05)
            limits = Limits(timeout_s=float(body["run_timeout"]), memory_mb=int(body["memory_limit_MB"]))
            run = await run_python(body["code"], body.get("stdin", ""), limits)
        finally:
            self.in_flight -= 1
        status = {"ok": "Finished", "error": "Finished", "timeout": "TimeLimitExceeded"}[run.status]
        return web.json_response(
            {
                "status": "Success" if run.status == "ok" else "Failed",
                "message": "",
                "compile_result": None,
                "run_result": {
                    "status": status,
                    "execution_time": run.wall_s,
                    "return_code": run.returncode,
                    "stdout": run.stdout,
                    "stderr": run.stderr,
                },
                "files": {},
            }
        )


@pytest.fixture
async def fake_server():
    fake = FakeSandboxFusion()
    app = web.Application()
    app.router.add_post("/run_code", fake.run_code)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    fake.url = f"http://127.0.0.1:{port}"
    yield fake
    await runner.cleanup()


def test_run_code_url():
    assert run_code_url("http://h:1/") == "http://h:1/run_code"
    assert run_code_url("http://h:1/run_code") == "http://h:1/run_code"


async def test_scores_through_the_remote_sandbox(fake_server):
    cfg = {"url": fake_server.url, "max_concurrent": 4, "memory_limit_mb": 512}
    out = await compute_score("a, b = map(int, input().split())\nprint(a + b)", ADD, sandbox_fusion=cfg)
    assert out == {"score": 1.0, "acc": True, "passed": 3, "total": 3, "first_failure": None}
    first = fake_server.requests[0]
    assert first["language"] == "python" and first["stdin"] == "1 2\n" and first["memory_limit_MB"] == 512
    wrong = await compute_score("print(0)", ADD, sandbox_fusion=cfg)
    assert wrong["score"] == 0.0 and "wrong answer" in wrong["first_failure"]
    asserts = await compute_score(
        "def f(): return 1", ["assert f() == 1", "assert f() == 2"], sandbox_fusion=cfg
    )
    assert asserts["passed"] == 1


async def test_at_most_max_concurrent_in_flight(fake_server):
    cfg = {"url": fake_server.url, "max_concurrent": 2}
    outs = await asyncio.gather(
        *(compute_score("print(1)", ["assert True"], sandbox_fusion=cfg) for _ in range(6))
    )
    assert all(o["acc"] for o in outs)
    assert fake_server.max_concurrency == 2  # six requests, never more than two at once
    assert limiter_for(fake_server.url, 2).busy == 0


async def test_retries_busy_server_then_fails_loudly(fake_server):
    fake_server.fail_next = [503, 502]
    run = await run_python_remote("print(5)", "", url=fake_server.url, timeout_s=5)
    assert run.status == "ok" and run.stdout.strip() == "5" and len(fake_server.requests) == 3
    fake_server.fail_next = [503] * 3
    with pytest.raises(RuntimeError, match="failed after 3 attempts"):
        await run_python_remote("print(5)", "", url=fake_server.url, timeout_s=5)
    fake_server.fail_next = [400]
    with pytest.raises(RuntimeError, match="HTTP 400"):
        await run_python_remote("print(5)", "", url=fake_server.url, timeout_s=5)


async def test_sandbox_error_is_a_failure_not_a_zero(fake_server):
    fake_server.sandbox_error = True
    with pytest.raises(RuntimeError, match="pod crashed"):
        await compute_score("print(1)", ["assert True"], sandbox_fusion={"url": fake_server.url})


async def test_unreachable_server_raises():
    with pytest.raises(RuntimeError, match="failed after"):
        await run_python_remote("print(1)", "", url="http://127.0.0.1:9", timeout_s=1, retries=1)


async def test_timeout_maps_to_timeout(fake_server):
    cfg = {"url": fake_server.url}
    out = await compute_score("while True: pass", ["assert True"], timeout_s=1.0, sandbox_fusion=cfg)
    assert "timed out" in out["first_failure"]
    assert fake_server.requests[-1]["run_timeout"] == 1.0
