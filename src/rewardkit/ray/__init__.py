"""Scale-out on Ray: :class:`RewardLoopManager`, :class:`RewardLoopWorker` actors, reward models as
GPU actors, one judge budget across workers, and streamed results.

Importing this package does not import ray; the names below load lazily.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "RewardLoopManager": "rewardkit.ray.manager",
    "RewardStream": "rewardkit.ray.manager",
    "RewardLoopWorker": "rewardkit.ray.worker",
    "ModelActor": "rewardkit.ray.model_actor",
    "ActorRMBackend": "rewardkit.ray.model_actor",
    "JudgeLimiter": "rewardkit.ray.limiter",
    "judge_slot": "rewardkit.ray.limiter",
    "get_limiter": "rewardkit.ray.limiter",
    "split_contiguous": "rewardkit.ray.sharding",
}

__all__ = [
    "ActorRMBackend",
    "JudgeLimiter",
    "ModelActor",
    "RewardLoopManager",
    "RewardLoopWorker",
    "RewardStream",
    "get_limiter",
    "judge_slot",
    "split_contiguous",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rewardkit.ray' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # pragma: no cover
    from rewardkit.ray.limiter import JudgeLimiter, get_limiter, judge_slot
    from rewardkit.ray.manager import RewardLoopManager, RewardStream
    from rewardkit.ray.model_actor import ActorRMBackend, ModelActor
    from rewardkit.ray.sharding import split_contiguous
    from rewardkit.ray.worker import RewardLoopWorker
