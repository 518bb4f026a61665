"""The naive reward manager: each sample to its routed scorer, through the configured executor."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from rewardkit.batch import Sample
from rewardkit.errors import SampleError
from rewardkit.executors.base import ScoreTask
from rewardkit.managers.base import RewardManager, run_tasks
from rewardkit.result import SampleResult
from rewardkit.scoring import ScorerSpec, call_with, error_result, field_params, invoke, single_params


class NaiveRewardManager(RewardManager):
    """Routes each sample to one scorer (custom function, data source or default) and scores it.

    Samples routed to a batch scorer (registered with ``batch=True``) are scored with one call of
    it per batch; the others one call per (distinct) sample.
    """

    name = "naive"
    routes = True

    def __init__(self, context, **kwargs):
        super().__init__(context, **kwargs)
        self._routes: dict[str | None, ScorerSpec | None] = {}  # data source -> scorer (routable ones)
        # data source -> (scorer, its field_params) where the scorer reads only CALL_FIELDS, else None
        self._field_plans: dict[str | None, tuple[ScorerSpec, tuple[tuple[str, int], ...]] | None] = {}

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

    def score_now(self, samples: Sequence[Sample]) -> list[SampleResult] | None:
        """The whole batch in this thread when no reward model is on and the executor lets every
        routed scorer run here (``cheap`` built-ins, no deadline): routing and unroutable failures
        exactly as :meth:`ascore` does them, no event loop, no thread, no executor call."""
        context = self.context
        if context.backend is not None or not self._plain_naive():
            return None
        specs: list[ScorerSpec | None] = []
        failed: dict[int, SampleResult] = {}
        distinct: dict[int, ScorerSpec] = {}
        route = context.route
        by_source: dict[str | None, ScorerSpec | None] = {}  # routing reads the data source only
        for pos, sample in enumerate(samples):
            ds = sample.data_source
            if ds in by_source:
                specs.append(by_source[ds])
                continue
            try:
                spec = route(sample)
            except SampleError as e:  # not remembered: the error names this sample
                failed[pos] = context.unroutable_result(e)
                spec = None
            else:
                if spec is not None:
                    by_source[ds] = spec
                if id(spec) not in distinct:
                    distinct[id(spec)] = spec  # type: ignore[assignment]
            specs.append(spec)
        if not context.executor.runs_here(distinct.values()):
            return None
        # No dedup here: a cheap scorer is pure, so a duplicate scored again gets what the copy
        # run_tasks would hand it holds, and its dedup key costs as much as the call.
        limit = context.config.max_input_chars
        params: dict[int, tuple[tuple[str, str | None], ...]] = {}
        out: list[SampleResult] = []
        append = out.append
        for pos, (spec, sample) in enumerate(zip(specs, samples, strict=True)):
            if spec is None:
                append(failed[pos])
            elif limit is not None and len(sample.response) > limit:
                append(_typed(invoke, spec, sample, limit))  # input_too_large, as invoke says it
            else:  # invoke's work, its argument list built once per scorer of the batch
                names = params.get(id(spec))
                if names is None:
                    names = params[id(spec)] = single_params(spec.fn)
                kwargs = {name: sample if attr is None else getattr(sample, attr) for name, attr in names}
                if spec.kwargs:
                    kwargs.update(spec.kwargs)
                append(_typed(call_with, spec, kwargs))
        return out

    def _plain_naive(self) -> bool:
        """Whether this manager scores as the naive one does (a subclass such as DAPO that changes
        the scoring does not get the fast path it cannot know about)."""
        cls = type(self)
        return cls.score_rules is NaiveRewardManager.score_rules and cls.ascore is RewardManager.ascore

    def score_one_now(self, sample: Sample) -> SampleResult | None:
        """:meth:`score_now` of one sample, its route remembered per data source (routing reads
        nothing else); an unroutable sample goes through :meth:`score_now`."""
        context = self.context
        if sample.data_source in self._routes:
            spec = self._routes[sample.data_source]
        else:
            if context.backend is not None or not self._plain_naive():
                return None
            try:
                spec = context.route(sample)
            except SampleError:
                return super().score_one_now(sample)
            self._routes[sample.data_source] = spec
        if spec is None or not context.executor.runs_here((spec,)):
            return None
        return _typed(invoke, spec, sample, context.config.max_input_chars)

    def score_fields_now(
        self, data_source: str | None, response: str, ground_truth: Any, extra_info: dict[str, Any]
    ) -> SampleResult | None:
        """:meth:`score_one_now` without building a sample, where the routed scorer reads only the
        fields given (verl's per-sample ``compute_score`` path); ``None`` where it does not apply."""
        if data_source in self._field_plans:
            plan = self._field_plans[data_source]
        else:
            plan = self._field_plans[data_source] = self._field_plan(data_source)
        if plan is None:
            return None
        spec, params = plan
        limit = self.context.config.max_input_chars
        if (limit is not None and len(response) > limit) or not self.context.executor.runs_here((spec,)):
            return None
        values = (response, ground_truth, data_source, extra_info)
        kwargs = {name: values[i] for name, i in params}
        if spec.kwargs:
            kwargs.update(spec.kwargs)
        return _typed(call_with, spec, kwargs)

    def _field_plan(self, data_source: str | None) -> tuple[ScorerSpec, tuple[tuple[str, int], ...]] | None:
        context = self.context
        if context.backend is not None or not self._plain_naive():
            return None
        try:
            spec = context.route(Sample(0, "", data_source=data_source))  # routing reads the data source only
        except SampleError:
            return None  # the usual path fails it as unroutable
        if spec is None or spec.batch:
            return None
        params = field_params(spec.fn)
        return None if params is None else (spec, params)


def _typed(call: Callable[..., SampleResult], *args: Any) -> SampleResult:
    """One scorer call (``invoke`` or ``call_with``) as the inline executor's helper thread makes
    it: every failure typed."""
    try:
        return call(*args)
    except asyncio.CancelledError as e:  # raised by the scorer itself: nothing cancels this call
        return error_result(e)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - building the result raised (a broken __str__)
        return SampleResult.failed("error", f"{type(e).__name__} (its message could not be formatted)")
