"""The ``generative`` RM backend: an LLM judge behind an OpenAI-compatible HTTP server.

Each sample is rendered through a judge template (:mod:`~rewardkit.backends.judge_templates`),
sent to ``/v1/chat/completions`` or ``/v1/completions`` through the shared
:class:`~rewardkit.backends.http.HTTPCore`, and the judge's text is turned into a score by a
parser (:mod:`~rewardkit.backends.judge_parsers`), range-checked and normalised. Identical
requests in a batch are sent once; an optional SQLite cache (:mod:`~rewardkit.backends.judge_cache`)
answers requests already judged. Settings live in ``reward_model.rollout`` (see
:class:`GenerativeSettings` and docs/judge.md).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from rewardkit.backends.http import (
    TIMED_OUT,
    HTTPBackend,
    HTTPSettings,
    RequestFailed,
    gather_with_deadline,
    parse_settings,
)
from rewardkit.backends.judge_cache import CachedJudgement, JudgeCache, cache_key
from rewardkit.backends.judge_parsers import ParseError, build_parser
from rewardkit.backends.judge_templates import PromptTooLong, TemplateFieldMissing, get_template, render
from rewardkit.batch import Sample
from rewardkit.config import RewardModelConfig
from rewardkit.errors import ConfigError
from rewardkit.result import SampleResult
from rewardkit.runtime.dedup import unique_slots


class GenerativeSettings(HTTPSettings):
    """``reward_model.rollout`` for the ``generative`` backend (HTTP settings plus the judge's)."""

    model: str | None = Field(
        None, description="model name sent to the server; default reward_model.model_path"
    )
    api: Literal["chat", "completions"] = Field("chat", description="/v1/chat/completions or /v1/completions")
    temperature: float = Field(0.0, ge=0)
    max_tokens: int = Field(512, ge=1, description="judge's answer length (also reserved from context)")
    top_p: float | None = Field(None, gt=0, le=1)
    stop: list[str] | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict, description="merged into every request body")
    template: str = Field("rubric", description="built-in template name or a literal template")
    system_prompt: str | None = Field(None, description="overrides the template's system text")
    parser: str | dict[str, Any] | None = Field(None, description="default: the template's parser")
    score_range: tuple[float, float] | None = Field(None, description="default: the template's range")
    normalize_to: tuple[float, float] | None = Field((0.0, 1.0), description="null keeps the raw score")
    context_length: int | None = Field(None, gt=0, description="judge context in tokens")
    chars_per_token: float = Field(3.0, gt=0, description="used with context_length to budget characters")
    max_prompt_chars: int | None = Field(
        None, gt=0, description="character budget (overrides context_length)"
    )
    truncate: Literal["middle", "tail"] = "middle"
    cache_path: str | None = Field(None, description="SQLite file caching judge answers")
    dedup: bool = True

    @model_validator(mode="after")
    def _check_judge(self):
        if self.context_length is not None and self.context_length <= self.max_tokens:
            raise ValueError(
                f"context_length ({self.context_length}) must exceed max_tokens ({self.max_tokens})"
            )
        if self.score_range is not None and not self.score_range[0] < self.score_range[1]:
            raise ValueError(f"score_range must be [low, high] with low < high, got {list(self.score_range)}")
        return self

    def prompt_budget(self) -> int | None:
        """Characters the rendered prompt may take."""
        if self.max_prompt_chars is not None:
            return self.max_prompt_chars
        if self.context_length is not None:
            return int((self.context_length - self.max_tokens) * self.chars_per_token)
        return None


@dataclass
class _Job:
    key: str
    payload: dict[str, Any]
    truncated: int
    est_tokens: float
    slot: str = ""  # what dedup groups by: the key, or key + index with dedup off


@dataclass
class _Answer:
    text: str | None = None
    retries: int = 0
    latency_s: float = 0.0
    cached: bool = False
    failure: tuple[str, str] | None = None
    usage: tuple[int, int] = (0, 0)
    cut_off: bool = False  # the judge stopped at max_tokens (finish_reason "length")


def _count(value: Any) -> int:
    """A token count from a reply's ``usage``; 0 when absent or not a number."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


class GenerativeRM(HTTPBackend):
    """An LLM judge over HTTP: one request per distinct judge prompt, parsed into a score.

    ``ascore`` never raises for one sample: each ends ``ok`` or ``failed`` with reason ``http``,
    ``timeout``, ``circuit_open``, ``unparseable``, ``input_too_large`` or ``error`` (a template
    field the sample lacks). Per-sample extra: ``judge_text``, ``latency_s``, ``retries``,
    ``cached``, ``truncated`` (characters cut from the response).
    """

    name = "generative"

    def __init__(self, config: RewardModelConfig):
        self.settings: GenerativeSettings = parse_settings(
            GenerativeSettings, dict(config.rollout), "generative"
        )
        super().__init__(config, self.settings)
        s = self.settings
        self.model = s.model or config.model_path
        if not self.model:
            raise ConfigError("generative judge: set reward_model.rollout.model (or reward_model.model_path)")
        self.template = get_template(s.template)
        self.parse = build_parser(s.parser if s.parser is not None else self.template.parser)
        self.score_range = s.score_range if "score_range" in s.model_fields_set else self.template.score_range
        self.url = s.base_url.rstrip("/") + ("/v1/chat/completions" if s.api == "chat" else "/v1/completions")
        self._cache: JudgeCache | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    @property
    def cache(self) -> JudgeCache | None:
        """The persistent cache, opened on first use (``None`` without ``cache_path`` or if it cannot open)."""
        if self._cache is None and self.settings.cache_path:
            try:
                self._cache = JudgeCache(self.settings.cache_path)
            except (sqlite3.Error, OSError) as e:
                self.metrics_.add(cache_errors=1)
                warnings.warn(
                    f"judge cache {self.settings.cache_path} cannot be opened: {e}; scoring without it",
                    stacklevel=2,
                )
        return self._cache

    def close(self) -> None:
        """Close the HTTP session and the cache (idempotent)."""
        if self._cache is not None:
            self._cache.close()
            self._cache = None
        super().close()

    # -- requests ---------------------------------------------------------------------------------
    def _request(self, sample: Sample) -> _Job:
        s = self.settings
        rendered = render(
            self.template,
            sample,
            max_chars=s.prompt_budget(),
            truncate=s.truncate,
            system_override=s.system_prompt,
        )
        payload: dict[str, Any] = {
            "model": self.model,
            "temperature": s.temperature,
            "max_tokens": s.max_tokens,
        }
        for k in ("top_p", "stop", "seed"):
            v = getattr(s, k)
            if v is not None:
                payload[k] = v
        payload.update(s.extra_body)
        if s.api == "chat":
            messages = [{"role": "system", "content": rendered.system}] if rendered.system else []
            messages.append({"role": "user", "content": rendered.user})
            payload["messages"] = messages
        else:
            payload["prompt"] = f"{rendered.system}\n\n{rendered.user}" if rendered.system else rendered.user
        key = cache_key({"api": s.api, "template": self.template.identity, "request": payload})
        est = rendered.chars / s.chars_per_token + s.max_tokens
        return _Job(key, payload, rendered.truncated, est)

    def _text_of(self, data: Any) -> tuple[str, bool]:
        """The completion text, and whether the judge was cut off at ``max_tokens``."""
        try:
            choice = data["choices"][0]
            text = choice["message"]["content"] if self.settings.api == "chat" else choice["text"]
        except (KeyError, IndexError, TypeError):
            raise ValueError(f"the judge's reply has no completion text: {str(data)[:200]!r}") from None
        if not isinstance(text, str):
            raise ValueError(f"the judge's completion text is {type(text).__name__}, not a string")
        return text, isinstance(choice, dict) and choice.get("finish_reason") == "length"

    async def _ask(self, job: _Job, deadline: float | None) -> _Answer:
        reply = await self.http.post_json(
            self.url, job.payload, cost_tokens=job.est_tokens, deadline=deadline
        )
        try:
            text, cut_off = self._text_of(reply.data)
        except ValueError as e:
            raise RequestFailed("http", str(e), reply.retries, reply.latency_s) from None
        usage = reply.data.get("usage") if isinstance(reply.data, dict) else None
        pt = ct = 0
        if isinstance(usage, dict):  # odd usage values cost the accounting, never the judgement
            pt, ct = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
            self.metrics_.add(prompt_tokens=pt, completion_tokens=ct)
            self.http.settle_tokens(job.est_tokens, pt + ct)
        return _Answer(
            text=text, retries=reply.retries, latency_s=reply.latency_s, usage=(pt, ct), cut_off=cut_off
        )

    async def _cache_call(self, fn, arg):
        """A cache read or write; a broken cache file warns and counts (``cache/errors``) but scores on."""
        try:
            return await asyncio.to_thread(fn, arg)
        except sqlite3.Error as e:
            self.metrics_.add(cache_errors=1)
            warnings.warn(f"judge cache {self.settings.cache_path}: {e}; scoring without it", stacklevel=2)
            return None

    # -- scoring ----------------------------------------------------------------------------------
    def _score(self, text: str) -> tuple[float | None, str | None]:
        try:
            raw = self.parse(text)
        except ParseError as e:
            return None, str(e)
        if self.score_range is not None:
            lo, hi = self.score_range
            if not lo <= raw <= hi:
                return None, f"judge score {raw:g} is outside score_range [{lo:g}, {hi:g}]"
            if self.settings.normalize_to is not None:
                a, b = self.settings.normalize_to
                return a + (raw - lo) * (b - a) / (hi - lo), None
        return raw, None

    async def ascore(self, samples: Sequence[Sample]) -> list[SampleResult]:
        """Judge every sample; one result per sample, in order."""
        if self.state == "closed":
            raise RuntimeError("GenerativeRM is closed")
        if not samples:
            return []
        s = self.settings
        start = time.monotonic()
        deadline = None if s.deadline_s is None else start + s.deadline_s
        results: list[SampleResult | None] = [None] * len(samples)
        jobs: list[_Job | None] = [None] * len(samples)
        for i, sample in enumerate(samples):
            try:
                job = jobs[i] = self._request(sample)
                job.slot = job.key if s.dedup else f"{job.key}:{i}"
            except TemplateFieldMissing as e:
                results[i] = SampleResult.failed("error", str(e))
            except PromptTooLong as e:
                results[i] = SampleResult.failed("input_too_large", str(e))
            except Exception as e:  # noqa: BLE001 - one odd sample must not take the batch down
                results[i] = SampleResult.failed(
                    "error", f"cannot build the judge request: {type(e).__name__}: {e}"
                )

        live = [j for j in jobs if j is not None]
        unique = {j.slot: j for j in unique_slots(live, key=lambda j: j.slot)[0]}
        n_jobs = sum(j is not None for j in jobs)
        answers: dict[str, _Answer] = {}
        cache = self.cache
        if cache is not None and unique:
            hits = await self._cache_call(cache.get_many, [j.key for j in unique.values()]) or {}
            for slot, j in unique.items():
                if j.key in hits:
                    answers[slot] = _Answer(text=hits[j.key].text, cached=True)
        todo = [j for slot, j in unique.items() if slot not in answers]
        self.metrics_.add(cache_hits=len(unique) - len(todo), dedup_saved=n_jobs - len(unique))
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        outcomes = await gather_with_deadline([self._ask(j, deadline) for j in todo], remaining)
        fresh: list[tuple[str, str, CachedJudgement]] = []
        for job, out in zip(todo, outcomes, strict=True):
            if out is TIMED_OUT:
                answers[job.slot] = _Answer(
                    failure=(
                        "timeout",
                        f"batch deadline of {s.deadline_s}s passed before the judge answered",
                    ),
                    latency_s=time.monotonic() - start,
                )
            elif isinstance(out, RequestFailed):
                answers[job.slot] = _Answer(
                    failure=(out.reason, out.message), retries=out.retries, latency_s=out.latency_s
                )
            elif isinstance(out, BaseException):
                answers[job.slot] = _Answer(failure=("error", f"{type(out).__name__}: {out}"))
            else:
                answers[job.slot] = out
                # Only answers that score are kept: an unparseable or cut-off one is asked again next time.
                if not out.cut_off and self._score(out.text or "")[1] is None:
                    fresh.append((job.key, self.model, CachedJudgement(out.text or "", *out.usage)))
        if cache is not None and fresh:
            await self._cache_call(cache.put_many, fresh)

        for i, job in enumerate(jobs):
            if job is None:
                self.metrics_.sample(results[i].reason, None)  # type: ignore[union-attr]
                continue
            ans = answers[job.slot]
            results[i] = self._result(job, ans)
            # a cache hit has no request latency: left out, it does not drag the percentiles to 0
            self.metrics_.sample(results[i].reason, None if ans.cached else ans.latency_s)  # type: ignore[union-attr]
            if job.truncated:
                self.metrics_.add(truncated=1)
            if ans.cut_off:
                self.metrics_.add(judge_cut_off=1)
        return results  # type: ignore[return-value]

    def _result(self, job: _Job, ans: _Answer) -> SampleResult:
        extra = {
            "latency_s": round(ans.latency_s, 6),
            "retries": ans.retries,
            "cached": ans.cached,
            "truncated": job.truncated,
        }
        if ans.failure is not None:
            return SampleResult.failed(ans.failure[0], ans.failure[1], **extra)
        extra["judge_text"] = ans.text
        extra["judge_cut_off"] = ans.cut_off
        score, problem = self._score(ans.text or "")
        if problem is not None:
            return SampleResult.failed("unparseable", problem, **extra)
        return SampleResult.ok(score, **extra)  # type: ignore[arg-type]
