"""The Ray worker actor: one :class:`~rewardkit.engine.RewardEngine` per actor, scoring shards."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rewardkit.ray.runtime import PackedError, pack_error


@dataclass
class ShardReply:
    """What a worker sends back for one shard: one result per sample, or the error the call raised."""

    results: list[Any] = field(default_factory=list)
    error: PackedError | None = None
    pid: int = 0


class RewardLoopWorker:
    """Scores shards with a local engine built from the manager's config.

    The engine uses a *local* executor (``worker_executor``: ``inline`` or ``process``), never
    ``ray``. When the reward model runs as GPU model actors, ``model_replicas`` holds their handles
    and the engine's backend is a proxy that sends samples to them. ``limiter`` is the shared judge
    budget (see :mod:`rewardkit.ray.limiter`).

    Created by :class:`~rewardkit.ray.manager.RewardLoopManager` through :func:`worker_actor_class`;
    a plain class, so it can also be used (and tested) in-process.
    """

    def __init__(
        self,
        config: dict[str, Any],
        worker_executor: str = "inline",
        num_cpus: float = 1.0,
        model_replicas: Sequence[Any] | None = None,
        limiter: Any = None,
        rank: int = 0,
    ):
        from rewardkit.config import load_config

        cfg = load_config(config)
        update: dict[str, Any] = {"executor": worker_executor}
        if worker_executor == "process":
            update["num_workers"] = max(1, int(num_cpus))
        self.config = cfg.model_copy(update=update)
        self.rank = rank
        self._model_replicas = list(model_replicas or [])
        self._engine = None
        self._executor = None
        self._holder = self._actor_id()
        if limiter is not None:
            from rewardkit.ray.limiter import set_limiter

            set_limiter(limiter, self._holder)
            try:
                import ray

                # A restarted worker frees the slots its dead predecessor still held.
                ray.get(limiter.release_holder.remote(self._holder), timeout=30)
            except Exception:  # noqa: BLE001 - stale leases also expire on their own
                pass

    @staticmethod
    def _actor_id() -> str:
        import sys

        ray = sys.modules.get("ray")  # never start Ray just to ask (an in-process worker)
        if ray is not None and ray.is_initialized():
            actor_id = ray.get_runtime_context().get_actor_id()
            if actor_id:
                return actor_id
        return f"pid-{os.getpid()}"

    def _get_engine(self):
        if self._engine is None:
            from rewardkit.engine import RewardEngine

            registries = None
            if self._model_replicas and self.config.reward_model.enable:
                from rewardkit.ray.model_actor import registries_with_proxy

                registries = registries_with_proxy(self.config, self._model_replicas, self.rank)
            self._engine = RewardEngine(self.config, registries=registries)
        return self._engine

    async def compute(self, samples: list[Any], time_left_s: float | None = None) -> ShardReply:
        """Score one shard through the engine (manager, executor, reward model).

        ``time_left_s``: what is left of the manager's batch deadline. The inline executor stops a
        little before it, so the samples it scored by then come back (not turned into ``timeout``).
        """
        try:
            with _deadline(time_left_s):
                result = await self._get_engine().acompute(samples)
            return ShardReply(results=result.samples, pid=os.getpid())
        except Exception as e:  # noqa: BLE001 - carried back typed, re-raised by the manager
            return ShardReply(error=pack_error(e), pid=os.getpid())

    async def run_tasks(self, tasks: list[Any], time_left_s: float | None = None) -> ShardReply:
        """Run :class:`~rewardkit.executors.base.ScoreTask` objects on the local executor (for ``executor: ray``)."""
        try:
            with _deadline(time_left_s):
                results = await self._local_executor().run(tasks)
            return ShardReply(results=results, pid=os.getpid())
        except Exception as e:  # noqa: BLE001
            return ShardReply(error=pack_error(e), pid=os.getpid())

    async def run_batch(self, spec: Any, samples: list[Any], time_left_s: float | None = None) -> ShardReply:
        """One call of a batch scorer on the local executor."""
        try:
            with _deadline(time_left_s):
                results = await self._local_executor().run_batch(spec, samples)
            return ShardReply(results=results, pid=os.getpid())
        except Exception as e:  # noqa: BLE001
            return ShardReply(error=pack_error(e), pid=os.getpid())

    def _local_executor(self):
        if self._executor is None:
            from rewardkit.plugins import get_registries

            cls = get_registries(self.config.plugins).executors.get(self.config.executor)
            self._executor = cls(self.config)
        return self._executor

    def ping(self) -> int:
        """Liveness probe; returns the worker's process id."""
        return os.getpid()

    def close(self) -> None:
        """Close the engine and the local executor."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        if self._executor is not None:
            self._executor.close()
            self._executor = None


def _deadline(time_left_s: float | None):
    """A deadline scope for the inline executor, ending a little before the manager's own deadline
    (the reply must still reach the manager in time)."""
    import contextlib
    import time

    from rewardkit.executors.inline import batch_deadline

    if time_left_s is None:
        return contextlib.nullcontext()
    margin = min(1.0, 0.2 * time_left_s)
    return batch_deadline(time.monotonic() + max(0.0, time_left_s - margin))


_actor_cls = None


def worker_actor_class():
    """``ray.remote(RewardLoopWorker)``, made on first use so importing this module never imports ray."""
    global _actor_cls
    if _actor_cls is None:
        import ray

        _actor_cls = ray.remote(RewardLoopWorker)
    return _actor_cls
