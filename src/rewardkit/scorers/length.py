"""Cosine-scaled length reward ("Demystifying Long Chain-of-Thought Reasoning in LLMs", Yeo et al. 2025).

With ``L`` the response length, ``L_max`` = ``max_length`` and ``t = min(L, L_max) / L_max``::

    cosine(t, a, b) = b + (a - b) * (1 + cos(pi * t)) / 2       # a at t=0, b at t=1

    correct answer: cosine(t, max_value_correct, min_value_correct)   # short & right is best
    wrong answer:   cosine(t, min_value_wrong,  max_value_wrong)      # short & wrong is worst
    L > L_max:      exceed_value, when set (else t is clamped to 1)

Correctness comes from another scorer (``base``: a registered scorer name such as ``"math"``; by
default the one the sample's ``data_source`` routes to): its ``acc`` field when present, else
``score > 0``. If the base scorer abstains, so does this one; if it fails, this one raises.
Length is ``sample.response_length`` (tokens) when the caller gave it, else characters.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from rewardkit.batch import Sample

UNITS = ("auto", "tokens", "chars")


def cosine(t: float, at_zero: float, at_one: float) -> float:
    """The cosine ramp from ``at_zero`` (t=0) to ``at_one`` (t=1)."""
    return at_one + (at_zero - at_one) * (1.0 + math.cos(math.pi * t)) / 2.0


def response_length(response: str, sample: Sample | None, unit: str = "auto") -> int:
    """The length the reward is computed on: tokens when known (``unit`` auto/tokens), else characters."""
    if unit not in UNITS:
        raise ValueError(f"cosine_length: unit must be one of {UNITS}, got {unit!r}")
    tokens = sample.response_length if sample is not None else None
    if unit == "tokens" and tokens is None:
        raise ValueError("cosine_length: unit='tokens' but the sample has no response_length")
    if unit != "chars" and tokens is not None:
        return int(tokens)
    return len(response or "")


async def _is_correct(sample: Sample, base: str | None) -> bool | None:
    from rewardkit.plugins import get_registries
    from rewardkit.runtime.worker import in_worker
    from rewardkit.scoring import ainvoke, invoke, signature_of

    scorers = get_registries().scorers
    name = base or (scorers.name_for(sample.data_source) if sample.data_source else None)
    if name is None:
        raise ValueError(
            f"cosine_length: no base scorer: pass base='<scorer>' or use a data source a scorer claims "
            f"(data_source={sample.data_source!r})"
        )
    if name == "cosine_length":
        raise ValueError("cosine_length cannot use itself as its base scorer")
    spec = scorers.get(name)
    if signature_of(spec.fn).is_async or in_worker():
        result = await ainvoke(spec, sample)
    else:  # a sync base scorer (math-verify: tens of ms) must not block the caller's event loop
        result = await asyncio.to_thread(invoke, spec, sample)
    if result.status == "abstained":
        return None
    if result.status == "failed":
        raise RuntimeError(f"cosine_length: base scorer {name!r} failed: {result.error}")
    if "acc" in result.extra:
        return bool(result.extra["acc"])
    return (result.score or 0.0) > 0


async def cosine_length(
    response: str,
    sample: Sample,
    base: str | None = None,
    max_length: int = 1000,
    min_value_correct: float = 0.5,
    max_value_correct: float = 1.0,
    min_value_wrong: float = -1.0,
    max_value_wrong: float = -0.5,
    exceed_value: float | None = None,
    unit: str = "auto",
) -> dict[str, Any] | None:
    """Length-aware reward: short correct answers earn most, short wrong ones lose most (see module doc).

    Returns ``{"score", "acc", "length"}``, or ``None`` when the base scorer abstains.
    The paper's settings are ``max_value_correct=2, min_value_correct=1, min_value_wrong=-10,
    max_value_wrong=0, exceed_value=-10``; the defaults here are the bounded ones of open-r1.
    """
    if max_length <= 0:
        raise ValueError(f"cosine_length: max_length must be positive, got {max_length}")
    length = response_length(response, sample, unit)
    acc = await _is_correct(sample, base)
    if acc is None:
        return None
    if exceed_value is not None and length > max_length:
        return {"score": float(exceed_value), "acc": acc, "length": length}
    t = min(length, max_length) / max_length
    if acc:
        score = cosine(t, max_value_correct, min_value_correct)
    else:
        score = cosine(t, min_value_wrong, max_value_wrong)
    return {"score": score, "acc": acc, "length": length}
