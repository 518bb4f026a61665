"""The reward-manager contract, and the routing and combining every manager shares."""

from __future__ import annotations

import functools
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from rewardkit.errors import SampleError, UnknownNameError
from rewardkit.executors.base import ScoreTask
from rewardkit.options import Options as BaseOptions
from rewardkit.options import validate_options
from rewardkit.result import SampleResult
from rewardkit.runtime.dedup import fan_out, unique_slots
from rewardkit.scoring import SINGLE_FIELDS, ScorerSpec, load_function, signature_of

if TYPE_CHECKING:
    from rewardkit.backends.base import RMBackend
    from rewardkit.batch import Sample
    from rewardkit.config import RewardConfig
    from rewardkit.executors.base import Executor
    from rewardkit.plugins import Registries


#: Where a manager's options live in the config.
MANAGER_KWARGS = "reward.reward_manager.kwargs"


@dataclass
class ManagerContext:
    """What a reward manager works with: config, registries, the executor and the RM backend (if any)."""

    config: RewardConfig
    registries: Registries
    executor: Executor
    backend: RMBackend | None = None
    _custom: ScorerSpec | None = field(default=None, init=False, repr=False)
    _specs: dict[str, ScorerSpec] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        crf = self.config.custom_reward_function
        if crf.path:
            fn, ref = load_function(crf.path, crf.name)
            self._custom = ScorerSpec(crf.name, fn, ref, provider="custom_reward_function").with_kwargs(
                crf.reward_kwargs
            )
        elif self.config.default_scorer is not None:  # a config error: fail now, not per sample
            self._specs[self.config.default_scorer] = self.scorer(self.config.default_scorer)

    @property
    def custom_scorer(self) -> ScorerSpec | None:
        """The user's ``custom_reward_function``, which overrides data-source routing."""
        return self._custom

    def scorer(self, name: str, kwargs: dict[str, Any] | None = None) -> ScorerSpec:
        """A registered scorer by name, with configured keyword arguments applied."""
        spec = self._with_context(self.registries.scorers.get(name))
        return spec.with_kwargs(kwargs) if kwargs else spec

    def _with_context(self, spec: ScorerSpec) -> ScorerSpec:
        # Scorers that name a ``sandbox_fusion`` parameter get the configured remote sandbox.
        sandbox = self.config.sandbox_fusion
        if (
            sandbox.url
            and "sandbox_fusion" in signature_of(spec.fn).params
            and "sandbox_fusion" not in spec.kwargs
        ):
            spec = spec.with_kwargs({"sandbox_fusion": sandbox.model_dump()})
        # ... and those that name ``sandbox`` the local sandbox's isolation settings.
        if "sandbox" in signature_of(spec.fn).params and "sandbox" not in spec.kwargs:
            spec = spec.with_kwargs({"sandbox": self.config.sandbox.model_dump()})
        return spec

    def route(self, sample: Sample) -> ScorerSpec | None:
        """The scorer for one sample: the custom function, else by ``data_source``, else the default.

        Returns ``None`` when no scorer applies but a reward model is enabled (the RM alone scores
        it). Raises :class:`SampleError` (reason ``unroutable``) naming the sample and its data
        source otherwise; :meth:`unroutable` turns that into the sample's failed result.
        """
        if self._custom is not None:
            return self._custom
        ds = sample.data_source
        name = self.registries.scorers.name_for(ds) if ds is not None else None
        if name is None:
            name = self.config.default_scorer
        if name is None:
            if self.backend is not None:
                return None
            known = self.registries.scorers.data_sources()
            if ds is None:
                raise SampleError(
                    sample.index,
                    "data_source",
                    "missing, and no custom_reward_function or default_scorer is configured to score it",
                    reason="unroutable",
                )
            err = UnknownNameError("data source", ds, known, self.registries.scorers.hint)
            raise SampleError(
                sample.index,
                "data_source",
                f"{err} Set reward.default_scorer or reward.custom_reward_function to score it anyway.",
                reason="unroutable",
            )
        spec = self._specs.get(name)
        if spec is None:
            spec = self._specs[name] = self.scorer(name)
        return spec

    def unroutable(self, samples: Sequence[Sample]) -> dict[int, SampleResult]:
        """Failed results (reason ``unroutable``, the routing error as text) by position, for the
        samples no scorer applies to. With ``strict_routing`` the first such sample raises instead.

        The text leaves out the sample's index: it belongs to that sample, and an index inside a
        shard (Ray, process pools) would name the wrong one.
        """
        out: dict[int, SampleResult] = {}
        if self._custom is not None:
            return out
        for pos, sample in enumerate(samples):
            try:
                self.route(sample)
            except SampleError as e:
                out[pos] = self.unroutable_result(e)
        return out

    def unroutable_result(self, error: SampleError) -> SampleResult:
        """The failed result of a sample :meth:`route` raised ``error`` for; re-raises it with
        ``strict_routing`` or when it is not a routing failure."""
        if self.config.strict_routing or error.reason != "unroutable":
            raise error
        where = f"field {error.field!r}: " if error.field else ""
        return SampleResult.failed("unroutable", where + error.detail)


def freeze(value: Any) -> Any:
    """A hashable stand-in for ``value`` (JSON text for dicts and lists), for dedup keys."""
    try:
        hash(value)
        return value
    except TypeError:
        return json.dumps(value, sort_keys=True, default=repr)


_ALL_FIELDS = ("prompt", "response", "ground_truth", "data_source", "extra_info", "uid")


@functools.lru_cache(maxsize=1024)
def _read_fields(fn: Any) -> tuple[str, ...]:
    """The sample attributes a scorer function reads (``solution_str`` as ``response``)."""
    sig = signature_of(fn)
    if "sample" in sig.params or sig.var_kwargs:
        return _ALL_FIELDS
    return tuple("response" if f == "solution_str" else f for f in SINGLE_FIELDS if f in sig.params)


def dedup_key(spec: ScorerSpec, sample: Sample) -> tuple:
    """Identity of a scorer call: the scorer and the sample fields it actually reads."""
    try:
        fields = _read_fields(spec.fn)
    except TypeError:  # unhashable callable
        fields = _read_fields.__wrapped__(spec.fn)
    return (spec.name, spec.ref, tuple([freeze(getattr(sample, f)) for f in fields]))


async def run_tasks(context: ManagerContext, tasks: Sequence[ScoreTask]) -> list[SampleResult]:
    """Run scorer tasks through the executor, scoring identical calls once when ``dedup`` is on."""
    if not context.config.dedup or len(tasks) < 2:
        return await context.executor.run(tasks)
    unique, slots = unique_slots(tasks, key=lambda t: dedup_key(t.spec, t.sample))
    results = await context.executor.run(unique)
    return fan_out(results, slots, copy=copy_result)  # duplicates get copies of the first one's result


def copy_result(r: SampleResult) -> SampleResult:
    """A copy of ``r`` whose ``extra`` and ``components`` are its own (for a duplicate sample)."""
    return SampleResult(r.score, r.status, r.reason, r.error, dict(r.extra), dict(r.components))


def combine(parts: Sequence[tuple[str, float, SampleResult]]) -> SampleResult:
    """Weighted sum of components ``(name, weight, result)`` for one sample.

    Abstaining components are left out of the sum (not counted as 0); weight-0 components are
    kept as metrics only; a failed component fails the sample (with several components, reason
    ``component_failed`` naming it). Every component's value is kept in ``components`` (a
    component's own sub-components too) and extras are merged, first writer wins.
    """
    components: dict[str, float | None] = {}
    extra: dict[str, Any] = {}
    total = 0.0
    counted = 0
    failed: list[tuple[str, SampleResult]] = []
    for name, weight, r in parts:
        components[name] = r.score
        for k, v in r.components.items():
            components.setdefault(k, v)
        for k, v in r.extra.items():
            extra.setdefault(k, v)
        if r.status == "failed":
            failed.append((name, r))
        elif r.status == "ok" and weight != 0:
            total += weight * r.score  # type: ignore[operator]
            counted += 1
    if len(failed) == 1 and len(parts) == 1:
        out = SampleResult.failed(failed[0][1].reason or "error", failed[0][1].error or "", **extra)
    elif failed:
        out = SampleResult.failed(
            "component_failed", "; ".join(f"{n}: {r.reason}: {r.error}" for n, r in failed), **extra
        )
    elif counted == 0:
        out = SampleResult.abstained(**extra)
    elif not math.isfinite(total):  # finite parts, huge weights: never report inf or nan as ok
        shown = ", ".join(f"{n}={w:g}*{r.score:g}" for n, w, r in parts if r.status == "ok" and w != 0)
        out = SampleResult.failed("invalid_total", f"weighted sum is {total} ({shown})", **extra)
    else:
        out = SampleResult(total, "ok", extra=extra)
    out.components = components
    return out


class NoOptions(BaseOptions):
    """A manager that takes no options (``reward_manager.kwargs`` must be empty)."""


class RewardManager(ABC):
    """Scores a batch of samples. Built with ``cls(context, **kwargs)``; kwargs from ``reward_manager.kwargs``.

    Subclasses implement :meth:`score_rules` (the rule-based part); :meth:`ascore` adds the reward
    model's score as component ``"rm"`` when one is enabled. The kwargs that reach this
    constructor are validated against :attr:`Options` (an :class:`~rewardkit.options.Options`
    model; errors name ``reward.reward_manager.kwargs.<key>``) and kept in ``self.options``. A
    subclass with options of its own declares its ``Options`` model (and so they appear in the
    config reference), or takes them as ``__init__`` parameters and passes the rest on.
    """

    name: ClassVar[str] = ""
    #: The manager's options model (``reward_manager.kwargs``).
    Options: ClassVar[type[BaseOptions]] = NoOptions
    #: Whether :meth:`score_rules` routes each sample with ``context.route``: then a sample no scorer
    #: applies to fails alone (reason ``unroutable``) before ``score_rules`` sees the batch.
    routes: bool = False

    def __init__(self, context: ManagerContext, **kwargs: Any):
        self.context = context
        self.options: Any = self.parse_options(kwargs)

    @classmethod
    def parse_options(cls, kwargs: dict[str, Any] | None) -> Any:
        """``reward_manager.kwargs`` validated against :attr:`Options` (a :class:`ConfigError` if not)."""
        what = f"reward manager {cls.name or cls.__name__!r}"
        return validate_options(cls.Options, kwargs, MANAGER_KWARGS, what)

    @abstractmethod
    async def score_rules(self, samples: Sequence[Sample]) -> list[SampleResult | None]:
        """Rule-based results, one per sample; ``None`` where no rule scorer applies (RM only)."""

    async def ascore(self, samples: Sequence[Sample]) -> list[SampleResult]:
        """Score a batch: rules, plus the reward model when enabled, combined per sample."""
        if not samples:
            return []
        backend = self.context.backend
        if backend is None:
            failed = self.context.unroutable(samples) if self.routes else {}
            if not failed:
                return await self.score_rules(samples)  # type: ignore[return-value]
            todo = [s for pos, s in enumerate(samples) if pos not in failed]
            done = iter(await self.score_rules(todo) if todo else [])
            return [failed[pos] if pos in failed else next(done) for pos in range(len(samples))]  # type: ignore[misc]
        rule_results = await self.score_rules(samples)
        rm_results = await backend.ascore(samples)
        weight = self.context.config.reward_model.weight
        out = []
        for rule, rm in zip(rule_results, rm_results, strict=True):
            parts = [("rm", weight, rm)] if rule is None else [("rule", 1.0, rule), ("rm", weight, rm)]
            out.append(combine(parts))
        return out

    def score_now(self, samples: Sequence[Sample]) -> list[SampleResult] | None:
        """Score the batch synchronously in the calling thread when that gives exactly what
        :meth:`ascore` would (the engine's fast path for cheap in-process scorers), else ``None``
        (the caller goes the normal way). Default: ``None``."""
        return None

    def score_one_now(self, sample: Sample) -> SampleResult | None:
        """:meth:`score_now` of one validated sample: its result, or ``None``."""
        results = self.score_now([sample])
        return None if results is None else results[0]

    def score_fields_now(
        self, data_source: str | None, response: str, ground_truth: Any, extra_info: Mapping[str, Any] | None
    ) -> SampleResult | None:
        """:meth:`score_one_now` of a sample given as its fields (``ground_truth`` and ``extra_info``
        as the trainer has them, numpy values included), or ``None``. Default: ``None`` (the caller
        builds the sample and goes the usual way)."""
        return None

    async def aclose(self) -> None:
        """Free what the manager holds (the engine closes executor and backend itself)."""
