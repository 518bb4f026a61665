"""Reward functions for TRL's ``GRPOTrainer(reward_funcs=...)``.

>>> from rewardkit.integrations.trl import AsyncRewardFunction, RewardFunction
>>> reward = RewardFunction({"custom_reward_function": {"path": "my_reward.py"}}, name="accuracy")  # doctest: +SKIP
>>> judge = AsyncRewardFunction("judge.yaml", name="judge")  # TRL awaits async ones concurrently  # doctest: +SKIP
>>> trainer = GRPOTrainer(model=..., reward_funcs=[reward, judge], train_dataset=dataset)  # doctest: +SKIP

TRL calls ``reward(prompts=..., completions=..., completion_ids=..., **columns)`` where
``completions`` are strings or conversational messages and ``columns`` are the dataset's other
columns (one value per completion) plus TRL's own keyword arguments (``trainer_state``,
``log_metric``, ``log_extra``, ...). A :class:`RewardFunction` turns each completion into a
rewardkit sample, scores the batch through a :class:`~rewardkit.engine.RewardEngine` shared by
every function built from the same config in this process, and returns one float per completion,
or ``None`` where rewardkit abstained or the sample failed (TRL reads ``None`` as "no opinion"). A
config that sets ``failure_score`` / ``abstain_score`` gets that number instead of ``None``.

What reaches TRL's logs, per call: metrics through ``log_metric`` (``rewardkit/<name>/num_failed``,
``num_abstained``, ``failed/<reason>``, ``component/<c>/mean``, the reward model's ``rm/...``
counters and latencies, ``timing/total_s``), and per-sample columns of the completions table
through ``log_extra`` (``<name>/status``, ``reason``, ``error``, ``acc``, ``pred``, the
``reward.extra_keys``, components and ``extra``: the same columns on every call). A batch with
failures also logs a warning (logger ``rewardkit.trl``) with the counts by reason and the first
errors.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rewardkit.config import RewardConfig, load_config
from rewardkit.inputs import completion_text, content_text  # noqa: F401 - re-exported
from rewardkit.integrations.sample_info import info_keys, sample_info

if TYPE_CHECKING:
    from rewardkit.engine import RewardEngine
    from rewardkit.result import RewardResult

logger = logging.getLogger("rewardkit.trl")

#: Keyword arguments TRL adds itself; never treated as dataset columns.
TRL_KWARGS = frozenset({"trainer_state", "log_extra", "log_metric", "environments", "completion_ids"})
#: Sample fields that a dataset column can fill directly.
SAMPLE_FIELDS = ("ground_truth", "data_source", "extra_info", "uid", "reward_model")
#: How many recent batches a shared engine remembers, so that reward functions built from one
#: config (e.g. one per component) score a training step's batch once between them.
_MEMO_SIZE = 8


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


class _SharedEngine:
    """One engine per config in this process, and the batches it scored for the current step."""

    def __init__(self, config: RewardConfig):
        from rewardkit.engine import RewardEngine

        self.engine = RewardEngine(config)
        self._lock = threading.Lock()
        self._memo: OrderedDict[str, concurrent.futures.Future] = OrderedDict()

    def submit(self, records: list[dict[str, Any]], step: Any) -> concurrent.futures.Future:
        """The engine's result for ``records`` as a future (shared with any identical call in ``step``)."""
        if step is None:
            return self.engine.submit(records)
        key = json.dumps([step, records], sort_keys=True, default=repr)
        with self._lock:
            fut = self._memo.get(key)
            if fut is None:
                fut = self._memo[key] = self.engine.submit(records)
                while len(self._memo) > _MEMO_SIZE:
                    self._memo.popitem(last=False)
            return fut


_SHARED: dict[str, _SharedEngine] = {}
_SHARED_LOCK = threading.Lock()


def _shared(config: RewardConfig) -> _SharedEngine:
    key = json.dumps(config.to_dict(), sort_keys=True)
    with _SHARED_LOCK:
        entry = _SHARED.get(key)
        if entry is None:
            entry = _SHARED[key] = _SharedEngine(config)
        return entry


def _drop_shared(config: RewardConfig) -> None:
    key = json.dumps(config.to_dict(), sort_keys=True)
    with _SHARED_LOCK:
        entry = _SHARED.pop(key, None)
    if entry is not None:
        entry.engine.close()


def close_engines() -> None:
    """Close every engine the TRL reward functions of this process share (later calls start new ones)."""
    with _SHARED_LOCK:
        entries = list(_SHARED.values())
        _SHARED.clear()
    for entry in entries:
        entry.engine.close()


class RewardFunction:
    """A picklable TRL reward function backed by a rewardkit engine.

    :param config: a rewardkit config (dict, YAML path or :class:`~rewardkit.config.RewardConfig`).
    :param name: the name TRL logs it under (``rewards/<name>/mean``).
    :param data_source: data source for samples whose dataset has no ``data_source`` column.
    :param columns: dataset column for each sample field when the names differ, e.g.
        ``{"ground_truth": "answer"}``. Other dataset columns go into ``extra_info``.
    :param component: return this component's value (of a composite ``reward.scorers``) instead
        of the total; several functions of one config, one per component, score each batch once.

    Functions built from equal configs share one engine (and its worker pool) in this process.
    It is created on first use and left behind when pickled (TRL and ``accelerate`` may copy
    reward functions into other processes); the copy uses its own process's engine.
    """

    def __init__(
        self,
        config: RewardConfig | dict[str, Any] | str | None = None,
        *,
        name: str = "rewardkit",
        data_source: str | None = None,
        columns: Mapping[str, str] | None = None,
        component: str | None = None,
    ):
        self.config = load_config(config)
        self.__name__ = name
        self.data_source = data_source
        self.component = component
        self.columns = {f: f for f in SAMPLE_FIELDS}
        self.columns.update(columns or {})
        unknown = sorted(set(self.columns) - set(SAMPLE_FIELDS))
        if unknown:
            raise ValueError(f"columns: unknown sample field(s) {unknown}; known: {', '.join(SAMPLE_FIELDS)}")
        if component is not None and component not in {e.key for e in self.config.scorers}:
            known = ", ".join(e.key for e in self.config.scorers) or "(none: reward.scorers is empty)"
            raise ValueError(f"component {component!r} is not in reward.scorers; known: {known}")
        self.last_result: RewardResult | None = None
        self._reasons_seen: set[str] = set()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.__name__!r})"

    # -- pickling: the engine (threads, workers) stays behind ------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["last_result"] = None
        return state

    @property
    def engine(self) -> RewardEngine:
        """The engine shared by every reward function of this config in this process."""
        return _shared(self.config).engine

    def close(self) -> None:
        """Stop the shared engine of this config (a later call of any of its functions starts a new one)."""
        _drop_shared(self.config)

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

    def _submit(self, prompts: Sequence[Any], completions: Sequence[Any], columns: dict[str, Any]):
        state = columns.get("trainer_state")
        step = getattr(state, "global_step", None) if state is not None else None
        return _shared(self.config).submit(self.records(prompts, completions, **columns), step)

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any
    ) -> list[float | None]:
        """Score TRL's completions: one float per completion, ``None`` where rewardkit has no score."""
        result = self._submit(prompts, completions, columns).result()
        return self.report(result, columns.get("log_metric"), columns.get("log_extra"))

    def report(
        self, result: RewardResult, log_metric: Any = None, log_extra: Any = None
    ) -> list[float | None]:
        """Log ``result`` through TRL's callbacks (and a warning on failures); the values for TRL."""
        self.last_result = result
        name = self.__name__
        if callable(log_metric):
            for key, value in self._metrics(result).items():
                log_metric(f"rewardkit/{name}/{key}", value)
        if callable(log_extra) and len(result):
            infos = [sample_info(r, self.config) for r in result.samples]
            for key in info_keys(self.config):
                if key != "score":
                    log_extra(f"{name}/{key}", [info[key] for info in infos])
        if result.num_failed:
            failed = [(i, r) for i, r in enumerate(result.samples) if r.status == "failed"]
            by_reason = Counter(r.reason for _, r in failed)
            first = "; ".join(f"sample {i}: {r.reason}: {(r.error or '')[:200]}" for i, r in failed[:3])
            logger.warning(
                "rewardkit reward %r: %d of %d sample(s) failed (%s); %s",
                name,
                len(failed),
                len(result),
                ", ".join(f"{k}: {n}" for k, n in sorted(by_reason.items())),
                first,
            )
        if self.component is not None:
            values = [r.components.get(self.component) for r in result.samples]
            return [None if v is None or not math.isfinite(v) else float(v) for v in values]
        return [None if math.isnan(s) else s for s in result.scores]

    def _metrics(self, result: RewardResult) -> dict[str, float]:
        m = result.metrics
        out = {
            "num_failed": float(result.num_failed),
            "num_abstained": float(sum(s == "abstained" for s in result.status)),
        }
        reasons = {k[len("reward/failed/") :] for k in m if k.startswith("reward/failed/")}
        self._reasons_seen |= reasons
        for reason in sorted(self._reasons_seen):  # 0 once seen: TRL averages what was logged
            out[f"failed/{reason}"] = float(m.get(f"reward/failed/{reason}", 0.0))
        for key, value in m.items():
            if key.startswith("reward/component/") or key.startswith("rm/") or key == "timing/total_s":
                name = key[len("reward/") :] if key.startswith("reward/") else key
                if isinstance(value, int | float) and math.isfinite(value):
                    out[name] = float(value)
        return out


class AsyncRewardFunction(RewardFunction):
    """:class:`RewardFunction` as an ``async`` callable: TRL runs async reward functions concurrently
    (``asyncio.gather``), so two judge-backed rewards wait for their judges at the same time.

    Scoring runs on the shared engine's own event loop; TRL's loop only awaits it.
    """

    async def __call__(  # type: ignore[override]
        self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any
    ) -> list[float | None]:
        """Score TRL's completions without blocking TRL's event loop."""
        result = await asyncio.wrap_future(self._submit(prompts, completions, columns))
        return self.report(result, columns.get("log_metric"), columns.get("log_extra"))


def reward_function(
    config: RewardConfig | dict[str, Any] | str | None = None, *, name: str = "rewardkit", **kwargs: Any
) -> RewardFunction:
    """Shorthand for :class:`RewardFunction` (``reward_funcs=[reward_function("config.yaml")]``).

    ``asynchronous=True`` gives an :class:`AsyncRewardFunction`.
    """
    cls = AsyncRewardFunction if kwargs.pop("asynchronous", False) else RewardFunction
    return cls(config, name=name, **kwargs)
