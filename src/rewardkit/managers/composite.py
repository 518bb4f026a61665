"""The composite reward manager: several scorers on every sample, combined with weights."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rewardkit.batch import Sample
from rewardkit.errors import ConfigError
from rewardkit.executors.base import ScoreTask
from rewardkit.managers.base import ManagerContext, RewardManager, combine, run_tasks
from rewardkit.result import SampleResult
from rewardkit.scoring import ScorerSpec

#: A ``reward.scorers`` entry with this name stands for ``reward.custom_reward_function``.
CUSTOM = "custom_reward_function"


class CompositeRewardManager(RewardManager):
    """Every scorer listed in ``reward.scorers`` scores every sample; the reward is their weighted sum.

    ``reward.scorers: [{name: math, weight: 1.0}, {name: think_format, weight: 0.1, alias: fmt}]``.
    Each component's value is kept in ``components`` (under its ``alias`` or name) and reported in
    the metrics. An abstaining component is left out of the sum (not counted as 0), a weight-0
    component is a metric only, and a failed component fails the sample (``component_failed``,
    naming it). The entry name ``custom_reward_function`` stands for the user's custom function.
    With ``reward.scorers`` empty, the routed scorer (custom function or by data source) is the
    single component. Takes no options.
    """

    name = "composite"

    def __init__(self, context: ManagerContext, **kwargs: Any):
        if kwargs:
            raise ConfigError(
                f"reward_manager 'composite' takes no options (got {', '.join(sorted(kwargs))}); "
                "list its components in reward.scorers"
            )
        super().__init__(context, **kwargs)
        self.parts: list[tuple[str, float, ScorerSpec]] = []
        seen: dict[str, str] = {}
        for entry in context.config.scorers:
            key = entry.key
            if key in seen:
                raise ConfigError(
                    f"reward.scorers: component name {key!r} is used twice; give one of them an alias"
                )
            seen[key] = entry.name
            if entry.name == CUSTOM:
                spec = context.custom_scorer
                if spec is None:
                    raise ConfigError(
                        f"reward.scorers lists {CUSTOM!r} but reward.custom_reward_function.path is not set"
                    )
                if entry.kwargs:
                    spec = spec.with_kwargs(entry.kwargs)
            else:
                spec = context.scorer(entry.name, entry.kwargs)
            if spec.batch:
                raise ConfigError(
                    f"reward.scorers: {entry.name!r} is a batch scorer; a composite reward calls its "
                    "components per sample (use the 'batch' manager for it)"
                )
            self.parts.append((key, entry.weight, spec))
        self.routes = not self.parts  # listed components score every sample; else it routes

    async def score_rules(self, samples: Sequence[Sample]) -> list[SampleResult | None]:
        if not self.parts:
            specs = [self.context.route(s) for s in samples]
            tasks = [ScoreTask(spec, s) for spec, s in zip(specs, samples, strict=True) if spec is not None]
            done = iter(await run_tasks(self.context, tasks))
            return [combine([(spec.name, 1.0, next(done))]) if spec is not None else None for spec in specs]
        # One executor call for every (sample, component): the pool sees the whole workload at once.
        tasks = [ScoreTask(spec, s) for s in samples for _key, _w, spec in self.parts]
        results = await run_tasks(self.context, tasks)
        k = len(self.parts)
        out: list[SampleResult | None] = []
        for j in range(len(samples)):
            row = results[j * k : (j + 1) * k]
            out.append(combine([(key, w, r) for (key, w, _spec), r in zip(self.parts, row, strict=True)]))
        return out
