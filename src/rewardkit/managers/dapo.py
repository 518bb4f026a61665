"""The DAPO reward manager: naive routing and scoring plus DAPO's overlong-buffer length penalty."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from pydantic import Field, StrictBool, StrictInt, StrictStr, field_validator, model_validator

from rewardkit.batch import Sample
from rewardkit.errors import ConfigError, SampleError
from rewardkit.managers.base import ManagerContext
from rewardkit.managers.naive import NaiveRewardManager
from rewardkit.options import Options
from rewardkit.result import SampleResult


class OverlongBufferOptions(Options):
    """``overlong_buffer_cfg``: DAPO's soft overlong punishment, as verl names it."""

    enable: StrictBool = Field(False, description="add the overlong penalty to successful scores")
    len: StrictInt = Field(
        0, description="buffer length in tokens before max_resp_len where the penalty ramps"
    )
    penalty_factor: float = Field(
        1.0, ge=0, description="penalty at max_resp_len (it falls linearly to -factor)"
    )
    log: StrictBool = Field(False, description="report overlong_reward and overlong in each sample's extra")

    @field_validator("penalty_factor", mode="before")
    @classmethod
    def _not_bool(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError(f"penalty_factor must be a number >= 0, got {v!r}")
        return v

    @model_validator(mode="after")
    def _positive_len(self) -> OverlongBufferOptions:
        if self.enable and self.len <= 0:
            raise ValueError(f"len must be > 0 when enable is true, got {self.len}")
        return self


class DAPOOptions(Options):
    """``reward_manager.kwargs`` of the ``dapo`` manager, as verl names them."""

    overlong_buffer_cfg: OverlongBufferOptions = Field(
        default_factory=OverlongBufferOptions,
        description="the overlong penalty (enable, len, penalty_factor, log)",
    )
    max_resp_len: StrictInt | None = Field(
        None, description="the rollout's maximum response length in tokens; required when the penalty is on"
    )
    tokenizer: StrictStr | None = Field(
        None, description="tokenizer path, to count tokens of samples that carry no response_length"
    )

    @model_validator(mode="after")
    def _lengths(self) -> DAPOOptions:
        buf = self.overlong_buffer_cfg
        if not buf.enable:
            return self
        if self.max_resp_len is None:
            raise ValueError(
                "overlong_buffer_cfg.enable is true but max_resp_len is not set "
                "(the rollout's maximum response length in tokens)"
            )
        if self.max_resp_len < buf.len:
            raise ValueError(
                f"max_resp_len ({self.max_resp_len}) must be >= overlong_buffer_cfg.len ({buf.len})"
            )
        return self


def overlong_penalty(length: int, max_resp_len: int, buffer_len: int, penalty_factor: float) -> float:
    """DAPO's soft overlong punishment: 0 up to ``max_resp_len - buffer_len`` tokens, then falling
    linearly to ``-penalty_factor`` at ``max_resp_len`` (and further below beyond it)."""
    expected = max_resp_len - buffer_len
    return min(-(length - expected) / buffer_len * penalty_factor, 0.0)


class DAPORewardManager(NaiveRewardManager):
    """Each sample to its routed scorer, then DAPO's overlong penalty added to successful scores.

    Options (``reward_manager.kwargs``), as in verl::

        overlong_buffer_cfg: {enable: true, len: 4096, penalty_factor: 1.0, log: true}
        max_resp_len: 20480
        tokenizer: /path/to/tokenizer   # only needed when samples carry no response_length

    ``penalty = min(-(length - (max_resp_len - len)) / len * penalty_factor, 0)`` is added to the
    score. ``length`` is the sample's ``response_length`` (tokens) when given, else the
    tokenizer's count of the response text. With ``log: true`` each scored sample gets
    ``overlong_reward`` and ``overlong`` in ``extra``. Failed and abstained samples are left as they are.
    """

    name = "dapo"
    Options = DAPOOptions

    def __init__(self, context: ManagerContext, **kwargs: Any):
        super().__init__(context, **kwargs)
        opts: DAPOOptions = self.options
        buf = opts.overlong_buffer_cfg
        self.enable, self.log = buf.enable, buf.log
        self.tokenizer_path = opts.tokenizer
        self._tokenizer: Any = None  # a transformers tokenizer, loaded on first use
        self._tokenizer_lock = threading.Lock()
        self.buffer_len = buf.len if buf.enable else 0
        self.penalty_factor = float(buf.penalty_factor) if buf.enable else 1.0
        self.max_resp_len = opts.max_resp_len if buf.enable else None

    async def score_rules(self, samples: Sequence[Sample]) -> list[SampleResult | None]:
        if not self.enable:
            return await super().score_rules(samples)
        missing = [s for s in samples if s.response_length is None]
        if missing and self.tokenizer_path is None:
            raise SampleError(
                missing[0].index,
                "response_length",
                "missing, and the dapo overlong penalty needs each response's length in tokens: pass "
                "response_length with the samples or set reward_manager.kwargs.tokenizer",
            )
        counted: dict[int, int] = {}
        if missing:
            lengths = await asyncio.to_thread(self._count_tokens, [s.response for s in missing])
            counted = {s.index: n for s, n in zip(missing, lengths, strict=True)}
        results = await super().score_rules(samples)
        for sample, r in zip(samples, results, strict=True):
            if r is None or r.status != "ok":
                continue
            length = sample.response_length if sample.response_length is not None else counted[sample.index]
            penalty = overlong_penalty(length, self.max_resp_len, self.buffer_len, self.penalty_factor)  # type: ignore[arg-type]
            r.score = r.score + penalty  # type: ignore[operator]
            if self.log:
                r.extra["overlong_reward"] = penalty
                r.extra["overlong"] = penalty < 0
        return results

    def _count_tokens(self, texts: list[str]) -> list[int]:
        with self._tokenizer_lock:
            if self._tokenizer is None:
                try:
                    from transformers import AutoTokenizer
                except ImportError as e:
                    raise ConfigError(
                        f"reward_manager 'dapo': loading tokenizer {self.tokenizer_path!r} needs transformers: {e}"
                    ) from None
                try:
                    self._tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_path)
                except Exception as e:
                    raise ConfigError(
                        f"reward_manager 'dapo': cannot load tokenizer {self.tokenizer_path!r}: {e}"
                    ) from None
        ids = self._tokenizer(texts, add_special_tokens=False)["input_ids"]
        return [len(x) for x in ids]
