"""The naive reward manager: each sample to its routed scorer, through the configured executor."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rewardkit.batch import Sample
from rewardkit.executors.base import ScoreTask
from rewardkit.managers.base import RewardManager, run_tasks
from rewardkit.result import SampleResult


class NaiveRewardManager(RewardManager):
    """Routes each sample to one scorer (custom function, data source or default) and scores it.

    Samples routed to a batch scorer (registered with ``batch=True``) are scored with one call of
    it per batch; the others one call per (distinct) sample.
    """

    name = "naive"
    routes = True

    async def score_rules(self, samples: Sequence[Sample]) -> list[SampleResult | None]:
        specs = [self.context.route(s) for s in samples]
        out: list[SampleResult | None] = [None] * len(samples)
        single = [i for i, spec in enumerate(specs) if spec is not None and not spec.batch]
        groups: dict[str, list[int]] = {}
        for i, spec in enumerate(specs):
            if spec is not None and spec.batch:
                groups.setdefault(spec.name, []).append(i)

        async def score_single() -> None:
            results = await run_tasks(self.context, [ScoreTask(specs[i], samples[i]) for i in single])  # type: ignore[arg-type]
            for i, r in zip(single, results, strict=True):
                out[i] = r

        async def score_group(idx: list[int]) -> None:
            spec = specs[idx[0]]
            results = await self.context.executor.run_batch(spec, [samples[i] for i in idx])  # type: ignore[arg-type]
            for i, r in zip(idx, results, strict=True):
                out[i] = r

        jobs = [score_group(idx) for idx in groups.values()]
        if single:
            jobs.append(score_single())
        await asyncio.gather(*jobs)
        return out
