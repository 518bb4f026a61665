"""The engine overrides ``rewardkit score`` and ``rewardkit serve`` share: ``--executor``,
``--num-workers`` and ``--timeout`` (each replaces the config's value when given)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from rewardkit.config import RewardConfig

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["apply_overrides", "engine_override_options"]


def engine_override_options(f: F) -> F:
    """Add ``--executor``, ``--num-workers`` and ``--timeout`` to a click command."""
    for option in reversed(
        [
            click.option(
                "--executor",
                type=click.Choice(["auto", "inline", "process", "ray"]),
                default=None,
                help="Override reward.executor. Default: the config's.",
            ),
            click.option(
                "--num-workers",
                type=click.IntRange(min=1),
                default=None,
                help="Override reward.num_workers. Default: the config's.",
            ),
            click.option(
                "--timeout",
                "timeout_s",
                type=click.FloatRange(min=0, min_open=True),
                default=None,
                help="Override reward.timeout_s (per-sample deadline, seconds). Default: the config's.",
            ),
        ]
    ):
        f = option(f)
    return f


def apply_overrides(
    config: RewardConfig, *, executor: str | None, num_workers: int | None, timeout_s: float | None
) -> RewardConfig:
    """``config`` with each override that was given (not ``None``) in place of its value."""
    given = {"executor": executor, "num_workers": num_workers, "timeout_s": timeout_s}
    overrides = {k: v for k, v in given.items() if v is not None}
    return config.model_copy(update=overrides) if overrides else config
