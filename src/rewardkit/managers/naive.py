"""The naive reward manager: each sample to its routed scorer, through the configured executor."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter, itemgetter
from typing import Any

from rewardkit.batch import Sample
from rewardkit.errors import SampleError
from rewardkit.executors.base import ScoreTask
from rewardkit.inputs import plain
from rewardkit.managers.base import RewardManager, run_tasks
from rewardkit.result import SampleResult
from rewardkit.scoring import (
    CALL_FIELDS,
    ScorerSpec,
    call_with,
    error_result,
    fast_fields,
    field_params,
    invoke,
)


class NaiveRewardManager(RewardManager):
    """Routes each sample to one scorer (custom function, data source or default) and scores it.

    Samples routed to a batch scorer (registered with ``batch=True``) are scored with one call of
    it per batch; the others one call per (distinct) sample.
    """

    name = "naive"
    routes = True

    def __init__(self, context, **kwargs):
        super().__init__(context, **kwargs)
        self._plans: dict[str | None, _Plan] = {}  # data source -> (scorer, argument getter): score_now
        # data source -> _FieldPlan where the scorer reads only CALL_FIELDS, else None
        self._field_plans: dict[str | None, _FieldPlan | None] = {}

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
        route = context.route
        here = context.executor.runs_here
        by_source = self._plans  # routing reads the data source only
        if len(by_source) > 4096:  # (data sources are few; a caller minting them is not held to it)
            by_source.clear()
        seen: dict[int, _Plan] = {}  # the plans of this batch that may run here (kept: ids stay theirs)
        limit = context.config.max_input_chars
        # No dedup here: a cheap scorer is pure, so a duplicate scored again gets what the copy
        # run_tasks would hand it holds, and its dedup key costs as much as the call.
        out: list[SampleResult] = []
        append = out.append
        last: _Plan | None = None
        for sample in samples:
            plan = by_source.get(sample.data_source)
            if plan is None:
                try:
                    spec = route(sample)
                except SampleError as e:  # not remembered: the error names this sample
                    append(context.unroutable_result(e))
                    continue
                if spec is None:
                    return None  # (no route's answer: the usual path reports it)
                plan = by_source[sample.data_source] = (spec, _fields_getter(spec))
            if plan is not last:
                if id(plan) not in seen:
                    # A scorer that may not run here sends the whole batch the usual way (what
                    # was scored so far is dropped: cheap, pure scorers only).
                    if not here((plan[0],)):
                        return None
                    seen[id(plan)] = plan
                last = plan
            if limit is not None and len(sample.response) > limit:
                append(_typed(invoke, plan[0], sample, limit))  # input_too_large, as invoke says it
            else:
                spec, get = plan
                append(
                    _typed(invoke, spec, sample) if get is None else call_with(spec, spec.kwargs, get(sample))
                )
        return out

    def _plain_naive(self) -> bool:
        """Whether this manager scores as the naive one does (a subclass such as DAPO that changes
        the scoring does not get the fast path it cannot know about)."""
        cls = type(self)
        return cls.score_rules is NaiveRewardManager.score_rules and cls.ascore is RewardManager.ascore

    def score_fields_now(
        self, data_source: str | None, response: str, ground_truth: Any, extra_info: Mapping[str, Any] | None
    ) -> SampleResult | None:
        """:meth:`~RewardManager.score_one_now` without building a sample, where the routed scorer
        reads only the fields given (verl's per-sample ``compute_score`` path); ``None`` where it
        does not apply.

        ``ground_truth`` and ``extra_info`` (a mapping or ``None``) come as the trainer has them:
        they are made plain Python data (:func:`~rewardkit.inputs.plain`, a copy) only if the
        scorer reads them."""
        if data_source in self._field_plans:
            plan = self._field_plans[data_source]
        else:
            plan = self._field_plans[data_source] = self._field_plan(data_source)
        if plan is None:
            return None
        spec, get, params, reads = plan
        limit = self.context.config.max_input_chars
        if (limit is not None and len(response) > limit) or not self.context.executor.runs_here((spec,)):
            return None
        if 1 in reads:
            ground_truth = plain(ground_truth)
        if 3 in reads:
            extra_info = {} if extra_info is None else plain(extra_info)
        values = (response, ground_truth, data_source, extra_info)
        if get is not None:
            return call_with(spec, spec.kwargs, get(values))
        kwargs = {name: values[i] for name, i in params}
        if spec.kwargs:
            kwargs.update(spec.kwargs)
        return _typed(call_with, spec, kwargs)

    def _field_plan(self, data_source: str | None) -> _FieldPlan | None:
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
        if params is None:
            return None
        attrs = fast_fields(spec)
        get = None if attrs is None else _getter([CALL_FIELDS.index(a) for a in attrs], itemgetter)
        return spec, get, params, frozenset(i for _, i in params)


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


#: A routed scorer and how the fast path reads its arguments off a sample (``None``: by keyword).
_Plan = tuple[ScorerSpec, Callable[[Sample], tuple[Any, ...]] | None]
#: The same for score_fields_now, whose getter reads a (response, ground_truth, data_source,
#: extra_info) tuple; with the keyword plan (:func:`~rewardkit.scoring.field_params`) and the
#: positions in that tuple the scorer reads.
_FieldPlan = tuple[
    ScorerSpec,
    Callable[[tuple[Any, ...]], tuple[Any, ...]] | None,
    tuple[tuple[str, int], ...],
    frozenset[int],
]


def _fields_getter(spec: ScorerSpec) -> Callable[[Sample], tuple[Any, ...]] | None:
    """A function giving the positional arguments of ``spec.fn`` from a sample (see
    :func:`~rewardkit.scoring.fast_fields`), or ``None``: call it by keyword."""
    attrs = fast_fields(spec)
    return None if attrs is None else _getter(attrs, attrgetter)


def _getter(
    keys: Sequence[Any], make: Callable[..., Callable[[Any], Any]]
) -> Callable[[Any], tuple[Any, ...]]:
    """``make(*keys)`` (``attrgetter`` / ``itemgetter``) that always gives a tuple."""
    if len(keys) > 1:
        return make(*keys)
    if keys:
        one = make(keys[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()
