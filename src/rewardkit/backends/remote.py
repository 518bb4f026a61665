"""The ``remote`` RM backend: OpenRLHF's remote reward-server protocol over the shared HTTP core.

Each chunk of ``batch_size`` samples is one POST of
``{"query": [prompt + response, ...], "prompts": [...], "labels": [...]}`` to ``base_url + path``
(OpenRLHF's ``serve_rm`` listens on ``/get_reward``); the server answers ``{"rewards": [...]}``
(the key is ``score_key``). Retries, timeouts, the overall deadline and the circuit breaker are
those of :class:`~rewardkit.backends.http.HTTPCore`. A reply whose rewards list has the wrong
length fails that chunk's samples with reason ``invalid_return``, saying so.

Where the reply also carries per-sample ``status`` (and ``reasons`` / ``errors``), as
``rewardkit serve`` does, a sample the server reports ``failed`` or ``abstained`` is that here
too, with the server's reason and error text: never ``ok`` with the server's fallback number.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from rewardkit.backends.http import (
    TIMED_OUT,
    HTTPBackend,
    HTTPSettings,
    RequestFailed,
    gather_with_deadline,
    parse_settings,
)
from rewardkit.batch import Sample
from rewardkit.config import RewardModelConfig
from rewardkit.errors import ConfigError
from rewardkit.result import SampleResult
from rewardkit.runtime.dedup import unique_slots


class RemoteSettings(HTTPSettings):
    """``reward_model.rollout`` for the ``remote`` backend (HTTP settings plus the protocol's)."""

    path: str = Field(
        "/get_reward", description="endpoint path appended to base_url ('' to use base_url as is)"
    )
    batch_size: int = Field(64, ge=1, description="samples per request")
    score_key: str = Field("rewards", description="key of the rewards list in the reply")
    query_template: str = Field("{prompt}{response}", description="how prompt and response form a query")
    send_prompts: bool = Field(True, description="also send 'prompts' and 'labels' (newer OpenRLHF servers)")
    dedup: bool = Field(True, description="send identical (prompt, response, label) samples once")


def _label(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


class RemoteRM(HTTPBackend):
    """A reward model served elsewhere, spoken to with OpenRLHF's ``{"query": [...]} → {"rewards": [...]}``.

    Per-sample extra: ``latency_s`` and ``retries`` of its chunk's request; ``rm_extra`` holds the
    sample's entries of any other per-sample lists in the reply (e.g. ``scores``, ``extra_logs``).
    """

    name = "remote"
    Options = RemoteSettings

    def __init__(self, config: RewardModelConfig):
        self.settings: RemoteSettings = parse_settings(RemoteSettings, dict(config.rollout), "remote")
        super().__init__(config, self.settings)
        s = self.settings
        try:
            s.query_template.format(prompt="", response="", ground_truth="")
        except (KeyError, IndexError, ValueError) as e:
            raise ConfigError(
                f"remote RM: query_template {s.query_template!r} is not valid (placeholders: "
                f"{{prompt}}, {{response}}, {{ground_truth}}): {e}"
            ) from None
        self.url = s.path  # appended to the chosen replica's base_url

    def _item(self, sample: Sample) -> tuple[str, str, str]:
        prompt = sample.prompt_text
        query = self.settings.query_template.format(
            prompt=prompt, response=sample.response, ground_truth=_label(sample.ground_truth)
        )
        return query, prompt, _label(sample.ground_truth)

    async def _post(self, items: list[tuple[str, str, str]], deadline: float | None) -> list[SampleResult]:
        s = self.settings
        payload: dict[str, Any] = {"query": [q for q, _, _ in items]}
        if s.send_prompts:
            payload["prompts"] = [p for _, p, _ in items]
            payload["labels"] = [lab for _, _, lab in items]
        cost = sum(len(q) for q, _, _ in items) / 4
        reply = await self.http.post_json(self.url, payload, cost_tokens=cost, deadline=deadline)
        extra: dict[str, Any] = {"latency_s": round(reply.latency_s, 6), "retries": reply.retries}
        data = reply.data
        rewards = data.get(s.score_key) if isinstance(data, dict) else None
        if not isinstance(rewards, list):
            msg = f"reply has no {s.score_key!r} list: {str(data)[:200]!r}"
            return [SampleResult.failed("invalid_return", msg, **extra) for _ in items]
        if len(rewards) != len(items):
            msg = f"server returned {len(rewards)} {s.score_key} for {len(items)} queries in this request"
            return [SampleResult.failed("invalid_return", msg, **extra) for _ in items]
        others = {
            k: v for k, v in data.items() if k != s.score_key and isinstance(v, list) and len(v) == len(items)
        }
        status, reasons, errors = (
            others.get(k) or [None] * len(items) for k in ("status", "reasons", "errors")
        )
        out = []
        for j, r in enumerate(rewards):
            ex = dict(extra)
            if others:
                ex["rm_extra"] = {k: v[j] for k, v in others.items()}
            if status[j] == "failed":
                reason = str(reasons[j] or "remote_failed")
                error = f"reward server: {errors[j] or reason}"
                out.append(SampleResult.failed(reason, error, **ex))
                continue
            if status[j] == "abstained":
                out.append(SampleResult.abstained(**ex))
                continue
            try:
                value = float(r)
            except (TypeError, ValueError):
                out.append(SampleResult.failed("invalid_return", f"reward {r!r:.60} is not a number", **ex))
                continue
            if math.isnan(value) or math.isinf(value):
                out.append(SampleResult.failed("invalid_return", f"reward is {value}", **ex))
            else:
                out.append(SampleResult.ok(value, **ex))
        return out

    async def ascore(self, samples: Sequence[Sample]) -> list[SampleResult]:
        """Score every sample in chunks of ``batch_size``; one result per sample, in order."""
        if self.state == "closed":
            raise RuntimeError("RemoteRM is closed")
        if not samples:
            return []
        s = self.settings
        start = time.monotonic()
        deadline = None if s.batch_timeout_s is None else start + s.batch_timeout_s
        items = [self._item(x) for x in samples]
        unique, slot = unique_slots(items, enabled=s.dedup)
        self.metrics_.add(dedup_saved=len(items) - len(unique))
        chunks = [unique[i : i + s.batch_size] for i in range(0, len(unique), s.batch_size)]
        outcomes = await gather_with_deadline([self._post(c, deadline) for c in chunks], s.batch_timeout_s)
        unique_results: list[SampleResult] = []
        for chunk, out in zip(chunks, outcomes, strict=True):
            if out is TIMED_OUT:
                msg = f"batch deadline of {s.batch_timeout_s}s passed before the reward server answered"
                unique_results += [SampleResult.failed("timeout", msg) for _ in chunk]
            elif isinstance(out, RequestFailed):
                unique_results += [
                    SampleResult.failed(
                        out.reason, out.message, retries=out.retries, latency_s=round(out.latency_s, 6)
                    )
                    for _ in chunk
                ]
            elif isinstance(out, BaseException):
                unique_results += [
                    SampleResult.failed("error", f"{type(out).__name__}: {out}") for _ in chunk
                ]
            else:
                unique_results += out
        results = []
        for k in slot:
            r = unique_results[k]
            results.append(SampleResult(r.score, r.status, r.reason, r.error, dict(r.extra)))
            self.metrics_.sample(r.reason, r.extra.get("latency_s", time.monotonic() - start))
        return results
