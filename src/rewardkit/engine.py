"""The engine: one object that holds plugins, executor, reward model and manager between calls."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable
from typing import Any

from rewardkit.batch import Sample
from rewardkit.config import RewardConfig, load_config
from rewardkit.errors import ConfigError
from rewardkit.executors.base import Executor
from rewardkit.gcpause import batch_size, paused_gc
from rewardkit.inputs import as_samples
from rewardkit.managers.base import ManagerContext, RewardManager
from rewardkit.plugins import Registries, get_registries
from rewardkit.result import RewardResult
from rewardkit.scoring import resolve_ref

ConfigLike = RewardConfig | dict[str, Any] | str | None


class RewardEngine:
    """Scores batches with one config, keeping workers and models loaded between calls.

    >>> with RewardEngine({"custom_reward_function": {"path": "my_reward.py"}}) as engine:  # doctest: +SKIP
    ...     result = engine.compute([{"response": "...", "ground_truth": "42"}])

    ``compute`` may be called from any thread (it runs on the engine's own event loop);
    ``acompute`` runs on the caller's loop. Close the engine (or use ``with``) to stop workers.
    Both take records, TRL-style columns or a verl ``DataProto`` (decoded with ``tokenizer``, given
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
        self._manager: RewardManager | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._manager_cls = self._resolve_manager_class()
        if self.config.reward_model.enable:
            self._backend_cls = self.registries.backends.get(self.config.reward_model.backend)
        self._executor_cls = self.registries.executors.get(self._executor_name())

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

    def _executor_name(self) -> str:
        name = self.config.executor
        if name == "auto":
            from importlib.util import find_spec

            return "process" if find_spec("rewardkit.executors.process") else "inline"
        return name

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
    async def acompute(self, samples: Iterable[Any] | Any, *, tokenizer: Any = None) -> RewardResult:
        """Score a batch on the running event loop: records (dicts, :class:`Sample`), TRL-style
        ``{"prompts", "completions", ...}`` columns, or a verl ``DataProto`` (decoded with ``tokenizer``,
        default the engine's)."""
        if self._closed:
            raise RuntimeError("this RewardEngine is closed")
        batch: list[Sample] = as_samples(
            samples, tokenizer=tokenizer if tokenizer is not None else self.tokenizer
        )
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

    def compute(self, samples: Iterable[Any] | Any, *, tokenizer: Any = None) -> RewardResult:
        """Score a batch synchronously (safe to call from inside a running event loop's thread too)."""
        loop = self._ensure_loop()
        with paused_gc(batch_size(samples)):  # the caller waits anyway: no full collections meanwhile
            return asyncio.run_coroutine_threadsafe(
                self.acompute(samples, tokenizer=tokenizer), loop
            ).result()

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._loop_thread = threading.Thread(
                    target=self._loop.run_forever, name="rewardkit-engine-loop", daemon=True
                )
                self._loop_thread.start()
            return self._loop

    def close(self) -> None:
        """Stop workers, close the reward model and the engine's event loop (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._manager is not None and self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._manager.aclose(), self._loop).result()
        if self._backend is not None:
            if self._loop is not None:
                asyncio.run_coroutine_threadsafe(self._backend.aclose(), self._loop).result()
            else:
                self._backend.close()
        if self._executor is not None:
            self._executor.close()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._loop_thread is not None:
                self._loop_thread.join(timeout=5)
            self._loop.close()
            self._loop = None

    async def aclose(self) -> None:
        """Close from async code."""
        if self._manager is not None:
            await self._manager.aclose()
        if self._backend is not None:
            await self._backend.aclose()
            self._backend = None
        self._manager = None
        await asyncio.to_thread(self.close)

    def __enter__(self) -> RewardEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> RewardEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def compute(
    samples: Iterable[Any] | Any, config: ConfigLike = None, *, tokenizer: Any = None
) -> RewardResult:
    """Score a batch: ``rewardkit.compute(samples, config)``.

    The engine for ``config`` is built on the first call and reused by later calls with an equal
    config, for the life of the process (see :mod:`rewardkit.engine_cache`).
    """
    from rewardkit.engine_cache import shared_engine

    return shared_engine(config).compute(samples, tokenizer=tokenizer)


async def acompute(
    samples: Iterable[Any] | Any, config: ConfigLike = None, *, tokenizer: Any = None
) -> RewardResult:
    """Async :func:`compute` (runs on the shared engine's own loop)."""
    from rewardkit.engine_cache import shared_engine

    engine = shared_engine(config)
    future = asyncio.run_coroutine_threadsafe(
        engine.acompute(samples, tokenizer=tokenizer), engine._ensure_loop()
    )
    return await asyncio.wrap_future(future)
