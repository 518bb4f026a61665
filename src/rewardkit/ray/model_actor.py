"""Reward models as Ray actors: any registered :class:`~rewardkit.backends.base.RMBackend` on its own
``num_gpus`` (fractional allowed), several replicas load-balanced, with ``wake_up``/``sleep`` fanned
out to every replica when the model shares its GPUs with a trainer (colocated layout).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from rewardkit.backends.base import RMBackend
from rewardkit.errors import ConfigError
from rewardkit.options import Options, validate_options
from rewardkit.ray.sharding import split_contiguous
from rewardkit.result import SampleResult

if TYPE_CHECKING:
    from rewardkit.batch import Sample
    from rewardkit.config import RewardConfig, RewardModelConfig


class PlacementOptions(Options):
    """``reward_model.rollout.ray`` (or the same keys directly in ``rollout``): the reward model as Ray actors."""

    replicas: int | None = Field(
        None, ge=1, description="actors; default n_gpus_per_node x nnodes / num_gpus"
    )
    num_gpus: float | None = Field(
        None, ge=0, description="GPUs per replica; default 1 when the section has GPUs"
    )
    num_cpus: float = Field(0.0, ge=0, description="CPUs per replica")
    layout: Literal["standalone", "colocated"] = Field(
        "standalone", description="colocated: replicas sleep between batches on the trainer's GPUs"
    )


#: Placement settings of a model run as actors, read from ``reward_model.rollout.ray`` or ``rollout``.
PLACEMENT_KEYS = tuple(PlacementOptions.model_fields)


class ModelActor:
    """Holds one replica of the configured RM backend.

    ``colocated=True``: after loading, the weights go to sleep (the trainer owns the GPU until the
    manager wakes the replica up for a batch). Standalone: loaded and awake for good. A replica
    restarted by Ray comes back in the same state and wakes on demand if asked to score.

    Never offloaded mid-score: a ``sleep()`` that arrives while scores are in flight (a batch cut
    off by its deadline) takes effect as soon as the last one finishes, and a score that arrives
    while the replica should sleep (a straggler) wakes it only for that call.
    ``history()`` lists every lifecycle transition and every finished scoring call, in order.
    """

    def __init__(self, backend: str, rm_config: dict[str, Any], plugins: dict[str, Any], colocated: bool):
        from rewardkit.config import PluginSettings, RewardModelConfig
        from rewardkit.plugins import get_registries

        cls = get_registries(PluginSettings.model_validate(plugins)).backends.get(backend)
        rm_config = dict(rm_config)
        # the backend never sees the Ray placement settings (backends validate rollout strictly)
        rollout = rm_config.get("rollout") or {}
        rm_config["rollout"] = {k: v for k, v in rollout.items() if k != "ray" and k not in PLACEMENT_KEYS}
        self.backend: RMBackend = cls(RewardModelConfig.model_validate(rm_config))
        self.colocated = colocated
        self._events: list[str] = []
        self._seen = 0
        self._scoring = 0  # score calls in flight
        self._want_asleep = colocated  # the last lifecycle call asked for sleep
        self._lifecycle: asyncio.Lock | None = None  # made on the actor's event loop
        self._pending: set[asyncio.Task] = set()
        self.backend.load()
        if colocated:
            self.backend.sleep()
        else:
            self.backend.wake_up()
        self._sync()

    def _sync(self) -> None:
        new = self.backend.transitions[self._seen :]
        self._events.extend(new)
        self._seen += len(new)

    def _lock(self) -> asyncio.Lock:
        if self._lifecycle is None:
            self._lifecycle = asyncio.Lock()
        return self._lifecycle

    async def _transition(self, method: Any) -> None:
        await asyncio.to_thread(method)
        self._sync()

    async def wake_up(self) -> str:
        """Put the weights on the accelerator; returns the backend state."""
        self._want_asleep = False
        async with self._lock():
            await self._transition(self.backend.wake_up)
        return self.backend.state

    async def sleep(self) -> str:
        """Offload the weights and free accelerator memory; returns the backend state (still
        ``awake`` when scores are in flight: it sleeps as soon as they finish)."""
        self._want_asleep = True
        await self._sleep_if_idle()
        return self.backend.state

    async def _sleep_if_idle(self) -> None:
        async with self._lock():
            if self._want_asleep and self._scoring == 0:
                await self._transition(self.backend.sleep)

    async def score(self, samples: list[Sample]) -> list[SampleResult]:
        """Score samples on this replica; one result per sample, failures typed."""
        async with self._lock():  # never starts while a sleep is under way
            if self.backend.state != "awake":
                await self._transition(self.backend.wake_up)
            self._scoring += 1
        # Shielded: when the caller gives up (Ray cancels it at a batch deadline) the backend may
        # still be computing in a thread; the replica counts it as in flight until it is done.
        work = asyncio.ensure_future(self.backend.ascore(samples))
        work.add_done_callback(self._score_done)
        try:
            results = await asyncio.shield(work)
        except Exception as e:  # noqa: BLE001 - a backend must not raise, but never lose the batch
            msg = f"{type(self.backend).__name__}.ascore raised {e!r:.300}"
            return [SampleResult.failed("error", msg) for _ in samples]
        if len(results) != len(samples):
            msg = f"{type(self.backend).__name__} returned {len(results)} results for {len(samples)} samples"
            return [SampleResult.failed("error", msg) for _ in samples]
        return list(results)

    def _score_done(self, work: asyncio.Future) -> None:
        self._scoring -= 1
        self._events.append("score")
        if not work.cancelled():
            work.exception()  # retrieved: the caller may be gone
        if self._want_asleep and self._scoring == 0:
            task = asyncio.ensure_future(self._sleep_if_idle())
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    def history(self) -> list[str]:
        """Lifecycle transitions and ``"score"`` calls, in the order they happened."""
        return list(self._events)

    def state(self) -> str:
        """The backend state: unloaded, awake, asleep or closed."""
        return self.backend.state

    def metrics(self) -> dict[str, float]:
        """The backend's metrics since the last call."""
        return self.backend.metrics()

    def resources(self) -> dict[str, Any]:
        """What Ray gave this replica: ``assigned`` resources, ``placement_group`` id, accelerator ids."""
        import ray

        ctx = ray.get_runtime_context()
        pg = ctx.get_placement_group_id()
        return {
            "assigned": ctx.get_assigned_resources(),
            "placement_group": pg,
            "accelerator_ids": ctx.get_accelerator_ids(),
            "node_id": ctx.get_node_id(),
        }

    def ping(self) -> bool:
        """Liveness probe."""
        return True

    async def close(self) -> None:
        """Close the backend."""
        await self.backend.aclose()


class ActorRMBackend(RMBackend):
    """The backend a worker's engine sees when the reward model runs as actors: it sends each batch,
    split over the replicas, to the least-loaded replica (ties round-robin) and retries a chunk on
    another replica when its replica dies. Lifecycle calls are no-ops here: the manager fans
    ``wake_up``/``sleep`` out to the replicas themselves."""

    name = "ray-model-actors"

    def __init__(
        self, config: RewardModelConfig, replicas: Sequence[Any] = (), rank: int = 0, max_retries: int = 1
    ):
        super().__init__(config)
        if not replicas:
            raise ValueError("ActorRMBackend needs at least one model replica")
        self._replicas = list(replicas)
        self._inflight = [0] * len(self._replicas)
        self._next = rank % len(self._replicas)
        self._max_retries = max_retries

    def _pick(self, exclude: set[int]) -> int:
        n = len(self._replicas)
        order = [(self._next + k) % n for k in range(n)]
        candidates = [i for i in order if i not in exclude] or order
        best = min(candidates, key=lambda i: self._inflight[i])  # first of the least loaded in rotation order
        self._next = (best + 1) % n
        return best

    async def ascore(self, samples: Sequence[Sample]) -> list[SampleResult]:
        if not samples:
            return []
        chunks = split_contiguous(len(samples), len(self._replicas))
        parts = await asyncio.gather(*(self._score_chunk(list(samples[c.start : c.stop])) for c in chunks))
        return [r for part in parts for r in part]

    async def _score_chunk(self, chunk: list[Sample]) -> list[SampleResult]:
        from ray.exceptions import RayTaskError

        from rewardkit.ray.runtime import crash_errors

        tried: set[int] = set()
        while True:
            i = self._pick(tried)
            self._inflight[i] += 1
            try:
                return await self._replicas[i].score.remote(chunk)
            except crash_errors() as e:
                tried.add(i)
                if len(tried) > self._max_retries:
                    msg = f"reward-model replica died ({type(e).__name__}); tried {len(tried)} replica(s)"
                    return [SampleResult.failed("crash", msg) for _ in chunk]
            except RayTaskError as e:
                return [
                    SampleResult.failed("error", f"reward-model replica raised: {e!s:.300}") for _ in chunk
                ]
            finally:
                self._inflight[i] -= 1


def registries_with_proxy(config: RewardConfig, replicas: Sequence[Any], rank: int = 0):
    """The plugin registries with ``reward_model.backend`` replaced by an :class:`ActorRMBackend` on ``replicas``."""
    from rewardkit.plugins import get_registries
    from rewardkit.registry import Registry

    regs = get_registries(config.plugins)
    backends: Registry = Registry("RM backend")
    factory = functools.partial(
        ActorRMBackend, replicas=list(replicas), rank=rank, max_retries=max(1, config.max_retries)
    )
    backends.add(config.reward_model.backend, factory, "rewardkit.ray")
    return dataclasses.replace(regs, backends=backends)


@dataclasses.dataclass
class ModelPlacement:
    """How the reward model runs as actors: replicas, resources per replica, layout."""

    replicas: int
    num_gpus: float
    num_cpus: float
    colocated: bool

    @classmethod
    def from_config(
        cls,
        config: RewardConfig,
        *,
        replicas: int | None = None,
        num_gpus: float | None = None,
        colocated: bool | None = None,
    ) -> ModelPlacement | None:
        """Read ``reward.reward_model``: ``rollout.ray`` (or the same keys directly in ``rollout``:
        ``replicas``, ``num_gpus`` per replica, ``num_cpus``, ``layout: colocated | standalone``), else
        ``n_gpus_per_node`` × ``nnodes`` (one replica per GPU). ``None``: the model runs inside each
        worker (HTTP judges, remote RMs)."""
        rm = config.reward_model
        if not rm.enable:
            return None
        nested = rm.rollout.get("ray") or {}
        if not isinstance(nested, dict):
            raise ConfigError(f"reward_model.rollout.ray must be a mapping, got {type(nested).__name__}")
        flat = {k: v for k, v in rm.rollout.items() if k in PLACEMENT_KEYS}
        ro = validate_options(PlacementOptions, {**flat, **nested}, "reward.reward_model.rollout.ray")
        total = rm.n_gpus_per_node * max(rm.nnodes, 1)
        gpus = num_gpus if num_gpus is not None else ro.num_gpus
        n = replicas if replicas is not None else ro.replicas
        if gpus is None and n is None and total == 0:
            return None
        if gpus is None:
            gpus = 1.0 if total else 0.0
        if n is None:
            n = max(1, int(total // gpus)) if gpus and total else 1
        if colocated is None:
            colocated = ro.layout == "colocated"
        if n < 1 or gpus < 0:
            raise ConfigError(f"reward_model: need replicas >= 1 and num_gpus >= 0, got {n} and {gpus}")
        return cls(int(n), float(gpus), float(ro.num_cpus), bool(colocated))


class ModelPool:
    """The replicas of one reward model (driver side): creation, fan-out of wake/sleep, shutdown."""

    def __init__(self, replicas: list[Any], placement: ModelPlacement):
        self.replicas = replicas
        self.placement = placement

    @classmethod
    def create(
        cls,
        config: RewardConfig,
        placement: ModelPlacement,
        *,
        placement_group: Any = None,
        bundle_indices: Sequence[int] | None = None,
        max_restarts: int = 2,
        startup_timeout_s: float = 600.0,
    ) -> ModelPool:
        """Start the replicas and wait until every one has loaded its model."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        actor = ray.remote(ModelActor)
        replicas: list[Any] = []  # actor handles
        for i in range(placement.replicas):
            if placement_group is not None:
                bundle = bundle_indices[i % len(bundle_indices)] if bundle_indices else -1
                strategy: Any = PlacementGroupSchedulingStrategy(
                    placement_group=placement_group, placement_group_bundle_index=bundle
                )
            else:
                strategy = "SPREAD"
            replicas.append(
                actor.options(
                    num_gpus=placement.num_gpus,
                    num_cpus=placement.num_cpus,
                    max_restarts=max_restarts,
                    max_task_retries=0,
                    max_concurrency=64,
                    scheduling_strategy=strategy,
                ).remote(
                    config.reward_model.backend,
                    config.reward_model.model_dump(mode="json"),
                    config.plugins.model_dump(mode="json"),
                    placement.colocated,
                )
            )
        pool = cls(replicas, placement)
        try:
            ray.get([r.ping.remote() for r in replicas], timeout=startup_timeout_s)
        except Exception as e:
            pool.kill()
            if isinstance(e, ray.exceptions.GetTimeoutError):
                raise RuntimeError(
                    f"{placement.replicas} reward-model replica(s) ({placement.num_gpus} GPU each) did not start "
                    f"within {startup_timeout_s}s; free resources: {ray.available_resources()}"
                ) from None
            raise
        return pool

    async def wake_up(self) -> list[Any]:
        """``wake_up()`` on every replica, concurrently; a dead replica's error is returned, not raised."""
        return await asyncio.gather(*(r.wake_up.remote() for r in self.replicas), return_exceptions=True)

    async def sleep(self) -> list[Any]:
        """``sleep()`` on every replica, concurrently."""
        return await asyncio.gather(*(r.sleep.remote() for r in self.replicas), return_exceptions=True)

    def kill(self, graceful_timeout_s: float = 10.0) -> None:
        """Close every replica's backend (best effort) and kill the actors."""
        from rewardkit.ray.runtime import close_and_kill

        close_and_kill(self.replicas, graceful_timeout_s)
        self.replicas = []
