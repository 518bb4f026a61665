"""Counters of an HTTP backend (:class:`BackendMetrics`) and the latency window stalls are judged by."""

from __future__ import annotations

import math
import threading
from collections import Counter, deque
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[k]


class LatencyWindow:
    """The latencies of the last ``size`` successful attempts; its p90 is refreshed every 32 adds."""

    def __init__(self, size: int = 256):
        self._values: deque[float] = deque(maxlen=size)
        self._added = 0
        self.p90: float | None = None

    def add(self, latency_s: float) -> None:
        """Record one successful attempt's latency."""
        self._values.append(latency_s)
        self._added += 1
        if self._added % 32 == 0 or (self.p90 is None and len(self._values) >= 16):
            self.p90 = percentile(self._values, 90)


class BackendMetrics:
    """Counters accumulated across batches until :meth:`collect` returns and resets them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Zero every counter."""
        self.requests = 0
        self.retries = 0
        self.errors: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.latencies: list[float] = []
        self.samples = 0
        self.cache_hits = 0
        self.cache_errors = 0
        self.dedup_saved = 0
        self.truncated = 0
        self.judge_cut_off = 0
        self.reasks = 0
        self.stalled = 0
        self.hedged = 0

    def add(self, **counts: float) -> None:
        """Add to counters by name (``requests=1``, ``cache_hits=3``...)."""
        with self._lock:
            for k, v in counts.items():
                setattr(self, k, getattr(self, k) + v)

    def error(self, kind: str) -> None:
        """Count one failed attempt of ``kind`` (``timeout``, ``connection``, ``429``, ``5xx``...)."""
        with self._lock:
            self.errors[kind] += 1

    def sample(self, reason: str | None, latency_s: float | None) -> None:
        """Count one finished sample: its failure reason (``None`` if ok) and latency."""
        with self._lock:
            self.samples += 1
            if reason is not None:
                self.failures[reason] += 1
            if latency_s is not None:
                self.latencies.append(latency_s)

    def collect(self) -> dict[str, float]:
        """The metrics since the last call, then reset."""
        with self._lock:
            m: dict[str, float] = {
                "samples": float(self.samples),
                "requests": float(self.requests),
                "retries": float(self.retries),
                "tokens/prompt": float(self.prompt_tokens),
                "tokens/completion": float(self.completion_tokens),
                "cache/hits": float(self.cache_hits),
                "cache/errors": float(self.cache_errors),
                "dedup/saved": float(self.dedup_saved),
                "truncated": float(self.truncated),
            }
            for name in ("judge_cut_off", "reasks", "stalled", "hedged"):
                if getattr(self, name):
                    m[name] = float(getattr(self, name))
            for kind, n in sorted(self.errors.items()):
                m[f"errors/{kind}"] = float(n)
            for reason, n in sorted(self.failures.items()):
                m[f"failed/{reason}"] = float(n)
            if self.latencies:
                m["latency/p50_s"] = percentile(self.latencies, 50)
                m["latency/p99_s"] = percentile(self.latencies, 99)
            self.reset()
            return m
