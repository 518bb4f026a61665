"""The Ray-backed reward loop: a batch sharded over worker actors, reward models as GPU actors,
one judge budget for all of them, and results streamed as they finish."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import uuid
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from rewardkit.batch import Sample, to_samples
from rewardkit.config import RewardConfig, load_config
from rewardkit.ray.sharding import split_contiguous
from rewardkit.result import RewardResult, SampleResult


def _kill_quietly(handle: Any) -> None:
    try:
        import ray

        if ray.is_initialized():
            ray.kill(handle, no_restart=True)
    except Exception:  # noqa: BLE001 - at interpreter exit Ray may be half gone
        pass


class RewardStream:
    """The results of one :meth:`RewardLoopManager.submit` call, as they finish.

    Iterate (``for`` or ``async for``) to get ``(index, SampleResult)`` pairs in completion order;
    every index of the batch comes exactly once (samples cut off by the batch deadline come last,
    failed with reason ``timeout``), unless the batch raised or :meth:`cancel` was called: then the
    iteration raises that exception (or ``CancelledError``) instead of ending early.
    :meth:`result` / :meth:`aresult` give the whole :class:`~rewardkit.result.RewardResult` in
    input order.
    """

    def __init__(self, n: int):
        self.n = n
        self._lock = threading.Lock()
        self._items: list[tuple[int, SampleResult]] = []
        self._waiters: list[concurrent.futures.Future] = []
        self._future: concurrent.futures.Future[RewardResult] | None = None

    # called on the manager's loop
    def _push(self, start: int, results: list[SampleResult]) -> None:
        with self._lock:
            self._items.extend((start + k, r) for k, r in enumerate(results))
            waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _attach(self, future: concurrent.futures.Future[RewardResult]) -> None:
        self._future = future
        future.add_done_callback(lambda _: self._push(0, []))

    def _next_or_wait(
        self, pos: int
    ) -> tuple[list[tuple[int, SampleResult]], concurrent.futures.Future | None]:
        with self._lock:
            if pos < len(self._items):
                return self._items[pos:], None
            if self._future is not None and self._future.done():
                return [], None
            waiter: concurrent.futures.Future = concurrent.futures.Future()
            self._waiters.append(waiter)
            return [], waiter

    def __iter__(self) -> Iterator[tuple[int, SampleResult]]:
        pos = 0
        while True:
            items, waiter = self._next_or_wait(pos)
            if items:
                pos += len(items)
                yield from items
            elif waiter is not None:
                waiter.result()
            else:
                self._raise_if_failed()
                return

    async def __aiter__(self) -> AsyncIterator[tuple[int, SampleResult]]:
        pos = 0
        while True:
            items, waiter = self._next_or_wait(pos)
            if items:
                pos += len(items)
                for item in items:
                    yield item
            elif waiter is not None:
                await asyncio.wrap_future(waiter)
            else:
                self._raise_if_failed()
                return

    def _raise_if_failed(self) -> None:
        assert self._future is not None
        if self._future.cancelled():  # never end quietly with samples missing
            raise concurrent.futures.CancelledError("the stream was cancelled before every sample was scored")
        exc = self._future.exception()
        if exc is not None:
            raise exc

    def done(self) -> bool:
        """Whether every sample has its result."""
        return self._future is not None and self._future.done()

    def result(self, timeout: float | None = None) -> RewardResult:
        """Wait for the whole batch (input order)."""
        assert self._future is not None
        return self._future.result(timeout)

    async def aresult(self) -> RewardResult:
        """Await the whole batch (input order)."""
        assert self._future is not None
        return await asyncio.wrap_future(self._future)

    def cancel(self) -> bool:
        """Stop waiting for the batch (its remote work is cancelled)."""
        return self._future is not None and self._future.cancel()


class RewardLoopManager:
    """Scores batches on a Ray cluster with ``reward.num_workers`` :class:`~rewardkit.ray.worker.RewardLoopWorker` actors.

    >>> with RewardLoopManager({"num_workers": 4, "custom_reward_function": {"path": "r.py"}}) as m:  # doctest: +SKIP
    ...     result = m.compute(samples)

    * Joins ``reward.ray_address`` (or the Ray already initialised in this process, or starts a
      local one).
    * Each worker holds a :class:`~rewardkit.engine.RewardEngine` built from the same config with a
      local executor (``worker_executor``: ``inline`` or ``process``).
    * A batch is cut into contiguous shards (never padded), scored on the least-loaded live
      workers and gathered in input order: exactly one result per sample.
    * A reward model whose config asks for GPUs (``reward_model.rollout.ray: {replicas, num_gpus}``
      or ``n_gpus_per_node``) runs as model actors. Colocated (a ``placement_group`` is given, or
      ``rollout.ray.layout: colocated``): the replicas sleep between batches and are woken before
      each. Standalone: loaded and awake on their own GPUs.
    * Judge / remote-RM requests from every worker share one budget (``judge_concurrency``,
      ``judge_rate_per_s``; defaults from ``reward_model.rollout.max_concurrency`` / ``rpm``),
      enforced by a named :class:`~rewardkit.ray.limiter.JudgeLimiter` actor.
    """

    def __init__(
        self,
        config: RewardConfig | dict[str, Any] | str | None = None,
        *,
        num_workers: int | None = None,
        worker_executor: str = "inline",
        worker_num_cpus: float = 1.0,
        placement_group: Any = None,
        bundle_indices: Sequence[int] | None = None,
        model_replicas: int | None = None,
        model_num_gpus: float | None = None,
        judge_concurrency: int | None = None,
        judge_rate_per_s: float | None = None,
        max_restarts: int = 4,
        max_task_retries: int = 0,
        shards_per_worker: int = 1,
        max_inflight_per_worker: int = 2,
        startup_timeout_s: float = 300.0,
    ):
        from rewardkit.ray.group import WorkerGroup
        from rewardkit.ray.limiter import create_limiter
        from rewardkit.ray.model_actor import ModelPlacement, ModelPool
        from rewardkit.ray.runtime import ensure_ray

        self.config = load_config(config)
        if shards_per_worker < 1:
            raise ValueError("shards_per_worker must be >= 1")
        self.shards_per_worker = shards_per_worker
        self.id = uuid.uuid4().hex[:12]
        self.stats: Counter[str] = Counter()
        self._closed = False
        self._models: ModelPool | None = None
        self._limiter = None
        #: Name of the limiter actor (namespace ``rewardkit``), or ``None`` without one.
        self.limiter_name: str | None = None
        self._group: WorkerGroup | None = None
        self._servers: Any = None  # launched reward-model servers (reward_model.server)
        self._waker: Any = None
        ensure_ray(self.config.ray_address)
        try:
            worker_config = self.config
            if self.config.reward_model.enable and self.config.reward_model.server is not None:
                worker_config = self._start_servers(placement_group, bundle_indices)
                placement = None
            else:
                placement = ModelPlacement.from_config(
                    self.config,
                    replicas=model_replicas,
                    num_gpus=model_num_gpus,
                    colocated=True if placement_group is not None else None,
                )
            if placement is not None:
                self._models = ModelPool.create(
                    self.config,
                    placement,
                    placement_group=placement_group,
                    bundle_indices=bundle_indices,
                    max_restarts=max(max_restarts, 0),
                    startup_timeout_s=startup_timeout_s,
                )
            ro = self.config.reward_model.rollout
            limit = judge_concurrency or ro.get("max_concurrency") or ro.get("max_in_flight")
            rate = judge_rate_per_s or (ro["rpm"] / 60.0 if ro.get("rpm") else None)
            in_worker_rm = self.config.reward_model.enable and placement is None
            if limit or rate or in_worker_rm:
                self.limiter_name = f"rewardkit-limiter-{self.id}"
                self._limiter = create_limiter(
                    self.limiter_name, int(limit or self.config.max_concurrency), rate
                )
                # kill it when the manager goes away, even if close() is never called
                self._limiter_finalizer = weakref.finalize(self, _kill_quietly, self._limiter)
            self._group = WorkerGroup(
                worker_config,
                num_workers=num_workers,
                worker_executor=worker_executor,
                num_cpus=worker_num_cpus,
                model_replicas=self._models.replicas if self._models else None,
                limiter=self._limiter,
                max_restarts=max_restarts,
                max_task_retries=max_task_retries,
                max_inflight=max_inflight_per_worker,
                startup_timeout_s=startup_timeout_s,
                name=f"rewardkit-ray-manager-{self.id}",
            )
        except BaseException:
            self.close()
            raise
        self._active = 0
        self._awake_lock: asyncio.Lock | None = None

    def _start_servers(self, placement_group: Any, bundle_indices: Sequence[int] | None) -> RewardConfig:
        """Launch ``reward_model.server`` as Ray actors; the config the workers get (pointing at them)."""
        from rewardkit.plugins import get_registries
        from rewardkit.serving import backend_config, start_servers
        from rewardkit.serving.group import BatchWaker
        from rewardkit.serving.routing import check_backend

        rm = self.config.reward_model
        backend_cls = get_registries(self.config.plugins).backends.get(rm.backend)
        check_backend(rm, backend_cls)
        colocated = rm.server_placement == "colocated"
        self._servers = start_servers(
            rm,
            get_registries(self.config.plugins),
            use_ray=True,
            placement_group=placement_group if colocated else None,
            bundle_indices=list(bundle_indices) if bundle_indices is not None and colocated else None,
            plugins=self.config.plugins.model_dump(mode="json"),
        )
        self._waker = BatchWaker(self._servers)
        served = backend_config(rm, self._servers.urls, backend_cls).model_copy(update={"server": None})
        return self.config.model_copy(update={"reward_model": served})

    # -- introspection ---------------------------------------------------------------------------
    @property
    def servers(self) -> Any:
        """The launched reward-model servers (:class:`~rewardkit.serving.ray_group.RayServerGroup`), or ``None``."""
        return self._servers

    @property
    def workers(self) -> list[Any]:
        """The :class:`~rewardkit.ray.worker.RewardLoopWorker` actor handles."""
        return self._group.handles if self._group else []

    @property
    def model_replicas(self) -> list[Any]:
        """The model actor handles (empty when the reward model runs inside the workers or is off)."""
        return self._models.replicas if self._models else []

    @property
    def colocated(self) -> bool:
        """Whether the model replicas share GPUs with a trainer (woken per batch, asleep otherwise)."""
        return self._models is not None and self._models.placement.colocated

    @property
    def limiter(self) -> Any:
        """The shared judge-budget actor handle, or ``None``."""
        return self._limiter

    # -- lifecycle of model replicas -------------------------------------------------------------
    def wake_up(self) -> list[Any]:
        """``wake_up()`` on every model replica; their states (or errors of dead replicas). With
        ``reward_model.server``: every server replica's seconds, once all have answered."""
        out = self._run(self._models.wake_up()) if self._models else []
        if self._servers is not None:
            out.extend(self._servers.wake_up().values())
        return out

    def sleep(self) -> list[Any]:
        """``sleep()`` on every model replica; their states (or errors of dead replicas). With
        ``reward_model.server``: every server replica's seconds, once all have answered."""
        out = self._run(self._models.sleep()) if self._models else []
        if self._servers is not None:
            out.extend(self._servers.sleep().values())
        return out

    async def _enter_batch(self) -> None:
        if not self.colocated:
            return
        if self._awake_lock is None:
            self._awake_lock = asyncio.Lock()
        async with self._awake_lock:
            if self._active == 0:
                await self._models.wake_up()  # type: ignore[union-attr]
            self._active += 1

    async def _exit_batch(self) -> None:
        if not self.colocated:
            return
        assert self._awake_lock is not None
        async with self._awake_lock:
            self._active -= 1
            if self._active == 0:
                await self._models.sleep()  # type: ignore[union-attr]

    # -- scoring ---------------------------------------------------------------------------------
    async def _score(
        self, batch: list[Sample], on_results=None, batch_timeout_s: float | None = None
    ) -> RewardResult:
        assert self._group is not None
        start = time.perf_counter()
        stats: Counter[str] = Counter()
        results: list[SampleResult] = []
        if batch:
            if self._waker is not None:
                await self._waker.enter()  # wakes sleeping servers, or raises ServersAsleepError
            await self._enter_batch()
            try:
                parts = max(1, self._group.live_workers()) * self.shards_per_worker
                shards = split_contiguous(len(batch), parts)
                stats["shards"] = len(shards)
                results = await self._group.run(
                    len(batch),
                    shards,
                    lambda h, s, left: h.compute.remote(batch[s.start : s.stop], time_left_s=left),
                    on_results=on_results,
                    stats=stats,
                    batch_timeout_s=batch_timeout_s,
                )
            finally:
                await self._exit_batch()
                if self._waker is not None:
                    await self._waker.exit()
        self.stats.update(stats)
        result = RewardResult.gather(
            results, [s.data_source for s in batch], time.perf_counter() - start, self.config
        )
        result.metrics.update({f"ray/{k}": float(v) for k, v in sorted(stats.items())})
        result.metrics["ray/num_workers"] = float(self._group.live_workers())
        if self._servers is not None:
            result.metrics.update({f"rm/server/{k}": v for k, v in self._servers.metrics().items()})
        return result

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this RewardLoopManager is closed")

    def _run(self, coro):
        assert self._group is not None
        return self._group.loop.run(coro)

    def compute(self, samples: Iterable[Any], *, batch_timeout_s: float | None = None) -> RewardResult:
        """Score a batch and wait for it; results in input order. ``batch_timeout_s`` overrides
        ``reward.batch_timeout_s`` for this batch: samples not scored by then fail with ``timeout``."""
        self._check_open()
        return self._run(self._score(to_samples(samples), batch_timeout_s=batch_timeout_s))

    async def acompute(self, samples: Iterable[Any], *, batch_timeout_s: float | None = None) -> RewardResult:
        """Score a batch from async code."""
        self._check_open()
        batch = to_samples(samples)
        assert self._group is not None
        return await self._group.loop.arun(self._score(batch, batch_timeout_s=batch_timeout_s))

    def submit(self, samples: Iterable[Any], *, batch_timeout_s: float | None = None) -> RewardStream:
        """Start scoring a batch and return at once; iterate the :class:`RewardStream` for results as
        they finish. Several submitted batches share the workers."""
        self._check_open()
        assert self._group is not None
        batch = to_samples(samples)
        stream = RewardStream(len(batch))
        coro = self._score(batch, on_results=stream._push, batch_timeout_s=batch_timeout_s)
        stream._attach(self._group.loop.submit(coro))
        return stream

    # -- shutdown --------------------------------------------------------------------------------
    def close(self) -> None:
        """Kill workers, model replicas and the limiter (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._group is not None:
            self._group.close()
        if self._models is not None:
            self._models.kill()
        if self._servers is not None:
            self._servers.close()
        if self._limiter is not None:
            self._limiter_finalizer()

    def __enter__(self) -> RewardLoopManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
