"""rewardkit: rewards for reinforcement learning of language models.

>>> import rewardkit
>>> result = rewardkit.compute([{"data_source": "openai/gsm8k", "response": "#### 42", "ground_truth": "42"}])
>>> result.scores
[1.0]

The public names load lazily, so ``import rewardkit`` stays cheap and never imports torch,
transformers or ray.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rewardkit.hookspecs import hookimpl

__version__ = "0.1.0"

_LAZY = {
    "compute": "rewardkit.engine_cache",
    "acompute": "rewardkit.engine_cache",
    "RewardEngine": "rewardkit.engine",
    "RewardConfig": "rewardkit.config",
    "load_config": "rewardkit.config",
    "migrate_legacy": "rewardkit.migrate",
    "LegacyConfigWarning": "rewardkit.migrate",
    "Sample": "rewardkit.batch",
    "to_samples": "rewardkit.batch",
    "read_jsonl": "rewardkit.batch",
    "RewardResult": "rewardkit.result",
    "SampleResult": "rewardkit.result",
    "RewardManager": "rewardkit.managers.base",
    "RMBackend": "rewardkit.backends.base",
    "Executor": "rewardkit.executors.base",
    "get_registries": "rewardkit.plugins",
    "RewardKitError": "rewardkit.errors",
    "ConfigError": "rewardkit.errors",
    "SampleError": "rewardkit.errors",
    "UnknownNameError": "rewardkit.errors",
    "DuplicateNameError": "rewardkit.errors",
    "BrokenPluginError": "rewardkit.errors",
}

__all__ = ["hookimpl", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rewardkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # pragma: no cover
    from rewardkit.backends.base import RMBackend
    from rewardkit.batch import Sample, read_jsonl, to_samples
    from rewardkit.config import RewardConfig, load_config
    from rewardkit.engine import RewardEngine
    from rewardkit.engine_cache import acompute, compute
    from rewardkit.errors import (
        BrokenPluginError,
        ConfigError,
        DuplicateNameError,
        RewardKitError,
        SampleError,
        UnknownNameError,
    )
    from rewardkit.executors.base import Executor
    from rewardkit.managers.base import RewardManager
    from rewardkit.migrate import LegacyConfigWarning, migrate_legacy
    from rewardkit.plugins import get_registries
    from rewardkit.result import RewardResult, SampleResult
