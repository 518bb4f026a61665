"""The process executor: scorers run in a pool of worker processes, with deadlines that really stop them.

A small supervisor instead of :class:`concurrent.futures.ProcessPoolExecutor`, which can neither kill
one hung task nor survive a worker that dies. Each worker is a ``multiprocessing`` process (the
``forkserver`` start method where available, else ``spawn``: both safe next to threads and event
loops) with a pipe to the parent and a small shared-memory slot where it writes which task it is
running and since when. The parent sends chunks of tasks, reads results, and:

* kills (``SIGKILL``) a worker whose current task is past ``timeout_s``: that sample fails with
  ``timeout``, the rest of its chunk goes to another worker;
* replaces a worker that died (segfault, ``os._exit``, out-of-memory kill): the sample it held is
  retried ``max_retries`` times on a fresh worker, then fails with ``crash``;
* stops the whole batch at ``batch_timeout_s``: unfinished samples fail with ``timeout``.

Scorers travel by reference (see :mod:`rewardkit.scoring`). A scorer that cannot be sent to a
worker (a closure, a lambda, unpicklable kwargs) is a :class:`~rewardkit.errors.ConfigError`: running
it in this process instead would lose the deadline that can stop it.

The worker side is :mod:`rewardkit.executors.process_worker`, the supervision loop
:mod:`rewardkit.executors.process_supervisor`; this module is the executor (the pool) itself.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import math
import multiprocessing
import multiprocessing.util  # noqa: F401 - before our atexit hook, so that ours runs before its own
import os
import pickle
import threading
import warnings
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rewardkit.batch import Sample
from rewardkit.errors import ConfigError
from rewardkit.executors.base import Executor, ScoreTask
from rewardkit.executors.process_supervisor import Supervisor, _Chunk, _Job, _Worker
from rewardkit.result import SampleResult
from rewardkit.runtime.worker import in_worker
from rewardkit.scoring import invoke_batch, signature_of

if TYPE_CHECKING:
    from rewardkit.config import RewardConfig
    from rewardkit.scoring import ScorerSpec

__all__ = ["ProcessExecutor", "in_worker"]

_FIRST_CHUNK = 64  # most tasks per chunk before the cost of a task is known
_MAX_CHUNK = 1024
_CHUNK_S = 0.02  # once it is known, chunks hold about this much work: few round trips, fair shares

_live: weakref.WeakSet[ProcessExecutor] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for ex in list(_live):
        ex.close()


def _default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class ProcessExecutor(Supervisor, Executor):
    """Runs scorers in a pool of worker processes, started on first use and kept between batches.

    Per-sample deadline ``timeout_s`` (the worker is killed and replaced; the sample fails with
    ``timeout``), crash isolation with ``max_retries`` retries (then ``crash``), an optional
    ``batch_timeout_s`` for the whole batch, and ``max_concurrency`` async scorers in flight
    (spread over the workers). Keyword arguments override the config: ``num_workers``,
    ``memory_limit_mb`` (address-space cap per worker, above its size at start; also read from a
    ``worker_memory_mb`` config field when there is one), ``start_method`` (``forkserver`` or
    ``spawn``) and ``chunk_size`` (tasks per message; default adapts to the batch).

    Batches are run one at a time; concurrent :meth:`run` calls wait for each other.
    """

    name = "process"

    def __init__(
        self,
        config: RewardConfig,
        *,
        num_workers: int | None = None,
        memory_limit_mb: int | None = None,
        start_method: str | None = None,
        chunk_size: int | None = None,
    ):
        super().__init__(config)
        self.num_workers = max(1, num_workers or config.num_workers or _default_workers())
        self.memory_limit_mb = memory_limit_mb or getattr(config, "worker_memory_mb", None)
        if start_method is None:
            methods = multiprocessing.get_all_start_methods()
            start_method = "forkserver" if "forkserver" in methods else "spawn"
        if start_method not in ("forkserver", "spawn"):
            raise ValueError(f"start_method must be 'forkserver' or 'spawn', got {start_method!r}")
        self.start_method = start_method
        self.chunk_size = chunk_size
        self._ctx = multiprocessing.get_context(start_method)
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._shutdown = threading.Event()
        self._ids = itertools.count()
        self._warned: set[str] = set()
        self._start_failures = 0
        self._task_s: float | None = None  # moving average of a sync task's cost, round trip included
        #: Counters since creation: worker starts, kills at a deadline, crashes seen.
        self.stats = {"started": 0, "killed": 0, "crashed": 0}
        _live.add(self)

    # -- public API --------------------------------------------------------------------------------
    async def run(self, tasks: Sequence[ScoreTask]) -> list[SampleResult]:
        if not tasks:
            return []
        self._check_sendable(t.spec for t in tasks)
        job = _Job([(t.spec, t.sample) for t in tasks], self.config.timeout_s)
        self._plan(job)
        results = await self._supervise_async(job)
        if job.fallback:
            self._warn_fallback(job)
            back = await self._run_here([ScoreTask(*job.items[i]) for i in job.fallback])
            for i, r in zip(job.fallback, back, strict=True):
                results[i] = r
        return results  # type: ignore[return-value]

    async def run_batch(self, spec: ScorerSpec, samples: Sequence[Sample]) -> list[SampleResult]:
        """One call of a batch scorer in a worker, bounded by ``batch_timeout_s`` (else ``timeout_s``)."""
        if not samples:
            return []
        self._check_sendable([spec])
        try:
            pickle.dumps(list(samples), pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - the samples, not the scorer, do not pickle
            self._warn_once(spec.name, f"gets samples that cannot be sent to a worker process ({e})")
            return await asyncio.to_thread(invoke_batch, spec, samples)
        limit = self.config.batch_timeout_s or self.config.timeout_s
        job = _Job([(spec, s) for s in samples], limit)
        job.queue.append(_Chunk("batch", list(range(len(samples)))))
        await self._supervise_async(job, batch_limit=False)
        if job.fallback:
            self._warn_fallback(job)
            return await asyncio.to_thread(invoke_batch, spec, samples)
        return job.results  # type: ignore[return-value]

    def close(self) -> None:
        """Stop every worker (idle ones are asked to exit, busy ones are killed). Idempotent.

        A batch in progress ends at once: its unfinished samples fail with ``error``.
        """
        self._shutdown.set()
        got = self._lock.acquire(timeout=5)
        try:
            self._stop_workers()
        finally:
            if got:
                self._shutdown.clear()  # usable again: the next batch starts a fresh pool
                self._lock.release()

    def __del__(self) -> None:
        try:
            self._stop_workers()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers."""
        return [w.process.pid for w in self._workers if w.process.pid is not None]

    # -- planning ----------------------------------------------------------------------------------
    def _check_sendable(self, specs: Iterable[ScorerSpec]) -> None:
        """Raise :class:`ConfigError` for a scorer that cannot be pickled to a worker: running it here
        instead would lose the deadline that can stop it."""
        seen: set[int] = set()
        for spec in specs:
            if id(spec) in seen:
                continue
            seen.add(id(spec))
            try:
                pickle.dumps(spec, pickle.HIGHEST_PROTOCOL)
            except Exception as e:  # noqa: BLE001 - closures, lambdas, unpicklable kwargs
                raise ConfigError(
                    f"scorer {spec.name!r} cannot run in the process executor: it cannot be sent to a "
                    f"worker process ({type(e).__name__}: {e}). Define it as a module-level function "
                    "(in a module or a reward file) with picklable keyword arguments, or use "
                    "executor: inline (no deadline that can stop a hung scorer)."
                ) from e

    def _plan(self, job: _Job) -> None:
        sync = [i for i, (spec, _) in enumerate(job.items) if not signature_of(spec.fn).is_async]
        asyn = [i for i, (spec, _) in enumerate(job.items) if signature_of(spec.fn).is_async]
        if sync:  # cut into chunks at dispatch time, sized by what a task has been costing
            job.queue.append(_Chunk("sync", sync))
        if asyn:
            size = self.chunk_size or max(
                1, min(4 * self._per_worker_concurrency(), math.ceil(len(asyn) / self.num_workers))
            )
            job.queue.extend(_Chunk("async", asyn[k : k + size]) for k in range(0, len(asyn), size))

    def _chunk_size(self, job: _Job, chunk: _Chunk) -> int:
        if self.chunk_size:
            return self.chunk_size
        left = sum(len(c.tasks) for c in job.queue) + len(chunk.tasks)
        fair = math.ceil(left / (self.num_workers * 2))  # at least two chunks per worker
        if self._task_s is None:
            return max(1, min(_FIRST_CHUNK, math.ceil(left / (self.num_workers * 4))))
        return max(1, min(_MAX_CHUNK, fair, math.ceil(_CHUNK_S / max(self._task_s, 1e-6))))

    def _per_worker_concurrency(self) -> int:
        return max(1, self.config.max_concurrency // self.num_workers)

    async def _run_here(self, tasks: list[ScoreTask]) -> list[SampleResult]:
        from rewardkit.executors.inline import InlineExecutor

        return await InlineExecutor(self.config).run(tasks)

    def _warn_once(self, name: str, why: str) -> None:
        if name in self._warned:
            return
        self._warned.add(name)
        warnings.warn(
            f"rewardkit process executor: scorer {name!r} {why}; running it in this process, "
            "without a deadline that can stop it. Define it at module level to run it in workers.",
            RuntimeWarning,
            stacklevel=3,
        )

    def _warn_fallback(self, job: _Job) -> None:
        for name, err in job.fallback_errors.items():
            self._warn_once(name, f"cannot be loaded in a worker process ({err})")
