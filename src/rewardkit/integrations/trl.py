"""Reward functions for TRL's ``GRPOTrainer(reward_funcs=...)``.

>>> from rewardkit.integrations.trl import RewardFunction
>>> reward = RewardFunction({"custom_reward_function": {"path": "my_reward.py"}}, name="accuracy")  # doctest: +SKIP
>>> trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=dataset)  # doctest: +SKIP

TRL calls ``reward(prompts=..., completions=..., completion_ids=..., **columns)`` where
``completions`` are strings or conversational messages and ``columns`` are the dataset's other
columns (one value per completion) plus TRL's own keyword arguments (``trainer_state``,
``log_metric``, ...). A :class:`RewardFunction` turns each completion into a rewardkit sample,
scores the batch through a lazily created :class:`~rewardkit.engine.RewardEngine`, and returns one
float per completion, or ``None`` where rewardkit abstained or the sample failed (TRL reads
``None`` as "no opinion"; the failure counts are logged through TRL's ``log_metric``). A config
that sets ``failure_score`` / ``abstain_score`` gets that number instead of ``None``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rewardkit.config import RewardConfig, load_config

if TYPE_CHECKING:
    from rewardkit.engine import RewardEngine
    from rewardkit.result import RewardResult

#: Keyword arguments TRL adds itself; never treated as dataset columns.
TRL_KWARGS = frozenset({"trainer_state", "log_extra", "log_metric", "environments", "completion_ids"})
#: Sample fields that a dataset column can fill directly.
SAMPLE_FIELDS = ("ground_truth", "data_source", "extra_info", "uid", "reward_model")


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the ``text`` parts of a multimodal list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text":
                parts.append(str(part.get("text", "")))
        return "".join(parts)
    return str(content)


def completion_text(completion: Any) -> str:
    """The response text of one TRL completion.

    A string is returned as is. Conversational completions (a list of message dicts) give the
    content of their *last* assistant message (after tool calls, that is the final answer); a
    list without assistant messages gives all contents joined by newlines.
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return content_text(completion.get("content"))
    if isinstance(completion, Sequence):
        messages = [m for m in completion if isinstance(m, Mapping)]
        assistant = [m for m in messages if m.get("role") == "assistant"]
        if assistant:
            return content_text(assistant[-1].get("content"))
        return "\n".join(content_text(m.get("content")) for m in messages)
    raise TypeError(f"a TRL completion must be a string or chat messages, got {type(completion).__name__}")


def _prompt(prompt: Any) -> Any:
    if prompt is None or isinstance(prompt, str):
        return prompt or ""
    if isinstance(prompt, Sequence):
        return [
            {"role": m.get("role", "user"), "content": content_text(m.get("content"))}
            if isinstance(m, Mapping)
            else {"role": "user", "content": str(m)}
            for m in prompt
        ]
    return str(prompt)


class RewardFunction:
    """A picklable TRL reward function backed by a rewardkit engine.

    :param config: a rewardkit config (dict, YAML path or :class:`~rewardkit.config.RewardConfig`).
    :param name: the name TRL logs it under (``rewards/<name>/mean``).
    :param data_source: data source for samples whose dataset has no ``data_source`` column.
    :param columns: dataset column for each sample field when the names differ, e.g.
        ``{"ground_truth": "answer"}``. Other dataset columns go into ``extra_info``.

    The engine is created on the first call and dropped when pickled (TRL and ``accelerate``
    may copy reward functions into other processes); the copy builds its own.
    """

    def __init__(
        self,
        config: RewardConfig | dict[str, Any] | str | None = None,
        *,
        name: str = "rewardkit",
        data_source: str | None = None,
        columns: Mapping[str, str] | None = None,
    ):
        self.config = load_config(config)
        self.__name__ = name
        self.data_source = data_source
        self.columns = {f: f for f in SAMPLE_FIELDS}
        self.columns.update(columns or {})
        unknown = sorted(set(self.columns) - set(SAMPLE_FIELDS))
        if unknown:
            raise ValueError(f"columns: unknown sample field(s) {unknown}; known: {', '.join(SAMPLE_FIELDS)}")
        self._engine: RewardEngine | None = None
        self._lock = threading.Lock()
        self.last_result: RewardResult | None = None

    def __repr__(self) -> str:
        return f"RewardFunction(name={self.__name__!r})"

    # -- pickling: the engine (threads, workers) stays behind ------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_engine"] = None
        state["_lock"] = None
        state["last_result"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def engine(self) -> RewardEngine:
        """The engine (created on first use)."""
        with self._lock:
            if self._engine is None:
                from rewardkit.engine import RewardEngine

                self._engine = RewardEngine(self.config)
            return self._engine

    def close(self) -> None:
        """Stop the engine's workers (a later call starts a new engine)."""
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()

    # -- the TRL call ----------------------------------------------------------------------------
    def records(
        self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any
    ) -> list[dict[str, Any]]:
        """The rewardkit sample records for one TRL call (exposed for testing and debugging)."""
        n = len(completions)
        if len(prompts) != n:
            raise ValueError(f"TRL passed {len(prompts)} prompts for {n} completions")
        completion_ids = columns.get("completion_ids")
        field_of = {col: f for f, col in self.columns.items()}
        per_row: dict[str, Sequence[Any]] = {}
        for key, values in columns.items():
            if key in TRL_KWARGS or key in ("prompts", "completions"):
                continue
            if isinstance(values, Sequence) and not isinstance(values, str | bytes) and len(values) == n:
                per_row[key] = values
        out = []
        for i in range(n):
            rec: dict[str, Any] = {"prompt": _prompt(prompts[i]), "response": completion_text(completions[i])}
            extra: dict[str, Any] = {}
            for key, values in per_row.items():
                f = field_of.get(key)
                if f is None:
                    extra[key] = values[i]
                else:
                    rec[f] = values[i]
            if rec.get("extra_info") is None:
                rec["extra_info"] = {}
            elif isinstance(rec["extra_info"], Mapping):
                rec["extra_info"] = dict(rec["extra_info"])
            if isinstance(rec["extra_info"], dict):
                for k, v in extra.items():
                    rec["extra_info"].setdefault(k, v)
            if rec.get("data_source") is None and self.data_source is not None:
                rec["data_source"] = self.data_source
            if completion_ids is not None and i < len(completion_ids) and completion_ids[i] is not None:
                rec["response_length"] = len(completion_ids[i])
            out.append(rec)
        return out

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any
    ) -> list[float | None]:
        """Score TRL's completions: one float per completion, ``None`` where rewardkit has no score."""
        result = self.engine.compute(self.records(prompts, completions, **columns))
        self.last_result = result
        log_metric = columns.get("log_metric")
        if callable(log_metric):
            log_metric(f"rewardkit/{self.__name__}/num_failed", float(result.num_failed))
            log_metric(
                f"rewardkit/{self.__name__}/num_abstained",
                float(sum(s == "abstained" for s in result.status)),
            )
        log_extra = columns.get("log_extra")
        if callable(log_extra):
            log_extra(f"{self.__name__}/status", list(result.status))
        return [None if math.isnan(s) else s for s in result.scores]


def reward_function(
    config: RewardConfig | dict[str, Any] | str | None = None, *, name: str = "rewardkit", **kwargs: Any
) -> RewardFunction:
    """Shorthand for :class:`RewardFunction` (``reward_funcs=[reward_function("config.yaml")]``)."""
    return RewardFunction(config, name=name, **kwargs)
