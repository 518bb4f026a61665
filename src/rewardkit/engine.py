"""The engine: one object that holds plugins, executor, reward model and manager between calls."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable
from typing import Any

from rewardkit.batch import Sample, to_samples
from rewardkit.config import RewardConfig, load_config
from rewardkit.errors import ConfigError
from rewardkit.executors.base import Executor
from rewardkit.managers.base import ManagerContext, RewardManager
from rewardkit.plugins import Registries, get_registries
from rewardkit.result import RewardResult
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
    """

    def __init__(self, config: ConfigLike = None, *, registries: Registries | None = None):
        self.config = load_config(config)
        self.registries = registries or get_registries(self.config.plugins)
        self._executor: Executor | None = None
        self._backend = None
        self._manager: RewardManager | None = None
        self._loop: LoopThread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._manager_cls = self._resolve_manager_class()
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
            self._backend = self._backend_cls(self.config.reward_model)
        return self._backend

    @property
    def manager(self) -> RewardManager:
        """The reward manager (created on first use)."""
        if self._manager is None:
            context = ManagerContext(self.config, self.registries, self.executor, self.backend)
            try:
                self._manager = self._manager_cls(context, **self.config.reward_manager.kwargs)
            except TypeError as e:
                raise ConfigError(f"reward_manager {self.config.reward_manager.name!r}: {e}") from None
        return self._manager

    # -- lifecycle of the reward model -----------------------------------------------------------
    def wake_up(self) -> None:
        """Put the reward model on the accelerator (no-op without one)."""
        if self.backend is not None:
            self.backend.wake_up()

    def sleep(self) -> None:
        """Offload the reward model and free accelerator memory (no-op without one)."""
        if self.backend is not None:
            self.backend.sleep()

    # -- scoring ---------------------------------------------------------------------------------
    async def acompute(self, samples: Iterable[Any]) -> RewardResult:
        """Score a batch (dicts, JSONL records or :class:`Sample`); awaits the engine's loop doing it."""
        if self._closed:
            raise RuntimeError("this RewardEngine is closed")
        loop = self._ensure_loop()
        if asyncio.get_running_loop() is loop.loop:
            return await self._score(samples)
        return await loop.arun(self._score(samples))

    def compute(self, samples: Iterable[Any]) -> RewardResult:
        """Score a batch synchronously (safe to call from inside a running event loop's thread too)."""
        if self._closed:
            raise RuntimeError("this RewardEngine is closed")
        return self._ensure_loop().run(self._score(samples))

    async def _score(self, samples: Iterable[Any]) -> RewardResult:
        """Score a batch; runs on the engine's loop."""
        batch: list[Sample] = to_samples(samples)
        start = time.perf_counter()
        manager = self.manager
        backend = self.backend
        if backend is not None and batch:
            await asyncio.to_thread(backend.wake_up)
        try:
            results = await manager.ascore(batch)
        finally:
            if backend is not None and self.config.reward_model.offload and batch:
                await asyncio.to_thread(backend.sleep)
        if len(results) != len(batch):
            raise RuntimeError(
                f"reward manager {type(manager).__name__} returned {len(results)} results for {len(batch)} samples"
            )
        elapsed = time.perf_counter() - start
        result = RewardResult.gather(results, [s.data_source for s in batch], elapsed, self.config)
        if backend is not None:
            result.metrics.update({f"rm/{k}": v for k, v in backend.metrics().items()})
        return result

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
        if self._manager is not None and self._loop is not None:
            self._loop.run(self._manager.aclose())
        if self._backend is not None:
            if self._loop is not None:
                self._loop.run(self._backend.aclose())
            else:
                self._backend.close()
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


def compute(samples: Iterable[Any], config: ConfigLike = None) -> RewardResult:
    """Score a batch once: ``rewardkit.compute(samples, config)``. Use :class:`RewardEngine` for repeated calls."""
    with RewardEngine(config) as engine:
        return engine.compute(samples)


async def acompute(samples: Iterable[Any], config: ConfigLike = None) -> RewardResult:
    """Async :func:`compute`."""
    async with RewardEngine(config) as engine:
        return await engine.acompute(samples)
