"""The judge budget as a Ray actor: :func:`create_limiter` starts one :class:`JudgeLimiter` per
:class:`~rewardkit.ray.manager.RewardLoopManager`, shared by every Ray worker.

The budget itself (:class:`JudgeLimiter`, :func:`set_limiter`, :func:`judge_slot`) lives in
:mod:`rewardkit.runtime.budget`, which does not import Ray; it is re-exported here::

    from rewardkit.ray.limiter import judge_slot

    async with judge_slot():          # or `with judge_slot():` from sync code
        await session.post(url, json=payload)
"""

from __future__ import annotations

from typing import Any

from rewardkit.runtime.budget import JudgeLimiter, get_limiter, judge_slot, set_limiter

__all__ = ["JudgeLimiter", "create_limiter", "get_limiter", "judge_slot", "set_limiter"]


def create_limiter(
    name: str, max_concurrency: int, rate_per_s: float | None = None, burst: float | None = None
) -> Any:
    """Start a named :class:`JudgeLimiter` actor (0 CPUs); the caller kills it when done.

    Not detached: it belongs to the process that creates it, so a driver that dies without
    closing its manager does not leave it running on the cluster.
    """
    import ray

    from rewardkit.ray.runtime import NAMESPACE

    cls = ray.remote(JudgeLimiter)
    return cls.options(
        name=name,
        namespace=NAMESPACE,
        num_cpus=0,
        max_concurrency=10_000,
        max_restarts=-1,
        max_task_retries=-1,
    ).remote(max_concurrency, rate_per_s, burst)
