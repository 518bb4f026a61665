"""A group of :class:`~rewardkit.ray.worker.RewardLoopWorker` actors with its own event loop."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rewardkit.ray.dispatch import Send, WorkerPool, dispatch
from rewardkit.ray.runtime import close_and_kill, ensure_ray
from rewardkit.ray.sharding import Shard
from rewardkit.runtime.loop import LoopThread

if TYPE_CHECKING:
    from rewardkit.config import RewardConfig
    from rewardkit.result import SampleResult


def default_num_workers(config: RewardConfig, num_cpus_per_worker: float) -> int:
    """``reward.num_workers``, else as many workers as the cluster's CPUs hold."""
    if config.num_workers:
        return config.num_workers
    import ray

    cpus = ray.cluster_resources().get("CPU", 1.0)
    return max(1, int(cpus // max(num_cpus_per_worker, 1e-6)))


class WorkerGroup:
    """``num_workers`` CPU worker actors spread over the cluster (scheduling strategy ``SPREAD``).

    Each worker asks for ``num_cpus`` CPUs, but never more than the cluster holds divided by the
    number of workers, so a small cluster still starts them all. Workers restart on failure
    (``max_restarts``); ``max_task_retries`` defaults to 0 because :func:`dispatch` re-sends a lost
    shard to a *live* worker itself.
    """

    def __init__(
        self,
        config: RewardConfig,
        *,
        num_workers: int | None = None,
        worker_executor: str = "inline",
        num_cpus: float = 1.0,
        model_replicas: Sequence[Any] | None = None,
        limiter: Any = None,
        max_restarts: int = 4,
        max_task_retries: int = 0,
        max_inflight: int = 2,
        startup_timeout_s: float = 120.0,
        name: str = "rewardkit-ray",
    ):
        import ray

        from rewardkit.ray.worker import worker_actor_class

        if worker_executor == "ray":
            raise ValueError("worker_executor must be a local executor (inline, process), not 'ray'")
        ensure_ray(config.ray_address)
        self.config = config
        n = num_workers or default_num_workers(config, num_cpus)
        cluster_cpus = ray.cluster_resources().get("CPU", 0.0)
        if cluster_cpus and n * num_cpus > cluster_cpus:
            num_cpus = cluster_cpus / n
        self.num_cpus = num_cpus
        cls = worker_actor_class()
        conf = config.model_dump(mode="json")
        handles = [
            cls.options(
                num_cpus=num_cpus,
                max_restarts=max_restarts,
                max_task_retries=max_task_retries,
                max_concurrency=max_inflight + 2,
                scheduling_strategy="SPREAD",
            ).remote(conf, worker_executor, num_cpus, list(model_replicas or []), limiter, rank)
            for rank in range(n)
        ]
        try:
            ray.get([h.ping.remote() for h in handles], timeout=startup_timeout_s)
        except Exception as e:
            for h in handles:
                ray.kill(h, no_restart=True)
            if isinstance(e, ray.exceptions.GetTimeoutError):
                raise RuntimeError(
                    f"{n} RewardLoopWorker actor(s) ({num_cpus:g} CPU each) did not start within "
                    f"{startup_timeout_s}s; free resources: {ray.available_resources()}"
                ) from None
            raise
        self.pool = WorkerPool(handles, max_inflight=max_inflight)
        self.loop = LoopThread(name)
        self._closed = False

    @property
    def handles(self) -> list[Any]:
        """The worker actor handles."""
        return self.pool.handles

    def live_workers(self) -> int:
        """Workers not known to be dead."""
        return sum(s.state != "dead" for s in self.pool.slots)

    async def run(
        self,
        n: int,
        shards: Sequence[Shard],
        send: Send,
        *,
        on_results=None,
        stats: Counter[str] | None = None,
        splittable: bool = True,
        batch_timeout_s: float | None = None,
    ) -> list[SampleResult]:
        """:func:`dispatch` with this group's pool, the config's retries and batch deadline
        (``batch_timeout_s`` overrides ``reward.batch_timeout_s``). Call on :attr:`loop`."""
        timeout = batch_timeout_s if batch_timeout_s is not None else self.config.batch_timeout_s
        return await dispatch(
            self.pool,
            n,
            shards,
            send,
            deadline=None if timeout is None else time.monotonic() + timeout,
            batch_timeout_s=timeout,
            max_retries=self.config.max_retries,
            on_results=on_results,
            stats=stats,
            splittable=splittable,
        )

    def close(self, graceful_timeout_s: float = 10.0) -> None:
        """Close every worker's engine (best effort), kill the actors, stop the loop (idempotent)."""
        if self._closed:
            return
        self._closed = True
        close_and_kill(self.handles, graceful_timeout_s)
        self.loop.stop()
