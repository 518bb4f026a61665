"""One judge budget across workers: K concurrent requests at most, measured at a real local server."""

from __future__ import annotations

import asyncio
import threading

import pytest
from aiohttp import web

pytestmark = [pytest.mark.ray, pytest.mark.slow]

K = 3


class CountingServer:
    """An aiohttp server on 127.0.0.1 that records how many requests it holds at once."""

    def __init__(self, delay_s: float = 0.05):
        self.delay_s = delay_s
        self.current = self.peak = self.total = 0
        self._lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        assert self._started.wait(10)

    async def _handle(self, request):
        with self._lock:
            self.current += 1
            self.total += 1
            self.peak = max(self.peak, self.current)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            with self._lock:
                self.current -= 1
        if request.method == "POST":  # OpenAI chat-completions, for the generative backend
            return web.json_response({"choices": [{"message": {"role": "assistant", "content": "Score: 7"}}]})
        return web.Response(text="1.0")

    def _serve(self):
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/judge", self._handle)
        app.router.add_post("/v1/chat/completions", self._handle)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._started.set()
        self.loop.run_forever()

    def reset(self):
        with self._lock:
            self.peak = self.total = 0

    def close(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def server():
    s = CountingServer(delay_s=0.1)
    yield s
    s.close()


def judge_batch(n: int, raw: bool = False) -> list[dict]:
    return [{"response": f"r{i}", "extra_info": {"raw": raw, "i": i}} for i in range(n)]


def test_global_judge_limit_holds_across_workers(ray_cluster, server, crf):
    from rewardkit.ray import RewardLoopManager

    config = {
        "num_workers": 2,
        "custom_reward_function": crf("judge", url=f"http://127.0.0.1:{server.port}/judge"),
    }
    with RewardLoopManager(config, worker_num_cpus=0.5, judge_concurrency=K) as m:
        # control: the same traffic outside the budget exceeds K (so the measurement can fail)
        server.reset()
        raw = m.compute(judge_batch(40, raw=True))
        assert raw.scores == [1.0] * 40 and server.total == 40
        assert server.peak > K

        server.reset()
        limited = m.compute(judge_batch(40))
        assert limited.scores == [1.0] * 40 and server.total == 40
        assert server.peak <= K
        assert server.peak >= 2  # the budget is shared, not one request at a time
        stats = ray_cluster.get(m.limiter.stats.remote())
        assert stats["max_in_use"] <= K and stats["in_use"] == 0 and stats["acquired"] == 40
        assert ray_cluster.get_actor(m.limiter_name, namespace="rewardkit") is not None
    with pytest.raises(ValueError):  # the named limiter goes away with the manager
        ray_cluster.get_actor(m.limiter_name, namespace="rewardkit")


def test_generative_backend_in_workers_shares_the_budget(ray_cluster, server):
    """The real judge backend, built inside each worker, sends through the one shared budget."""
    from rewardkit.ray import RewardLoopManager

    rollout = {"base_url": f"http://127.0.0.1:{server.port}", "model": "judge", "template": "rubric"}
    config = {
        "num_workers": 2,
        "reward_model": {
            "enable": True,
            "backend": "generative",
            "rollout": {**rollout, "max_concurrency": K},
        },
    }
    with RewardLoopManager(config, worker_num_cpus=0.5) as m:
        server.reset()
        result = m.compute([{"prompt": "q", "response": f"answer {i}"} for i in range(40)])
    assert result.status == ["ok"] * 40
    assert result.scores == [pytest.approx(0.7)] * 40
    assert server.total == 40
    assert server.peak <= K  # each worker alone may hold K: only the shared budget keeps the sum at K


async def test_cancelled_waiter_does_not_keep_a_slot(ray_cluster):
    """A judge request cancelled while waiting for a slot (a batch deadline) must not leak the lease
    the limiter grants it later: the budget would shrink by one slot until the lease expires."""
    import time

    from rewardkit.ray.limiter import create_limiter, judge_slot, set_limiter

    limiter = create_limiter("rewardkit-limiter-test-cancel", 1)
    try:
        held = await limiter.acquire.remote("driver")
        set_limiter(limiter, "waiter")
        entered = asyncio.Event()

        async def wait_for_slot():
            async with judge_slot():
                entered.set()

        task = asyncio.ensure_future(wait_for_slot())
        await asyncio.sleep(0.3)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await limiter.release.remote(held)
        give_up = time.monotonic() + 20
        stats = await limiter.stats.remote()
        while (stats["acquired"] < 2 or stats["in_use"]) and time.monotonic() < give_up:
            await asyncio.sleep(0.05)
            stats = await limiter.stats.remote()
        assert stats["acquired"] == 2 and stats["in_use"] == 0, stats  # granted late, then given back
        assert not entered.is_set()
    finally:
        set_limiter(None)
        ray_cluster.kill(limiter)
