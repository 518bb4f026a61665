"""OpenRLHF's remote reward-model reply, shaped from rewardkit's per-sample results.

OpenRLHF 0.11 (``openrlhf.utils.agent.SingleTurnAgentExecutor``) posts ``{"query", "prompts",
"labels"}`` and reads ``rewards`` (the training reward), ``scores`` (its dynamic-filtering value,
``rewards`` when absent) and ``extra_logs`` (each value turned into a tensor and logged). This
module builds that reply; ``rewardkit serve`` answers ``/get_reward`` with it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rewardkit.integrations.sample_info import info_keys, reported_score

if TYPE_CHECKING:
    from rewardkit.config import RewardConfig
    from rewardkit.result import SampleResult

#: sample_info keys that are not numbers for OpenRLHF's extra_logs.
_NOT_LOGGED = frozenset({"score", "status", "reason", "error", "pred", "extra"})


def _number(value: Any) -> float | None:
    if isinstance(value, bool | int | float) and math.isfinite(float(value)):
        return float(value)
    return None


def openrlhf_reply(samples: list[SampleResult], config: RewardConfig) -> dict[str, Any]:
    """The ``/get_reward`` body for per-sample results: the same keys for every request.

    ``rewards`` are finite (failed / abstained get ``failure_score`` / ``abstain_score``, default
    0); ``scores`` are the scorer's ``acc`` where it has one, else the reward; ``extra_logs`` holds
    one number per sample for ``failed``, ``abstained`` and each numeric key of
    :func:`~rewardkit.integrations.sample_info.info_keys` (``acc``, ``reward.extra_keys``,
    components), 0.0 where a sample has none: OpenRLHF turns each into a tensor.
    """
    rewards = [reported_score(r, config) for r in samples]
    scores = []
    for r, reward in zip(samples, rewards, strict=True):
        acc = _number(r.extra.get("acc")) if r.status == "ok" else None
        scores.append(acc if acc is not None else reward)
    logs: dict[str, list[float]] = {
        "failed": [float(r.status == "failed") for r in samples],
        "abstained": [float(r.status == "abstained") for r in samples],
    }
    for key in info_keys(config):
        if key in _NOT_LOGGED:
            continue
        if key.startswith("component/"):
            values = [_number(r.components.get(key[len("component/") :])) for r in samples]
        else:
            values = [_number(r.extra.get(key)) for r in samples]
        logs[key] = [0.0 if v is None else v for v in values]
    return {
        "rewards": rewards,
        "scores": scores,
        "extra_logs": logs,
        "status": [r.status for r in samples],
        "reasons": [r.reason for r in samples],
        "errors": [r.error if r.status == "failed" else None for r in samples],
    }
