"""The ``generative`` RM backend: an LLM judge behind an OpenAI-compatible HTTP server.

Each sample is rendered through a judge template (:mod:`~rewardkit.backends.judge_templates`),
sent to ``/v1/chat/completions`` or ``/v1/completions`` of one of the judge's replicas through
the shared :class:`~rewardkit.backends.http.HTTPCore`, and the judge's text is turned into a score
by a parser (:mod:`~rewardkit.backends.judge_parsers`), range-checked and normalised. An
unparseable or cut-off judgement is asked again (``reask``, on by default when sampling with a
temperature above 0) before it becomes ``unparseable``. Identical requests in a batch are sent
once; an optional SQLite cache (:mod:`~rewardkit.backends.judge_cache`) answers requests already
judged. Settings live in ``reward_model.rollout`` (:class:`GenerativeSettings`, docs/judge.md).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewardkit.backends.generative_settings import GenerativeSettings
from rewardkit.backends.http import (
    TIMED_OUT,
    HTTPBackend,
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

__all__ = ["GenerativeRM", "GenerativeSettings"]

#: Characters of the rendered prompt that routing is sticky on (the part a prefix cache shares).
STICKY_PREFIX_CHARS = 256


@dataclass
class _Job:
    key: str
    payload: dict[str, Any]
    truncated: int
    est_tokens: float
    prefix: str = ""  # routing key
    slot: str = ""  # what dedup groups by: the key, or key + index with dedup off


@dataclass
class _Answer:
    text: str | None = None
    retries: int = 0
    attempts: int = 0
    latency_s: float = 0.0
    cached: bool = False
    failure: tuple[str, str] | None = None
    usage: tuple[int, int] = (0, 0)
    cut_off: bool = False  # the judge stopped at max_tokens (finish_reason "length")
    replica: str = ""
    kind: str = "ok"  # what the last attempt ran into
    reasks: int = 0


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
    ``attempts``, ``reasks``, ``replica``, ``final_reason``, ``cached``, ``truncated``.
    """

    name = "generative"
    Options = GenerativeSettings

    def __init__(self, config: RewardModelConfig):
        self.settings: GenerativeSettings = parse_settings(
            GenerativeSettings, dict(config.rollout), "generative"
        )
        super().__init__(config, self.settings)
        s = self.settings
        model = s.model or config.model_path
        if not model:
            raise ConfigError("generative judge: set reward_model.rollout.model (or reward_model.model_path)")
        self.model: str = model
        self.template = get_template(s.template)
        self.parse = build_parser(s.parser if s.parser is not None else self.template.parser)
        self.score_range = s.score_range if "score_range" in s.model_fields_set else self.template.score_range
        self.path = "/v1/chat/completions" if s.api == "chat" else "/v1/completions"
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
        prefix = ((rendered.system or "") + "\n" + rendered.user)[:STICKY_PREFIX_CHARS]
        return _Job(key, payload, rendered.truncated, est, prefix)

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

    async def _ask_once(self, job: _Job, deadline: float | None) -> _Answer:
        reply = await self.http.post_json(
            self.path, job.payload, cost_tokens=job.est_tokens, deadline=deadline, key=job.prefix
        )
        try:
            text, cut_off = self._text_of(reply.data)
        except ValueError as e:
            raise RequestFailed(
                "http", str(e), reply.retries, reply.latency_s, reply.replica, "no_text"
            ) from None
        usage = reply.data.get("usage") if isinstance(reply.data, dict) else None
        pt = ct = 0
        if isinstance(usage, dict):  # odd usage values cost the accounting, never the judgement
            pt, ct = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
            self.metrics_.add(prompt_tokens=pt, completion_tokens=ct)
            self.http.settle_tokens(job.est_tokens, pt + ct)
        return _Answer(
            text=text,
            retries=reply.retries,
            attempts=reply.attempts,
            latency_s=reply.latency_s,
            usage=(pt, ct),
            cut_off=cut_off,
            replica=reply.replica,
        )

    async def _ask(self, job: _Job, deadline: float | None) -> _Answer:
        """Ask the judge, and ask again (up to ``max_reasks``) while the answer is unparseable or cut off."""
        start = time.monotonic()
        spent = 0  # attempts of earlier asks
        budget = self.settings.reasks()
        for n in range(budget + 1):
            try:
                ans = await self._ask_once(job, deadline)
            except RequestFailed as e:
                e.retries += spent
                e.latency_s = time.monotonic() - start if spent else e.latency_s
                raise
            ans.attempts += spent
            ans.retries = ans.attempts - 1
            ans.reasks = n
            ans.latency_s = time.monotonic() - start if spent else ans.latency_s
            problem = (
                "cut_off" if ans.cut_off else ("unparseable" if self._score(ans.text or "")[1] else None)
            )
            ans.kind = problem or "ok"
            late = deadline is not None and time.monotonic() >= deadline
            if problem is None or n == budget or late:
                return ans
            spent = ans.attempts
            self.metrics_.add(reasks=1)
        raise AssertionError("unreachable")  # pragma: no cover

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
        start = time.monotonic()
        deadline = None if self.settings.batch_timeout_s is None else start + self.settings.batch_timeout_s
        results: list[SampleResult | None] = [None] * len(samples)
        jobs = self._jobs(samples, results)
        live = [j for j in jobs if j is not None]
        unique = {j.slot: j for j in unique_slots(live, key=lambda j: j.slot)[0]}
        answers = await self._cached_answers(unique)
        todo = [j for slot, j in unique.items() if slot not in answers]
        self.metrics_.add(
            cache_hits=len(unique) - len(todo), dedup_saved=sum(j is not None for j in jobs) - len(unique)
        )
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        outcomes = await gather_with_deadline([self._ask(j, deadline) for j in todo], remaining)
        fresh: list[tuple[str, str, CachedJudgement]] = []
        for job, out in zip(todo, outcomes, strict=True):
            ans = answers[job.slot] = self._answer_of(out, start)
            # Only answers that score are kept: an unparseable or cut-off one is asked again next time.
            if ans.failure is None and ans.kind == "ok":
                fresh.append((job.key, self.model, CachedJudgement(ans.text or "", *ans.usage)))
        if self.cache is not None and fresh:
            await self._cache_call(self.cache.put_many, fresh)
        return self._finish(jobs, answers, results)

    def _jobs(self, samples: Sequence[Sample], results: list[SampleResult | None]) -> list[_Job | None]:
        """One request per sample; a sample whose request cannot be built gets its failure in ``results``."""
        jobs: list[_Job | None] = [None] * len(samples)
        for i, sample in enumerate(samples):
            try:
                job = jobs[i] = self._request(sample)
                job.slot = job.key if self.settings.dedup else f"{job.key}:{i}"
            except TemplateFieldMissing as e:
                results[i] = SampleResult.failed("error", str(e))
            except PromptTooLong as e:
                results[i] = SampleResult.failed("input_too_large", str(e))
            except Exception as e:  # noqa: BLE001 - one odd sample must not take the batch down
                results[i] = SampleResult.failed(
                    "error", f"cannot build the judge request: {type(e).__name__}: {e}"
                )
        return jobs

    async def _cached_answers(self, unique: dict[str, _Job]) -> dict[str, _Answer]:
        answers: dict[str, _Answer] = {}
        cache = self.cache
        if cache is not None and unique:
            hits = await self._cache_call(cache.get_many, [j.key for j in unique.values()]) or {}
            for slot, j in unique.items():
                if j.key in hits:
                    answers[slot] = _Answer(text=hits[j.key].text, cached=True, kind="cached")
        return answers

    def _answer_of(self, out: Any, start: float) -> _Answer:
        if out is TIMED_OUT:
            msg = f"batch deadline of {self.settings.batch_timeout_s}s passed before the judge answered"
            return _Answer(failure=("timeout", msg), latency_s=time.monotonic() - start, kind="deadline")
        if isinstance(out, RequestFailed):
            return _Answer(
                failure=(out.reason, out.message),
                retries=out.retries,
                attempts=out.attempts,
                latency_s=out.latency_s,
                replica=out.replica,
                kind=out.kind,
            )
        if isinstance(out, BaseException):
            return _Answer(failure=("error", f"{type(out).__name__}: {out}"), kind="error")
        return out

    def _finish(
        self, jobs: list[_Job | None], answers: dict[str, _Answer], results: list[SampleResult | None]
    ) -> list[SampleResult]:
        for i, job in enumerate(jobs):
            if job is None:
                self.metrics_.sample(results[i].reason, None)  # type: ignore[union-attr]
                continue
            ans = answers[job.slot]
            res = results[i] = self._result(job, ans)
            # a cache hit has no request latency: left out, it does not drag the percentiles to 0
            self.metrics_.sample(res.reason, None if ans.cached else ans.latency_s)
            if job.truncated:
                self.metrics_.add(truncated=1)
            if ans.cut_off:
                self.metrics_.add(judge_cut_off=1)
        return results  # type: ignore[return-value]

    def _result(self, job: _Job, ans: _Answer) -> SampleResult:
        extra: dict[str, Any] = {
            "latency_s": round(ans.latency_s, 6),
            "retries": ans.retries,
            "attempts": ans.attempts,
            "reasks": ans.reasks,
            "replica": ans.replica,
            "final_reason": ans.kind,
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
