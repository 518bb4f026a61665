"""The engine: one object that holds plugins, executor, reward model and manager between calls."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from rewardkit import gcpause
from rewardkit.batch import Sample
from rewardkit.config import RewardConfig, load_config
from rewardkit.errors import ConfigError
from rewardkit.executors.base import Executor
from rewardkit.gcpause import batch_size, paused_gc
from rewardkit.inputs import as_samples
from rewardkit.managers.base import ManagerContext, RewardManager
from rewardkit.plugins import Registries, get_registries
from rewardkit.result import RewardResult, SampleResult
from rewardkit.runtime.loop import LoopThread
from rewardkit.scoring import resolve_ref

ConfigLike = RewardConfig | dict[str, Any] | str | None


class RewardEngine:
    """Scores batches with one config, keeping workers and models loaded between calls.

    >>> with RewardEngine({"custom_reward_function": {"path": "my_reward.py"}}) as engine:  # doctest: +SKIP
    ...     result = engine.compute([{"response": "...", "ground_truth": "42"}])

    ``compute`` (from any thread) and ``acompute`` (from any event loop) both run the work on the
    engine's own event loop, so one loop only ever touches its workers and HTTP sessions. Close the
    engine (or use ``with``) to stop workers.
    All take records, TRL-style columns or a verl ``DataProto`` (decoded with ``tokenizer``, given
    here or per call; see :mod:`rewardkit.inputs`).
    """

    def __init__(
        self, config: ConfigLike = None, *, registries: Registries | None = None, tokenizer: Any = None
    ):
        self.config = load_config(config)
        self.tokenizer = tokenizer
        self.registries = registries or get_registries(self.config.plugins)
        self._executor: Executor | None = None
        self._backend = None
        self._servers: Any = None  # launched reward-model servers (reward_model.server)
        self._waker: Any = None
        self._manager: RewardManager | None = None
        self._loop: LoopThread | None = None
        self._lock = threading.Lock()
        self._parts_lock = threading.RLock()
        self._closed = False
        self._backend_cls: Any = None
        self._manager_cls = self._resolve_manager_class()
        if self.config.default_scorer is not None:  # a config error fails here, not per sample
            self.registries.scorers.get(self.config.default_scorer)
        if self.config.reward_model.enable:
            self._backend_cls = self.registries.backends.get(self.config.reward_model.backend)
        self._executor_cls = self.registries.executors.get(self.config.executor)

    # -- building the parts ----------------------------------------------------------------------
    def _resolve_manager_class(self) -> type[RewardManager]:
        rm = self.config.reward_manager
        if rm.source == "importlib":
            assert rm.module is not None and rm.module.path is not None
            name = rm.module.name or rm.name
            where = rm.module.path[len("pkg://") :] if rm.module.path.startswith("pkg://") else rm.module.path
            cls = resolve_ref(f"{where}:{name}")
            if not (isinstance(cls, type) and issubclass(cls, RewardManager)):
                raise ConfigError(f"reward_manager {where}:{name} is not a rewardkit RewardManager subclass")
            return cls
        return self.registries.managers.get(rm.name)

    @property
    def executor(self) -> Executor:
        """The executor (created on first use)."""
        if self._executor is None:
            self._executor = self._executor_cls(self.config)
        return self._executor

    @property
    def backend(self):
        """The reward-model backend, or ``None`` when ``reward_model.enable`` is off (created on first use)."""
        if self._backend is None and self.config.reward_model.enable:
            rm = self.config.reward_model
            if rm.server is not None:
                rm = self._start_servers(rm)
            self._backend = self._backend_cls(rm)
        return self._backend

    def _start_servers(self, rm):
        from rewardkit.serving import backend_config, start_servers
        from rewardkit.serving.group import BatchWaker
        from rewardkit.serving.routing import check_backend

        if self._servers is None:
            check_backend(rm, self._backend_cls)
            self._servers = start_servers(rm, self.registries)
            self._waker = BatchWaker(self._servers)
        return backend_config(rm, self._servers.urls, self._backend_cls)

    @property
    def servers(self):
        """The launched reward-model servers (``reward_model.server``), or ``None``; started with the backend."""
        return self._servers

    @property
    def manager(self) -> RewardManager:
        """The reward manager (created on first use)."""
        if self._manager is None:
            with self._parts_lock:  # callers of compute_here may race to build it
                if self._manager is None:
                    context = ManagerContext(self.config, self.registries, self.executor, self.backend)
                    try:
                        self._manager = self._manager_cls(context, **self.config.reward_manager.kwargs)
                    except TypeError as e:
                        raise ConfigError(
                            f"reward_manager {self.config.reward_manager.name!r}: {e}"
                        ) from None
        return self._manager

    # -- lifecycle of the reward model -----------------------------------------------------------
    def wake_up(self) -> dict[str, float]:
        """Put the reward model on the accelerator (no-op without one); served replicas → seconds each."""
        if self.backend is not None:
            self.backend.wake_up()
        return self._servers.wake_up() if self._servers is not None else {}

    def sleep(self) -> dict[str, float]:
        """Offload the reward model and free accelerator memory (no-op without one); served replicas → seconds each."""
        if self.backend is not None:
            self.backend.sleep()
        return self._servers.sleep() if self._servers is not None else {}

    # -- scoring ---------------------------------------------------------------------------------
    async def acompute(self, samples: Iterable[Any] | Any, *, tokenizer: Any = None) -> RewardResult:
        """Score a batch and await it from any event loop (the work runs on the engine's loop): records
        (dicts, :class:`Sample`), TRL-style ``{"prompts", "completions", ...}`` columns, or a verl
        ``DataProto`` (decoded with ``tokenizer``, default the engine's)."""
        if self._closed:
            raise RuntimeError("this RewardEngine is closed")
        loop = self._ensure_loop()
        if asyncio.get_running_loop() is loop.loop:
            return await self._score(self._samples(samples, tokenizer))
        return await loop.arun(self._score(self._samples(samples, tokenizer)))

    def compute(self, samples: Iterable[Any] | Any, *, tokenizer: Any = None) -> RewardResult:
        """Score a batch synchronously (safe to call from inside a running event loop's thread too)."""
        if self._closed:
            raise RuntimeError("this RewardEngine is closed")
        with paused_gc(batch_size(samples)):  # the caller waits anyway: no full collections meanwhile
            batch = self._samples(samples, tokenizer)
            result = self._score_here(batch)
            if result is not None:
                return result
            return self._ensure_loop().run(self._score(batch))

    def compute_here(self, samples: Iterable[Any] | Any, *, tokenizer: Any = None) -> RewardResult | None:
        """Score a batch in the calling thread when every routed scorer may run here (``cheap``
        built-ins, no deadline, no reward model: see :meth:`RewardManager.score_now`), else ``None``.

        The result is the one :meth:`compute` returns; the fast path costs no event loop, thread or
        executor round trip, so per-sample callers (verl's ``compute_score``, ``run_single``) use it.
        """
        if self._closed:
            raise RuntimeError("this RewardEngine is closed")
        with paused_gc(batch_size(samples)):
            return self._score_here(self._samples(samples, tokenizer))

    def score_here(self, samples: Iterable[Any] | Any, *, tokenizer: Any = None) -> list[SampleResult] | None:
        """:meth:`compute_here` without the batch metrics: the per-sample results, or ``None``."""
        if self._closed:
            raise RuntimeError("this RewardEngine is closed")
        if self._backend_cls is not None or self._manager_cls.score_now is RewardManager.score_now:
            return None
        batch = self._samples(samples, tokenizer)
        if len(batch) < gcpause.MIN_BATCH:  # (per-sample calls: not even the context manager)
            results = self.manager.score_now(batch)
        else:
            with paused_gc(len(batch)):
                results = self.manager.score_now(batch)
        if results is not None and len(results) != len(batch):
            self._gather(results, batch, 0.0)  # raises, naming the manager
        return results

    def score_one_here(self, sample: Sample) -> SampleResult | None:
        """:meth:`score_here` of one validated :class:`Sample` (index 0), the per-sample callers' way."""
        if self._closed:
            raise RuntimeError("this RewardEngine is closed")
        if self._backend_cls is not None or self._manager_cls.score_now is RewardManager.score_now:
            return None
        return self.manager.score_one_now(sample)

    def score_fields_here(
        self,
        data_source: str | None,
        response: str,
        ground_truth: Any = None,
        extra_info: Mapping[str, Any] | None = None,
    ) -> SampleResult | None:
        """:meth:`score_one_here` of a sample given as fields (``response`` a ``str``, ``extra_info``
        a mapping or ``None``), without building a :class:`Sample` where the routed scorer reads
        only these fields; else ``None``. ``ground_truth`` and ``extra_info`` may hold numpy values:
        what the scorer reads of them is made plain Python data first."""
        if self._closed:
            raise RuntimeError("this RewardEngine is closed")
        manager = self._manager
        if manager is None:
            if self._backend_cls is not None or self._manager_cls.score_now is RewardManager.score_now:
                return None
            manager = self.manager
        return manager.score_fields_now(data_source, response, ground_truth, extra_info)

    def score_one(self, sample: Any) -> SampleResult:
        """Score one sample (a record or :class:`Sample`): in this thread where :meth:`compute_here`
        applies, else through :meth:`compute`."""
        results = self.score_here([sample])
        return results[0] if results is not None else self.compute([sample]).samples[0]

    def _samples(self, samples: Iterable[Any] | Any, tokenizer: Any) -> list[Sample]:
        return as_samples(samples, tokenizer=tokenizer if tokenizer is not None else self.tokenizer)

    def _score_here(self, batch: list[Sample]) -> RewardResult | None:
        """The fast path of :meth:`compute`: the manager's :meth:`~RewardManager.score_now`."""
        if self._backend_cls is not None or self._manager_cls.score_now is RewardManager.score_now:
            return None
        start = time.perf_counter()
        results = self.manager.score_now(batch)
        if results is None:
            return None
        return self._gather(results, batch, time.perf_counter() - start)

    def submit(
        self, samples: Iterable[Any] | Any, *, tokenizer: Any = None
    ) -> concurrent.futures.Future[RewardResult]:
        """Start scoring a batch on the engine's loop and return at once; the result as a future."""
        if self._closed:
            raise RuntimeError("this RewardEngine is closed")
        return self._ensure_loop().submit(self._score(self._samples(samples, tokenizer)))

    async def _score(self, batch: list[Sample]) -> RewardResult:
        """Score a validated batch; runs on the engine's loop."""
        start = time.perf_counter()
        manager = self.manager
        backend = self.backend
        if backend is not None and batch:
            await asyncio.to_thread(backend.wake_up)
        if self._waker is not None and batch:
            await self._waker.enter()  # wakes sleeping servers, or raises ServersAsleepError
        try:
            results = await manager.ascore(batch)
        finally:
            if backend is not None and self.config.reward_model.offload and batch:
                await asyncio.to_thread(backend.sleep)
            if self._waker is not None and batch:
                await self._waker.exit()
        result = self._gather(results, batch, time.perf_counter() - start)
        if backend is not None:
            result.metrics.update({f"rm/{k}": v for k, v in backend.metrics().items()})
        if self._servers is not None:
            result.metrics.update({f"rm/server/{k}": v for k, v in self._servers.metrics().items()})
        return result

    def _gather(self, results: list[SampleResult], batch: list[Sample], elapsed: float) -> RewardResult:
        if len(results) != len(batch):
            raise RuntimeError(
                f"reward manager {type(self.manager).__name__} returned {len(results)} results for "
                f"{len(batch)} samples"
            )
        return RewardResult.gather(results, [s.data_source for s in batch], elapsed, self.config)

    def _ensure_loop(self) -> LoopThread:
        with self._lock:
            if self._loop is None:
                self._loop = LoopThread("rewardkit-engine-loop")
            return self._loop

    def close(self) -> None:
        """Stop workers, close the reward model and the engine's event loop (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._loop is not None:
            try:  # a batch cancelled by Ctrl-C finishes cancelling before the loop goes
                self._loop.submit(_cancel_pending()).result(timeout=10)
            except Exception:  # noqa: BLE001 - closing goes on regardless
                pass
        if self._manager is not None and self._loop is not None:
            self._loop.run(self._manager.aclose())
        if self._backend is not None:
            if self._loop is not None:
                self._loop.run(self._backend.aclose())
            else:
                self._backend.close()
        if self._servers is not None:
            self._servers.close()
        if self._executor is not None:
            self._executor.close()
        if self._loop is not None:
            self._loop.stop()
            self._loop = None

    async def aclose(self) -> None:
        """Close from async code (the manager and the backend close on the engine's loop, as they ran)."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> RewardEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> RewardEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _cancel_pending() -> None:
    """Cancel every other task of the running loop and wait for them to finish."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
