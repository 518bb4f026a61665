"""The Ray executor: scorer calls run on :class:`~rewardkit.ray.worker.RewardLoopWorker` actors.

``executor: ray`` in a config (with ``ray_address`` to join a cluster) makes the ordinary
:class:`~rewardkit.engine.RewardEngine` send its scorer tasks to ``num_workers`` worker actors:
contiguous shards, gathered in order, a dead worker's shard re-run on a live one, the batch
deadline (``batch_timeout_s``) enforced. Each worker runs its shard on the inline executor.
For reward models on GPUs and a shared judge budget use :class:`~rewardkit.ray.manager.RewardLoopManager`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from rewardkit.executors.base import Executor, ScoreTask
from rewardkit.result import SampleResult

if TYPE_CHECKING:
    from rewardkit.batch import Sample
    from rewardkit.config import RewardConfig
    from rewardkit.ray.group import WorkerGroup
    from rewardkit.scoring import ScorerSpec


class RayExecutor(Executor):
    """Runs :class:`ScoreTask` lists on Ray worker actors (started on first use, kept until :meth:`close`)."""

    name = "ray"
    #: CPUs each worker actor asks for (scaled down when the cluster holds fewer).
    worker_num_cpus: ClassVar[float] = 1.0
    #: The executor each worker runs its shard with.
    worker_executor: ClassVar[str] = "inline"
    #: Shards per worker: more shards balance uneven scorers better, fewer cost less overhead.
    shards_per_worker: ClassVar[int] = 2

    def __init__(self, config: RewardConfig):
        super().__init__(config)
        self._group: WorkerGroup | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _ensure_group(self) -> WorkerGroup:
        with self._lock:
            if self._closed:
                raise RuntimeError("this RayExecutor is closed")
            if self._group is None:
                from rewardkit.ray.group import WorkerGroup

                self._group = WorkerGroup(
                    self.config,
                    worker_executor=self.worker_executor,
                    num_cpus=self.worker_num_cpus,
                    name="rewardkit-ray-executor",
                )
            return self._group

    @property
    def workers(self) -> list:
        """The worker actor handles (empty before first use)."""
        return self._group.handles if self._group else []

    async def run(self, tasks: Sequence[ScoreTask]) -> list[SampleResult]:
        if not tasks:
            return []
        from rewardkit.ray.sharding import split_contiguous

        group = await asyncio.to_thread(self._ensure_group)
        tasks = list(tasks)
        shards = split_contiguous(len(tasks), max(1, group.live_workers()) * self.shards_per_worker)
        coro = group.run(
            len(tasks),
            shards,
            lambda h, s, left: h.run_tasks.remote(tasks[s.start : s.stop], time_left_s=left),
        )
        return await group.loop.arun(coro)

    async def run_batch(self, spec: ScorerSpec, samples: Sequence[Sample]) -> list[SampleResult]:
        """One call of a batch scorer, on one worker (re-run whole if that worker dies)."""
        if not samples:
            return []
        from rewardkit.ray.sharding import Shard

        group = await asyncio.to_thread(self._ensure_group)
        samples = list(samples)
        coro = group.run(
            len(samples),
            [Shard(0, len(samples))],
            lambda h, s, left: h.run_batch.remote(spec, samples, time_left_s=left),
            splittable=False,
        )
        return await group.loop.arun(coro)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            group, self._group = self._group, None
        if group is not None:
            group.close()
