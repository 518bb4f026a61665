"""The ``served-classifier`` RM backend: a sequence-classification reward model served by vLLM or SGLang.

This is how verl runs a discriminative reward model: the model is served (``vllm serve RM`` runs
it as a pooling model; SGLang with ``--is-embedding``) and each sample, rendered with the reward
model's chat template, is scored through ``POST /classify`` (vLLM, SGLang) or ``POST /pooling``
(vLLM). Results have the shape of the transformers backend (:mod:`~rewardkit.backends.discriminative`):
one score per sample plus ``truncated``, ``num_tokens`` and ``rm_logit``; requests are packed
with the same token-budget batching (:func:`~rewardkit.backends.discriminative.pack_batches`).

``rollout.base_url`` is one URL or a list of replicas (``reward_model.server`` fills it with the
launched ones): each request goes to the replica with the fewest requests in flight, and a
request that fails on one replica (connection refused, 5xx, timeout) is retried on another while
the failed one stays out for ``down_s``. Without a tokenizer (``tokenizer: none``, or no local
``model_path``) the text is sent as is and its length is estimated with ``chars_per_token``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator

from rewardkit.backends.base import RMBackend
from rewardkit.backends.discriminative import pack_batches
from rewardkit.errors import ConfigError
from rewardkit.options import Options, validate_options
from rewardkit.result import SampleResult

if TYPE_CHECKING:
    from rewardkit.batch import Sample
    from rewardkit.config import RewardModelConfig


class ServedClassifierSettings(Options):
    """``reward_model.rollout`` of the ``served-classifier`` backend."""

    RENAMED: ClassVar[dict[str, str]] = {"max_in_flight": "max_concurrency"}

    base_url: list[str] = Field(description="one server root or a list of replicas")
    api: Literal["classify", "pooling"] = Field("classify", description="POST /classify or /pooling")
    model: str | None = Field(None, description="model name sent; default reward_model.model_path")
    label: int = Field(0, ge=0, description="which output of the classifier is the score")
    use_activation: bool = Field(False, description="vLLM: false returns raw logits (as verl asks)")
    tokenizer: Literal["auto", "local", "none"] = Field(
        "auto", description="auto: the local model_path's tokenizer when there is one, else none"
    )
    tokenizer_path: str | None = Field(None, description="default reward_model.model_path")
    use_chat_template: bool = Field(True, description="render prompt and response with the chat template")
    max_length: int | None = Field(None, gt=1, description="longest input in tokens (left-truncated)")
    chars_per_token: float = Field(4.0, gt=0, description="length estimate without a tokenizer")
    token_budget: int = Field(16384, gt=0, description="max padded tokens per request")
    max_batch_size: int | None = Field(None, gt=0, description="max samples per request")
    max_concurrency: int = Field(8, ge=1, description="requests in flight, all replicas together")
    request_timeout_s: float = Field(60.0, gt=0, description="timeout of one HTTP attempt")
    max_retries: int = Field(2, ge=0, description="retries of a request, each on another replica if any")
    down_s: float = Field(5.0, ge=0, description="how long a replica that failed stays out of rotation")

    @field_validator("base_url", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        urls = [v] if isinstance(v, str) else v
        if isinstance(urls, list):
            if not urls:
                raise ValueError("base_url is an empty list")
            for u in urls:
                if not isinstance(u, str) or not u.startswith(("http://", "https://")):
                    raise ValueError(f"base_url must start with http:// or https://, got {u!r}")
            return [u.rstrip("/") for u in urls]
        return v


class _Failed(Exception):
    def __init__(self, reason: str, message: str, retryable: bool):
        super().__init__(message)
        self.reason, self.retryable = reason, retryable


def _score_of(item: Any, label: int) -> float:
    """The ``label``-th number of one output: vLLM ``probs`` / ``data``, SGLang ``embedding``."""
    values = item
    if isinstance(item, dict):
        for key in ("probs", "data", "embedding", "score"):
            if key in item:
                values = item[key]
                break
    while isinstance(values, list) and values and isinstance(values[0], list):
        values = values[-1]  # token-level outputs: the last token's row
    if isinstance(values, int | float):
        values = [values]
    if not isinstance(values, list) or not values:
        raise ValueError(f"no scores in {str(item)[:120]}")
    if label >= len(values):
        raise ValueError(f"label {label} is out of range: the server returned {len(values)} output(s)")
    return float(values[label])


class ServedClassifierRM(RMBackend):
    """Scores with a served sequence classifier (see the module docstring)."""

    name: ClassVar[str] = "served-classifier"
    Options: ClassVar[type[ServedClassifierSettings]] = ServedClassifierSettings
    #: This backend routes across several replicas itself.
    accepts_url_list: ClassVar[bool] = True

    def __init__(self, config: RewardModelConfig):
        super().__init__(config)
        self.settings: ServedClassifierSettings = validate_options(
            ServedClassifierSettings,
            dict(config.rollout),
            "reward.reward_model.rollout",
            "backend 'served-classifier'",
        )
        self.model = self.settings.model or config.model_path
        if not self.model:
            raise ConfigError(
                "served-classifier: set reward_model.rollout.model (or reward_model.model_path)"
            )
        self.urls = list(self.settings.base_url)
        self.inflight = [0] * len(self.urls)
        self.down_until = [0.0] * len(self.urls)
        self.tokenizer: Any = None
        self._m: dict[str, float] = {}
        self._reset_metrics()

    def _load(self) -> None:
        s = self.settings
        path = s.tokenizer_path or self.config.model_path
        local = Path(path).is_dir() if path else False
        if s.tokenizer == "local" and not local:
            raise ConfigError(f"served-classifier: tokenizer 'local' but {path!r} is not a local directory")
        if s.tokenizer != "none" and local:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(path)

    # -- rendering -------------------------------------------------------------------------------
    def encode(self, sample: Sample) -> tuple[Any, int, bool]:
        """What is sent for one sample (token ids, or text without a tokenizer), its length, truncated."""
        tok = self.tokenizer
        if tok is None:
            text = sample.prompt_text + sample.response
            return text, max(1, math.ceil(len(text) / self.settings.chars_per_token)), False
        if self.settings.use_chat_template and getattr(tok, "chat_template", None):
            if isinstance(sample.prompt, str):
                messages = [{"role": "user", "content": sample.prompt}] if sample.prompt else []
            else:
                messages = [dict(m) for m in sample.prompt]
            messages.append({"role": "assistant", "content": sample.response})
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        else:
            text = sample.prompt_text + sample.response
        ids = list(tok(text, add_special_tokens=True)["input_ids"])
        bos = tok.bos_token_id
        if bos is not None and len(ids) >= 2 and ids[0] == bos and ids[1] == bos:
            ids = ids[1:]  # the template wrote a BOS and the tokenizer added another
        if not ids:
            raise ValueError("nothing to score: the rendered input has no tokens")
        limit = self.settings.max_length
        if limit is not None and len(ids) > limit:
            head = ids[:1] if bos is not None and ids[0] == bos else []
            return [*head, *ids[len(ids) - (limit - len(head)) :]], limit, True
        return ids, len(ids), False

    # -- routing ---------------------------------------------------------------------------------
    def _pick(self, tried: set[int]) -> int:
        now = time.monotonic()
        order = range(len(self.urls))
        up = [i for i in order if i not in tried and self.down_until[i] <= now]
        candidates = up or [i for i in order if i not in tried] or list(order)
        return min(candidates, key=lambda i: (self.inflight[i], self.down_until[i]))

    async def _post(self, session: Any, payload: dict[str, Any]) -> tuple[dict[str, Any], int]:
        import aiohttp

        s = self.settings
        tried: set[int] = set()
        last = ""
        for _attempt in range(s.max_retries + 1):
            i = self._pick(tried)
            tried.add(i)
            self.inflight[i] += 1
            self._m[f"requests/r{i}"] = self._m.get(f"requests/r{i}", 0.0) + 1
            try:
                async with session.post(f"{self.urls[i]}/{s.api}", json=payload) as resp:
                    text = await resp.text()
                    if resp.status >= 500 or resp.status in (408, 429):
                        raise _Failed("http", f"{self.urls[i]} answered {resp.status}: {text[:200]}", True)
                    if resp.status >= 400:
                        raise _Failed("http", f"{self.urls[i]} answered {resp.status}: {text[:200]}", False)
                    import json

                    return json.loads(text), i
            except _Failed as e:
                if not e.retryable:
                    raise
                last = str(e)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as e:
                last = f"{self.urls[i]}: {type(e).__name__}: {e}"
            finally:
                self.inflight[i] -= 1
            self.down_until[i] = time.monotonic() + s.down_s
            self._m["retries"] += 1
        raise _Failed("http", f"every attempt failed ({len(tried)} replica(s) tried); last: {last}", False)

    # -- scoring ---------------------------------------------------------------------------------
    async def ascore(self, samples: Sequence[Sample]) -> list[SampleResult]:
        """Score samples over HTTP; one result per sample, failures typed (``http``, ``invalid_return``, ``error``)."""
        if not samples:
            return []
        import aiohttp

        if self.state != "awake":
            await asyncio.to_thread(self.wake_up)
        results: list[SampleResult | None] = [None] * len(samples)
        good: list[tuple[int, Any, int, bool]] = []
        for pos, sample in enumerate(samples):
            try:
                good.append((pos, *self.encode(sample)))
            except Exception as e:  # noqa: BLE001 - this sample fails, the others go on
                results[pos] = SampleResult.failed(
                    "error", f"could not render or tokenize: {type(e).__name__}: {e}"
                )
        batches = pack_batches([g[2] for g in good], self.settings.token_budget, self.settings.max_batch_size)
        limit = asyncio.Semaphore(self.settings.max_concurrency)
        timeout = aiohttp.ClientTimeout(total=self.settings.request_timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:

            async def run(batch: list[int]) -> None:
                items = [good[k] for k in batch]
                async with limit:
                    await self._score_batch(session, items, results)

            await asyncio.gather(*(run(b) for b in batches))
        self._m["samples"] += len(samples)
        self._m["failed"] += sum(r is not None and r.status == "failed" for r in results)
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    async def _score_batch(
        self, session: Any, items: list[tuple[int, Any, int, bool]], results: list
    ) -> None:
        payload: dict[str, Any] = {"model": self.model, "input": [it[1] for it in items]}
        if self.settings.api == "classify":
            payload["use_activation"] = self.settings.use_activation
        start = time.perf_counter()
        try:
            reply, _replica = await self._post(session, payload)
        except _Failed as e:
            for pos, *_ in items:
                results[pos] = SampleResult.failed(e.reason, str(e))
            return
        self._m["batches"] += 1
        self._m["tokens"] += sum(it[2] for it in items)
        self._m["request_s"] += time.perf_counter() - start
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list) or len(data) != len(items):
            got = len(data) if isinstance(data, list) else "no"
            for pos, *_ in items:
                results[pos] = SampleResult.failed(
                    "invalid_return", f"the server returned {got} outputs for {len(items)} inputs"
                )
            return
        data = sorted(data, key=lambda d: d.get("index", 0) if isinstance(d, dict) else 0)
        for (pos, _x, n, truncated), item in zip(items, data, strict=True):
            extra = {"truncated": truncated, "num_tokens": n}
            try:
                raw = _score_of(item, self.settings.label)
            except (ValueError, TypeError) as e:
                results[pos] = SampleResult.failed("invalid_return", str(e), **extra)
                continue
            if not math.isfinite(raw):
                results[pos] = SampleResult.failed(
                    "invalid_return",
                    f"the reward model produced a non-finite score ({raw})",
                    rm_logit=raw,
                    **extra,
                )
            else:
                results[pos] = SampleResult.ok(raw, rm_logit=raw, **extra)

    # -- metrics ---------------------------------------------------------------------------------
    def _reset_metrics(self) -> None:
        self._m = dict.fromkeys(("samples", "batches", "tokens", "request_s", "failed", "retries"), 0.0)

    def metrics(self) -> dict[str, float]:
        """Counts since the last call: samples, requests (per replica), tokens, retries, failures."""
        m = dict(self._m)
        self._reset_metrics()
        return m
