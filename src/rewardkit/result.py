"""Results: one :class:`SampleResult` per input sample, gathered into a :class:`RewardResult`."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "abstained", "failed"]

#: Failure reasons used by the built-in executors and backends. Plugins may add their own.
FAILURE_REASONS = (
    "error",  # the scorer raised
    "timeout",  # the scorer passed its deadline and was stopped
    "crash",  # the worker process running it died
    "invalid_return",  # the scorer returned something that is not a score
    "input_too_large",  # the response exceeded max_input_chars
    "unparseable",  # a judge answered something no parser understood
    "http",  # a judge / remote RM request failed for good
    "circuit_open",  # the judge server was declared dead; not even tried
    "component_failed",  # a component of a composite score failed
    "invalid_total",  # the weighted sum of finite components is inf or nan
    "sandbox_unavailable",  # the code sandbox's isolation cannot be had on this machine
    "unroutable",  # no scorer applies (unknown / missing data_source, or a query without its prompt)
    "bad_input",  # `rewardkit score --on-bad-line=skip`: the input line was not a usable sample
)


@dataclass
class SampleResult:
    """The outcome for one sample.

    ``score`` is a float when ``status == "ok"`` and ``None`` otherwise; ``reason`` and ``error``
    explain a failure; ``extra`` holds per-sample side information (e.g. ``acc``, ``pred``,
    judge text); ``components`` holds per-component scores before weighting.
    """

    score: float | None
    status: Status = "ok"
    reason: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    components: dict[str, float | None] = field(default_factory=dict)

    @classmethod
    def ok(cls, score: float, **extra: Any) -> SampleResult:
        """A successful result."""
        return cls(score=float(score), status="ok", extra=dict(extra))

    @classmethod
    def abstained(cls, **extra: Any) -> SampleResult:
        """The scorer had no opinion on this sample."""
        return cls(score=None, status="abstained", extra=dict(extra))

    @classmethod
    def failed(cls, reason: str, error: str = "", **extra: Any) -> SampleResult:
        """A typed failure: ``reason`` is one of :data:`FAILURE_REASONS` (or a plugin's own)."""
        return cls(score=None, status="failed", reason=reason, error=error or reason, extra=dict(extra))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        out: dict[str, Any] = {"score": self.score, "status": self.status}
        if self.reason is not None:
            out["reason"] = self.reason
            out["error"] = self.error
        if self.components:
            out["components"] = self.components
        if self.extra:
            out["extra"] = self.extra
        return out


@dataclass
class RewardResult:
    """Scores and details for a batch, in input order.

    * ``scores``: one float per sample; ``nan`` where the sample failed or abstained, unless the
      config sets ``failure_score`` / ``abstain_score``.
    * ``status``: ``"ok" | "abstained" | "failed"`` per sample; ``reasons`` the failure reason or ``None``.
    * ``components``: per component name, one value per sample (``None`` where absent).
    * ``extra``: per key, one value per sample (``None`` where absent): verl's ``reward_extra_info``.
    * ``metrics``: aggregates (means per data source, counts by status and reason, timings).
    """

    samples: list[SampleResult]
    data_sources: list[str | None] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    failure_score: float | None = None
    abstain_score: float | None = None

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def scores(self) -> list[float]:
        """One float per sample: the score, or ``failure_score`` / ``abstain_score`` / ``nan``."""
        out = []
        for r in self.samples:
            if r.status == "ok":
                out.append(float(r.score))  # type: ignore[arg-type]
            elif r.status == "failed" and self.failure_score is not None:
                out.append(self.failure_score)
            elif r.status == "abstained" and self.abstain_score is not None:
                out.append(self.abstain_score)
            else:
                out.append(math.nan)
        return out

    @property
    def status(self) -> list[Status]:
        """``ok`` / ``abstained`` / ``failed`` per sample."""
        return [r.status for r in self.samples]

    @property
    def reasons(self) -> list[str | None]:
        """The failure reason per sample (``None`` unless failed)."""
        return [r.reason for r in self.samples]

    @property
    def errors(self) -> list[str | None]:
        """The failure message per sample (``None`` unless failed)."""
        return [r.error for r in self.samples]

    @property
    def components(self) -> dict[str, list[float | None]]:
        """Per component name, its value for each sample (``None`` where absent)."""
        names: dict[str, None] = {}
        for r in self.samples:
            names.update(dict.fromkeys(r.components))
        return {n: [r.components.get(n) for r in self.samples] for n in names}

    @property
    def extra(self) -> dict[str, list[Any]]:
        """Per extra key, its value for each sample (``None`` where absent): verl's ``reward_extra_info``."""
        keys: dict[str, None] = {}
        for r in self.samples:
            keys.update(dict.fromkeys(r.extra))
        return {k: [r.extra.get(k) for r in self.samples] for k in keys}

    @property
    def num_failed(self) -> int:
        """How many samples failed."""
        return sum(r.status == "failed" for r in self.samples)

    #: Rows of the last :meth:`token_level_rewards` call that had no valid token.
    empty_response_indices: list[int] = field(default_factory=list)

    def token_level_rewards(self, response_mask: Any, missing: float = 0.0) -> Any:
        """Place each score on the last valid token of its response.

        ``response_mask`` is a 2-D ``[batch, response_len]`` array of 0/1 (a torch tensor, numpy
        array or nested lists); the result has the same kind and shape (float32). A row with no
        valid token (an empty response) gets nothing written (never index ``-1``) and its index
        is listed in :attr:`empty_response_indices` afterwards. Samples that failed or abstained
        get ``missing`` (default ``0.0``, or ``failure_score`` / ``abstain_score`` when
        configured), since a trainer's reward tensor cannot hold ``nan``; their status still
        says what happened.
        """
        scores = [missing if math.isnan(s) else s for s in self.scores]
        if len(response_mask) != len(scores):
            raise ValueError(
                f"response_mask has {len(response_mask)} rows but the result has {len(scores)} samples"
            )
        self.empty_response_indices = []
        kind = type(response_mask).__module__.split(".")[0]
        if kind == "torch":
            import torch

            mask = response_mask.to(torch.long)
            out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
            has = mask.sum(dim=-1) != 0
            rows = torch.nonzero(has).flatten()
            self.empty_response_indices = torch.nonzero(~has).flatten().tolist()
            if rows.numel():  # then the width is > 0; `last` is the index of the last nonzero entry
                positions = torch.arange(1, mask.shape[-1] + 1, dtype=torch.int32, device=mask.device)
                last = (torch.where(mask != 0, positions, 0).amax(dim=-1) - 1).long()
                values = torch.tensor(scores, dtype=torch.float32, device=mask.device)
                out[rows, last[rows]] = values[rows]
            return out
        if kind == "numpy":
            import numpy as np

            mask = np.asarray(response_mask)
            out = np.zeros(mask.shape, dtype=np.float32)
            width = mask.shape[-1] if mask.ndim == 2 else 0
            if width:
                last = width - 1 - np.argmax((mask != 0)[:, ::-1], axis=-1)
                has = (mask != 0).any(axis=-1)
            else:
                last, has = np.zeros(len(mask), dtype=np.int64), np.zeros(len(mask), dtype=bool)
            rows = np.flatnonzero(has)
            self.empty_response_indices = np.flatnonzero(~has).tolist()
            if rows.size:
                out[rows, last[rows]] = np.asarray(scores, dtype=np.float32)[rows]
            return out
        rows = []
        for i, s in enumerate(scores):
            row = [0.0] * len(response_mask[i])
            valid = [j for j, m in enumerate(response_mask[i]) if m]
            if valid:
                row[valid[-1]] = s
            else:
                self.empty_response_indices.append(i)
            rows.append(row)
        return rows

    def to_records(self) -> list[dict[str, Any]]:
        """One JSON-serialisable dict per sample."""
        return [r.to_dict() for r in self.samples]

    @classmethod
    def gather(
        cls,
        results: list[SampleResult],
        data_sources: list[str | None],
        elapsed_s: float | None,
        config: Any,
    ) -> RewardResult:
        """A batch result with its metrics, reporting scores as ``config`` (a RewardConfig) asks."""
        return cls(
            samples=results,
            data_sources=data_sources,
            metrics=compute_metrics(results, data_sources, elapsed_s),
            failure_score=config.failure_score,
            abstain_score=config.abstain_score,
        )


def all_filled(results: Sequence[SampleResult | None], what: str) -> list[SampleResult]:
    """``results`` once every slot holds a result; an empty slot is a bug in ``what``, raised, never a
    silent hole."""
    out = [r for r in results if r is not None]
    if len(out) != len(results):
        missing = [i for i, r in enumerate(results) if r is None]
        raise RuntimeError(f"{what} lost samples {missing[:10]}")
    return out


def compute_metrics(
    results: Sequence[SampleResult], data_sources: Sequence[str | None], elapsed_s: float | None = None
) -> dict[str, float]:
    """Aggregate metrics: counts by status and failure reason, mean score overall and per data source."""
    m: dict[str, float] = {"reward/num_samples": float(len(results))}
    # One pass over the batch (it runs once per batch of every call); components in a second one
    # only where a result has any.
    counts = {"ok": 0, "abstained": 0, "failed": 0}
    reasons: dict[str | None, int] = {}
    ok_by_source: dict[str | None, list[float]] = {}
    with_components = False
    for r, ds in zip(results, data_sources, strict=True):
        status = r.status
        if status == "ok":
            counts["ok"] += 1
            # An "ok" result always has a float score (SampleResult's contract); the test narrows the type.
            if r.score is not None:
                scores = ok_by_source.get(ds)
                if scores is None:
                    scores = ok_by_source[ds] = []
                scores.append(r.score)
        elif status == "failed":
            counts["failed"] += 1
            reasons[r.reason] = reasons.get(r.reason, 0) + 1
        elif status == "abstained":
            counts["abstained"] += 1
        if r.components:
            with_components = True
    for s in ("ok", "abstained", "failed"):
        m[f"reward/num_{s}"] = float(counts[s])
    for reason, n in sorted(reasons.items(), key=lambda kv: str(kv[0])):
        m[f"reward/failed/{reason}"] = float(n)
    by_source: dict[str, list[float]] = defaultdict(list)
    for ds, vals in ok_by_source.items():
        by_source[ds or "unknown"].extend(vals)
    ok = [v for vals in by_source.values() for v in vals]
    if ok:  # (fmean sums exactly: the order of the values does not change it)
        m["reward/mean"] = statistics.fmean(ok)
        m["reward/max"] = max(ok)
        m["reward/min"] = min(ok)
    for ds, vals in sorted(by_source.items()):
        m[f"reward/{ds}/mean"] = statistics.fmean(vals)
    if not with_components:
        return _with_timing(m, len(results), elapsed_s)
    comp: dict[str, list[float]] = defaultdict(list)
    comp_by_source: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r, ds in zip(results, data_sources, strict=True):
        for name, v in r.components.items():
            if v is not None:
                comp[name].append(v)
                comp_by_source[(ds or "unknown", name)].append(v)
    for name, vals in sorted(comp.items()):
        m[f"reward/component/{name}/mean"] = statistics.fmean(vals)
    for (ds, name), vals in sorted(comp_by_source.items()):
        m[f"reward/{ds}/component/{name}/mean"] = statistics.fmean(vals)
    return _with_timing(m, len(results), elapsed_s)


def _with_timing(m: dict[str, float], n: int, elapsed_s: float | None) -> dict[str, float]:
    if elapsed_s is not None:
        m["timing/total_s"] = elapsed_s
        if n and elapsed_s > 0:
            m["timing/samples_per_s"] = n / elapsed_s
    return m
