"""The DAPO reward manager: naive routing and scoring plus DAPO's overlong-buffer length penalty."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from rewardkit.batch import Sample
from rewardkit.errors import ConfigError, SampleError
from rewardkit.managers.base import ManagerContext
from rewardkit.managers.naive import NaiveRewardManager
from rewardkit.result import SampleResult

#: Options of the DAPO manager (``reward_manager.kwargs``), as verl names them.
KWARGS = ("overlong_buffer_cfg", "max_resp_len", "tokenizer")
#: Keys of ``overlong_buffer_cfg``.
BUFFER_KEYS = ("enable", "len", "penalty_factor", "log")


def overlong_penalty(length: int, max_resp_len: int, buffer_len: int, penalty_factor: float) -> float:
    """DAPO's soft overlong punishment: 0 up to ``max_resp_len - buffer_len`` tokens, then falling
    linearly to ``-penalty_factor`` at ``max_resp_len`` (and further below beyond it)."""
    expected = max_resp_len - buffer_len
    return min(-(length - expected) / buffer_len * penalty_factor, 0.0)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"reward_manager 'dapo': {what} must be an integer, got {value!r}")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"reward_manager 'dapo': {what} must be true or false, got {value!r}")
    return value


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

    def __init__(self, context: ManagerContext, **kwargs: Any):
        unknown = sorted(set(kwargs) - set(KWARGS))
        if unknown:
            raise ConfigError(
                f"reward_manager 'dapo': unknown option(s) {', '.join(unknown)}; known: {', '.join(KWARGS)}"
            )
        super().__init__(context)
        cfg = kwargs.get("overlong_buffer_cfg") or {}
        if not isinstance(cfg, Mapping):
            raise ConfigError(f"reward_manager 'dapo': overlong_buffer_cfg must be a mapping, got {cfg!r}")
        bad = sorted(set(cfg) - set(BUFFER_KEYS))
        if bad:
            raise ConfigError(
                f"reward_manager 'dapo': unknown overlong_buffer_cfg key(s) {', '.join(bad)}; "
                f"known: {', '.join(BUFFER_KEYS)}"
            )
        self.enable = _bool(cfg.get("enable", False), "overlong_buffer_cfg.enable")
        self.log = _bool(cfg.get("log", False), "overlong_buffer_cfg.log")
        self.tokenizer_path = kwargs.get("tokenizer")
        if self.tokenizer_path is not None and not isinstance(self.tokenizer_path, str):
            raise ConfigError(f"reward_manager 'dapo': tokenizer must be a path, got {self.tokenizer_path!r}")
        self._tokenizer: Any = None  # a transformers tokenizer, loaded on first use
        self._tokenizer_lock = threading.Lock()
        self.buffer_len = 0
        self.penalty_factor = 1.0
        self.max_resp_len = None
        if not self.enable:
            return
        self.buffer_len = _int(cfg.get("len", 0), "overlong_buffer_cfg.len")
        factor = cfg.get("penalty_factor", 1.0)
        if isinstance(factor, bool) or not isinstance(factor, int | float) or factor < 0:
            raise ConfigError(
                f"reward_manager 'dapo': overlong_buffer_cfg.penalty_factor must be a number >= 0, got {factor!r}"
            )
        self.penalty_factor = float(factor)
        if kwargs.get("max_resp_len") is None:
            raise ConfigError(
                "reward_manager 'dapo': overlong_buffer_cfg.enable is true but max_resp_len is not set "
                "(the rollout's maximum response length in tokens)"
            )
        self.max_resp_len = _int(kwargs["max_resp_len"], "max_resp_len")
        if self.buffer_len <= 0:
            raise ConfigError(
                f"reward_manager 'dapo': overlong_buffer_cfg.len must be > 0, got {self.buffer_len}"
            )
        if self.max_resp_len < self.buffer_len:
            raise ConfigError(
                f"reward_manager 'dapo': max_resp_len ({self.max_resp_len}) must be >= "
                f"overlong_buffer_cfg.len ({self.buffer_len})"
            )

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
