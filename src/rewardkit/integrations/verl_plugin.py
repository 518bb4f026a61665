"""verl plugin: registers :class:`~rewardkit.integrations.verl.RewardKitRewardManager` as ``rewardkit``.

rewardkit declares this module under verl's ``verl.plugins`` entry-point group; ``import verl``
loads every plugin of that group (unless ``VERL_USE_EXTERNAL_PLUGINS=none``), in the driver and
in each Ray worker alike. So, with rewardkit installed, verl's one-line config works everywhere::

    reward:
      reward_manager:
        source: register
        name: rewardkit

verl swallows a plugin's import errors (at debug level); this module warns instead, so a failed
registration is never a bare ``Unknown reward manager: rewardkit``.
"""

from __future__ import annotations

import warnings

#: The name the manager is registered under in verl's reward-manager registry.
NAME = "rewardkit"


def register() -> bool:
    """Register the manager in verl's reward-loop registry (idempotent); False if verl lacks one."""
    try:
        from verl.experimental.reward_loop.reward_manager.registry import (
            REWARD_MANAGER,
        )
        from verl.experimental.reward_loop.reward_manager.registry import (
            register as verl_register,
        )
    except Exception as e:  # noqa: BLE001 - verl would swallow it silently; say why instead
        warnings.warn(
            f"rewardkit: cannot register reward manager {NAME!r} with verl ({e}); use "
            "reward_manager.source: importlib with module.path: pkg://rewardkit.integrations.verl",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    from rewardkit.integrations.verl import RewardKitRewardManager

    if REWARD_MANAGER.get(NAME) is not RewardKitRewardManager:
        # Duck-typed to verl's RewardManagerBase, not a subclass: subclassing would import verl (and
        # torch) with rewardkit.integrations.verl, which must stay importable without verl.
        verl_register(NAME)(RewardKitRewardManager)  # type: ignore[arg-type]
    return True


register()
