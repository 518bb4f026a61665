"""Served reward models: launch the reward model's inference servers, route to them, wake and sleep them.

Built-in server launchers (``vllm``, ``sglang``, ``command``) are registered here as an ordinary
plugin, lazily, so that loading plugins imports nothing heavy. :func:`start_servers` starts the
replicas of ``reward.reward_model.server`` (local processes, or Ray actors in a placement group)
and :func:`backend_config` points the RM backend at them. See docs/served-models.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rewardkit.hookspecs import hookimpl
from rewardkit.serving.launcher import make_launcher

if TYPE_CHECKING:
    from rewardkit.config import RewardModelConfig
    from rewardkit.plugins import Registries

__all__ = ["backend_config", "make_launcher", "register_server_launchers", "start_servers"]


@hookimpl
def register_server_launchers(register):
    """Register the built-in server launchers."""
    register("rewardkit.serving.launcher:VLLMLauncher", name="vllm")
    register("rewardkit.serving.launcher:SGLangLauncher", name="sglang")
    register("rewardkit.serving.launcher:CommandLauncher", name="command")


def start_servers(
    rm: RewardModelConfig,
    registries: Registries | None = None,
    *,
    use_ray: bool = False,
    placement_group: Any = None,
    bundle_indices: list[int] | None = None,
    plugins: dict[str, Any] | None = None,
) -> Any:
    """Start ``rm.server``'s replicas and wait until all are healthy; colocated ones are then put to sleep.

    Local processes by default; ``use_ray=True`` runs each replica in a Ray actor holding its GPU
    bundle (``placement_group`` given: colocated on it; else a placement group of its own).
    Returns a :class:`~rewardkit.serving.group.ServerGroup` or
    :class:`~rewardkit.serving.ray_group.RayServerGroup`.
    """
    launcher = make_launcher(rm, registries)
    if use_ray:
        from rewardkit.serving.ray_group import RayServerGroup

        group: Any = RayServerGroup(
            rm, placement_group=placement_group, bundle_indices=bundle_indices, plugins=plugins
        )
    else:
        from rewardkit.serving.group import ServerGroup

        group = ServerGroup(rm, launcher).start()
    try:
        if rm.server_placement == "colocated" and launcher.can_sleep:
            group.sleep()
    except BaseException:
        group.close()
        raise
    return group


def backend_config(rm: RewardModelConfig, urls: list[str], backend_cls: Any = None) -> RewardModelConfig:
    """``rm`` with ``rollout.base_url`` set to the launched replicas (see :mod:`rewardkit.serving.routing`)."""
    from rewardkit.serving.routing import backend_config as _bc

    return _bc(rm, urls, backend_cls)
