"""The batch reward manager: one call of a batch scorer (lists in, a list out) for the whole batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from pydantic import Field, StrictBool, StrictStr

from rewardkit.batch import Sample
from rewardkit.errors import ConfigError
from rewardkit.managers.base import ManagerContext, RewardManager, freeze
from rewardkit.options import Options
from rewardkit.result import SampleResult
from rewardkit.runtime.dedup import fan_out, unique_slots
from rewardkit.scoring import BATCH_FIELDS, ScorerSpec, signature_of


class BatchOptions(Options):
    """``reward_manager.kwargs`` of the ``batch`` manager."""

    scorer: StrictStr | None = Field(
        None, description="a registered batch scorer; default: reward.custom_reward_function"
    )
    scorer_kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of scorer")
    dedup: StrictBool = Field(
        False, description="send identical samples once (off: a batch scorer may compare samples)"
    )


class BatchRewardManager(RewardManager):
    """Scores a batch with one call of a batch scorer, as verl's ``BatchRewardManager`` does.

    The scorer is ``reward.custom_reward_function`` (called with ``data_sources``,
    ``solution_strs`` / ``responses``, ``ground_truths``, ``extra_infos``... as its signature
    asks, plus ``reward_kwargs``), or a registered batch scorer named by the kwarg ``scorer``
    (with ``scorer_kwargs``). The call runs through the executor (in a worker process with the
    ``process`` executor, bounded by ``batch_timeout_s``, else ``timeout_s``). A return of the
    wrong length fails every sample.

    ``dedup`` (default ``False``): send identical samples only once. Off by default because a batch
    scorer may score samples relative to each other (GRPO groups) and would see a different batch.
    """

    name = "batch"
    Options = BatchOptions

    def __init__(self, context: ManagerContext, **kwargs: Any):
        super().__init__(context, **kwargs)
        opts: BatchOptions = self.options
        name, scorer_kwargs, self.dedup = opts.scorer, opts.scorer_kwargs, opts.dedup
        if name is not None and context.custom_scorer is not None:
            raise ConfigError(
                "reward_manager 'batch': give either reward.custom_reward_function or "
                f"reward_manager.kwargs.scorer ({name!r}), not both"
            )
        if name is not None:
            spec = context.scorer(name, scorer_kwargs)
            where = f"scorer {name!r}"
        elif context.custom_scorer is not None:
            if scorer_kwargs:
                raise ConfigError(
                    "reward_manager 'batch': scorer_kwargs applies to kwargs.scorer; "
                    "pass options of a custom function in custom_reward_function.reward_kwargs"
                )
            spec = context.custom_scorer
            where = f"custom_reward_function {spec.ref or spec.name!r}"
        else:
            raise ConfigError(
                "reward_manager 'batch' needs a batch scorer: set reward.custom_reward_function to a "
                "function taking lists (solution_strs, ground_truths, ...) or reward_manager.kwargs.scorer"
            )
        sig = signature_of(spec.fn)
        if not spec.batch and not sig.var_kwargs and not (sig.params & set(BATCH_FIELDS)):
            raise ConfigError(
                f"reward_manager 'batch': {where} is not a batch scorer: it takes none of "
                f"{', '.join(BATCH_FIELDS)} (it takes {', '.join(sorted(sig.params)) or 'nothing'}). "
                "Use the 'naive' manager for a per-sample function."
            )
        self.spec: ScorerSpec = spec if spec.batch else dataclasses.replace(spec, batch=True)

    def _key(self, sample: Sample) -> tuple:
        """The sample fields the batch function reads (all of them if it takes ``samples`` or ``**kwargs``)."""
        sig = signature_of(self.spec.fn)
        if "samples" in sig.params or sig.var_kwargs:
            fields: Sequence[str] = ("prompt", "response", "ground_truth", "data_source", "extra_info", "uid")
        else:
            fields = sorted({BATCH_FIELDS[p] for p in sig.params if p in BATCH_FIELDS})
        return tuple(freeze(getattr(sample, f)) for f in fields)

    async def score_rules(self, samples: Sequence[Sample]) -> list[SampleResult | None]:
        if not self.dedup or len(samples) < 2:
            return list(await self.context.executor.run_batch(self.spec, samples))
        unique, slots = unique_slots(samples, key=self._key)
        results = await self.context.executor.run_batch(self.spec, unique)
        fanned: list[SampleResult] = fan_out(
            list(results),
            slots,
            copy=lambda r: dataclasses.replace(r, extra=dict(r.extra), components=dict(r.components)),
        )
        return list(fanned)
