"""The naive reward manager: each sample to its routed scorer, through the configured executor."""

from __future__ import annotations

from collections.abc import Sequence

from rewardkit.batch import Sample
from rewardkit.executors.base import ScoreTask
from rewardkit.managers.base import RewardManager, run_tasks
from rewardkit.result import SampleResult


class NaiveRewardManager(RewardManager):
    """Routes each sample to one scorer (custom function, data source or default) and scores it."""

    name = "naive"

    async def score_rules(self, samples: Sequence[Sample]) -> list[SampleResult | None]:
        specs = [self.context.route(s) for s in samples]
        tasks = [ScoreTask(spec, s) for spec, s in zip(specs, samples, strict=True) if spec is not None]
        done = iter(await run_tasks(self.context, tasks))
        return [next(done) if spec is not None else None for spec in specs]
