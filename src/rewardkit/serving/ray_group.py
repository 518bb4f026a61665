"""Server replicas on Ray: each replica a :class:`ServerActor` holding its GPU bundle in a placement group.

``standalone`` (or no trainer placement group given): the group makes a placement group of its own
with one ``{"GPU": gpus_per_replica}`` bundle per replica. ``colocated`` with the trainer's
``placement_group``: replica ``i`` takes bundle ``bundle_indices[i]`` of it. The actor asks Ray for
``num_gpus=gpus_per_replica`` (logical GPUs are enough for Ray, so this runs on CPU clusters too),
and the server process it starts inherits the ``CUDA_VISIBLE_DEVICES`` Ray gave it. Inside the
actor a one-replica :class:`~rewardkit.serving.group.ServerGroup` restarts a server that dies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rewardkit.serving.group import raise_failures
from rewardkit.serving.process import ServerStartError

if TYPE_CHECKING:
    from rewardkit.config import RewardModelConfig


class ServerActor:
    """One server replica inside a Ray actor: start, url, wake/sleep, restart on death, close."""

    def __init__(self, rm_config: dict[str, Any], plugins: dict[str, Any], index: int):
        from rewardkit.config import PluginSettings, RewardModelConfig
        from rewardkit.plugins import get_registries
        from rewardkit.serving.group import ServerGroup
        from rewardkit.serving.launcher import make_launcher

        rm = RewardModelConfig.model_validate(rm_config)
        launcher = make_launcher(rm, get_registries(PluginSettings.model_validate(plugins)))
        self.group = ServerGroup(rm, launcher, indices=[index])
        self.index = index

    def start(self) -> str:
        """Start the server and wait for it to be healthy; its URL (this node's address when bound to 0.0.0.0)."""
        self.group.start()
        url = self.group.urls[0]
        if self.group.config.host == "0.0.0.0":
            import ray

            url = url.replace("127.0.0.1", ray.util.get_node_ip_address())
        return url

    def wake_up(self) -> float:
        """Wake the server; seconds taken."""
        return self.group.wake_up()[f"r{self.index}"]

    def sleep(self) -> float:
        """Put the server to sleep; seconds taken."""
        return self.group.sleep()[f"r{self.index}"]

    def pid(self) -> int:
        """The server process id."""
        return self.group.pids[0]

    def restarts(self) -> int:
        """How often the server was restarted."""
        return self.group.restarts()

    def check(self) -> int:
        """Restart the server now if it died (the monitor also does, every ``health_interval_s``)."""
        return self.group.check()

    def resources(self) -> dict[str, Any]:
        """What Ray gave this actor: accelerator ids and placement group."""
        import ray

        ctx = ray.get_runtime_context()
        return {"accelerator_ids": ctx.get_accelerator_ids(), "placement_group": ctx.get_placement_group_id()}

    def close(self) -> None:
        """Stop the server process group."""
        self.group.close()


class RayServerGroup:
    """The replicas of ``reward_model.server`` as Ray actors (see the module docstring)."""

    def __init__(
        self,
        rm: RewardModelConfig,
        *,
        placement_group: Any = None,
        bundle_indices: Sequence[int] | None = None,
        plugins: dict[str, Any] | None = None,
    ):
        import ray
        from ray.util.placement_group import placement_group as make_pg
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        assert rm.server is not None
        self.rm = rm
        self.config = rm.server
        self.asleep = False
        self.timings: dict[str, float] = {}
        self._own_pg = None
        n, gpus = self.config.replicas, self.config.gpus_per_replica
        timeout = self.config.startup_timeout_s + 60
        if placement_group is None:
            bundle = {"GPU": gpus} if gpus > 0 else {"CPU": 0.01}
            self._own_pg = make_pg([dict(bundle) for _ in range(n)], strategy="PACK")
            if not self._own_pg.wait(timeout_seconds=min(timeout, 120)):
                ray.util.remove_placement_group(self._own_pg)
                raise ServerStartError(
                    f"no room for {n} server replica(s) of {gpus:g} GPU each; free: {ray.available_resources()}"
                )
            placement_group = self._own_pg
            bundle_indices = list(range(n))
        self.placement_group = placement_group
        actor = ray.remote(ServerActor)
        self.actors: list[Any] = []  # actor handles
        for i in range(n):
            index = bundle_indices[i % len(bundle_indices)] if bundle_indices else -1
            self.actors.append(
                actor.options(
                    num_gpus=gpus,
                    num_cpus=0,
                    max_restarts=0,
                    max_concurrency=8,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=placement_group, placement_group_bundle_index=index
                    ),
                ).remote(rm.model_dump(mode="json"), plugins or {}, i)
            )
        try:
            results = ray.get([a.start.remote() for a in self.actors], timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise ServerStartError(f"server replicas did not start within {timeout:g}s") from None
        except ray.exceptions.RayTaskError as e:
            self.close()
            raise ServerStartError(f"a server replica failed to start: {e}") from None
        except BaseException:
            self.close()
            raise
        self.urls: list[str] = list(results)

    def _fan(self, action: str) -> dict[str, float]:
        import ray

        refs = [getattr(a, action).remote() for a in self.actors]
        results: list[Any] = []
        for ref in refs:  # every replica answers (or fails) before this returns
            try:
                results.append(ray.get(ref, timeout=self.config.request_timeout_s + 30))
            except Exception as e:  # noqa: BLE001 - reported together below
                results.append(e)
        raise_failures(action, results)
        self.asleep = action == "sleep"
        timings = {f"r{i}": float(t) for i, t in enumerate(results)}
        self.timings.update({f"{action}_s/{k}": v for k, v in timings.items()})
        return timings

    def wake_up(self) -> dict[str, float]:
        """Wake every replica; returns when all answered: replica → seconds."""
        return self._fan("wake_up")

    def sleep(self) -> dict[str, float]:
        """Put every replica to sleep; replica → seconds."""
        return self._fan("sleep")

    @property
    def pids(self) -> list[int]:
        """The server process ids (on their nodes)."""
        import ray

        return ray.get([a.pid.remote() for a in self.actors])

    def restarts(self) -> int:
        """Restarts so far, all replicas together."""
        import ray

        return sum(ray.get([a.restarts.remote() for a in self.actors]))

    def metrics(self) -> dict[str, float]:
        """``replicas``, ``restarts`` and the last wake/sleep seconds per replica."""
        out = {"replicas": float(len(self.actors)), **self.timings}
        try:
            out["restarts"] = float(self.restarts())
        except Exception:  # noqa: BLE001 - a dead actor: no count rather than a made-up one
            pass
        return out

    def close(self) -> None:
        """Stop every server process, kill the actors, remove the group's own placement group (idempotent)."""
        import ray

        from rewardkit.runtime.actors import close_and_kill

        if self.actors:
            close_and_kill(self.actors, graceful_timeout_s=30.0)
            self.actors = []
        if self._own_pg is not None:
            try:
                ray.util.remove_placement_group(self._own_pg)
            except Exception:  # noqa: BLE001
                pass
            self._own_pg = None
