"""One key set for every sample: what the trainer integrations report per sample.

verl's reward loop takes the ``reward_extra_info`` keys from the *first* sample of a batch and
indexes every other sample with them, and its legacy trainer appends per-key lists; TRL logs
columns. So every sample reports the same keys, whatever its status: the fixed :data:`BASE_KEYS`,
the scorer extras named in ``reward.extra_keys``, one ``component/<name>`` per configured
component, and the remaining extras as JSON text under ``extra``. Missing values are ``None``,
the way verl pads (its validation metrics count a ``None`` ``acc`` as a failed session).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rewardkit.config import RewardConfig
    from rewardkit.result import SampleResult

#: Keys every sample carries: the reported score, status, reason, error text, and verl's ``acc`` /
#: ``pred`` (read by its ``val-core`` metrics, ``maj@N`` and ``filter_groups``).
BASE_KEYS = ("score", "status", "reason", "error", "acc", "pred")


def fallback_score(result: SampleResult, config: RewardConfig) -> float:
    """The float a trainer gets for a failed / abstained sample: ``failure_score`` / ``abstain_score``, else 0."""
    if result.status == "failed":
        return config.failure_score if config.failure_score is not None else 0.0
    return config.abstain_score if config.abstain_score is not None else 0.0


def reported_score(result: SampleResult, config: RewardConfig) -> float:
    """The sample's score as a finite float (reward tensors cannot hold ``nan``)."""
    if result.status == "ok" and result.score is not None and math.isfinite(result.score):
        return float(result.score)
    return float(fallback_score(result, config))


def component_keys(config: RewardConfig) -> list[str]:
    """``component/<name>`` for each configured component (and the reward model's ``rm``)."""
    names = [e.key for e in config.scorers]
    if config.reward_model.enable:
        names.append("rm")
    return [f"component/{n}" for n in names]


def info_keys(config: RewardConfig) -> list[str]:
    """The keys :func:`sample_info` returns for ``config``, in order (the same for every sample)."""
    keys = list(BASE_KEYS)
    for k in [*config.extra_keys, *component_keys(config)]:
        if k not in keys:
            keys.append(k)
    keys.append("extra")
    return keys


def sample_info(
    result: SampleResult, config: RewardConfig, components: list[str] | None = None
) -> dict[str, Any]:
    """One sample's info under :func:`info_keys` (``None`` for what it lacks); ``components`` is
    :func:`component_keys` of ``config`` when the caller has it already (a batch)."""
    extra = result.extra
    score = result.score
    if components is None:
        components = component_keys(config)
    if (
        type(score) is float
        and result.status == "ok"
        and score - score == 0.0  # finite
        and not result.components
        and extra.keys() <= _ACC_PRED
        and not config.extra_keys
        and not components
    ):  # the common sample (a rule scorer's ok score, acc and pred at most): the same dict, at once
        return {
            "score": score,
            "status": "ok",
            "reason": "",
            "error": "",
            "acc": _plain(extra.get("acc")),
            "pred": _plain(extra.get("pred")),
            "extra": "",
        }
    info: dict[str, Any] = {
        "score": reported_score(result, config),
        "status": result.status,
        "reason": result.reason or "",
        "error": (result.error or "") if result.status == "failed" else "",
        "acc": _plain(extra.get("acc")),
        "pred": _plain(extra.get("pred")),
    }
    for k in config.extra_keys:
        info.setdefault(k, _plain(extra.get(k)))
    for key in components:
        info.setdefault(key, result.components.get(key[len("component/") :]))
    rest = {k: v for k, v in extra.items() if k not in info} if not extra.keys() <= _ACC_PRED else None
    if result.components:
        rest = rest or {}
        rest.update(
            {f"component/{k}": v for k, v in result.components.items() if f"component/{k}" not in info}
        )
    info["extra"] = json.dumps(rest, ensure_ascii=False, default=repr) if rest else ""
    return info


_ACC_PRED = frozenset({"acc", "pred"})
_SCALARS = frozenset({str, bool, int, float, type(None)})


def _plain(value: Any) -> Any:
    # numpy scalars as Python scalars, so np.array over samples keeps one dtype where it can
    if type(value) in _SCALARS:
        return value
    return value.item() if type(value).__module__ == "numpy" and hasattr(value, "item") else value
