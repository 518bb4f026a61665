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
from rewardkit.executors.process_job import _Chunk, _Job, _Worker
from rewardkit.executors.process_supervisor import Supervisor
from rewardkit.result import SampleResult
from rewardkit.runtime.worker import in_worker
from rewardkit.scoring import invoke_batch, signature_of

if TYPE_CHECKING:
    from rewardkit.config import RewardConfig
    from rewardkit.scoring import ScorerSpec

__all__ = ["ProcessExecutor", "in_worker"]

_FIRST_CHUNK = 64  # most tasks per chunk before the cost of a task is known
_MAX_CHUNK = 1024
_CHUNK_S = 0.05  # once it is known, chunks hold about this much work: few round trips, fair shares
_MIN_CHUNK_S = 0.005  # ... and are not cut finer than this to spread a batch: a round trip costs ~0.1 ms
_WARM = {"rewardkit.scorers.math_boxed": ("math_verify",)}  # imported lazily by these scorers
_COALESCE = 16  # calls of at most this many tasks may share a job (and chunks) with concurrent ones

_live: weakref.WeakSet[ProcessExecutor] = weakref.WeakSet()
_uids = itertools.count()


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

    Concurrent :meth:`run` calls (from any threads and event loops) share the pool fairly: idle
    workers take the next chunk of each call in turn, and small calls that arrive while the pool is
    busy travel together in shared chunks.
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
        self._init_dispatcher()
        self._uid = f"{os.getpid()}-{next(_uids)}"
        self._ids = itertools.count()
        self._warned: set[str] = set()
        self._sendable: dict[int, ScorerSpec] = {}  # specs already checked, by id (kept alive here)
        self._start_failures = 0
        self._cost: dict[str, float] = {}  # moving average of a sync task's CPU cost, by scorer name
        #: Counters since creation: worker starts, kills at a deadline, crashes seen, chunks sent.
        self.stats = {"started": 0, "killed": 0, "crashed": 0, "chunks": 0}
        _live.add(self)

    # -- public API --------------------------------------------------------------------------------
    async def run(self, tasks: Sequence[ScoreTask]) -> list[SampleResult]:
        if not tasks:
            return []
        self._check_sendable(t.spec for t in tasks)
        job, caller = await self._submit_async(
            {
                "items": [(t.spec, t.sample) for t in tasks],
                "limit_s": self.config.timeout_s,
                "batch_timeout_s": self.config.batch_timeout_s,
                "coalesce": len(tasks) <= _COALESCE,
            }
        )
        results = job.results[caller.lo : caller.hi]
        if caller.fallback:
            self._warn_fallback(job)
            back = await self._run_here([ScoreTask(*job.items[i]) for i in caller.fallback])
            for i, r in zip(caller.fallback, back, strict=True):
                results[i - caller.lo] = r
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
        job, caller = await self._submit_async(
            {"items": [(spec, s) for s in samples], "kind": "batch", "limit_s": limit}
        )
        if caller.fallback:
            self._warn_fallback(job)
            return await asyncio.to_thread(invoke_batch, spec, samples)
        return job.results[caller.lo : caller.hi]  # type: ignore[return-value]

    def close(self) -> None:
        """Stop every worker (idle ones are asked to exit, busy ones are killed). Idempotent.

        A batch in progress ends at once: its unfinished samples fail with ``error``.
        """
        self._shutdown.set()
        with self._cv:
            thread = self._thread
            self._poke_locked()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)  # it fails what is in flight, kills busy workers, and exits
        self._stop_workers()
        with self._cv:
            if self._thread is None:
                self._shutdown.clear()  # usable again: the next batch starts a fresh pool

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
        for spec in specs:
            if self._sendable.get(id(spec)) is spec:
                continue
            try:
                pickle.dumps(spec, pickle.HIGHEST_PROTOCOL)
            except Exception as e:  # noqa: BLE001 - closures, lambdas, unpicklable kwargs
                raise ConfigError(
                    f"scorer {spec.name!r} cannot run in the process executor: it cannot be sent to a "
                    f"worker process ({type(e).__name__}: {e}). Define it as a module-level function "
                    "(in a module or a reward file) with picklable keyword arguments, or use "
                    "executor: inline (no deadline that can stop a hung scorer)."
                ) from e
            if len(self._sendable) > 1024:
                self._sendable.clear()
            self._sendable[id(spec)] = spec

    def _plan(self, job: _Job, tasks: list[int]) -> None:
        """Queue chunks for ``tasks`` of ``job``; a coalesced job not yet sent grows its chunks."""
        sync = [i for i in tasks if not signature_of(job.items[i][0].fn).is_async]
        asyn = [i for i in tasks if signature_of(job.items[i][0].fn).is_async]
        if sync:  # cut into chunks at dispatch time, sized by what a task has been costing
            grow = next((c for c in job.queue if c.kind == "sync"), None)
            if grow is not None:
                grow.tasks.extend(sync)
            else:
                job.queue.append(_Chunk("sync", sync))
        if asyn:
            size = self.chunk_size or max(
                1, min(4 * self._per_worker_concurrency(), math.ceil(len(asyn) / self.num_workers))
            )
            last = job.queue[-1] if job.queue and job.queue[-1].kind == "async" else None
            if last is not None and len(last.tasks) < size:
                room = size - len(last.tasks)
                last.tasks.extend(asyn[:room])
                asyn = asyn[room:]
            job.queue.extend(_Chunk("async", asyn[k : k + size]) for k in range(0, len(asyn), size))

    def _chunk_size(self, job: _Job, chunk: _Chunk) -> int:
        if self.chunk_size:
            return self.chunk_size
        left = sum(len(c.tasks) for c in job.queue) + len(chunk.tasks)
        cost = self._cost.get(job.items[chunk.tasks[0]][0].name)
        if cost is None:
            split = self.num_workers * (1 if job.coalesced else 4)
            return max(1, min(_FIRST_CHUNK, math.ceil(left / split)))
        # Small calls coalesced in a job want one short turn each, not a share of every worker; a
        # large batch is cut into at least two chunks per worker, so that all end about together.
        fair = left if job.coalesced else math.ceil(left / (self.num_workers * 2))
        cost = max(cost, 1e-6)
        return max(1, min(_MAX_CHUNK, math.ceil(_CHUNK_S / cost), max(fair, int(_MIN_CHUNK_S / cost))))

    def _preload(self) -> list[str]:
        """Built-in scorer modules the jobs in flight use, and what they import on first call: loaded
        once in the fork server when it starts, so that every worker forks warm."""
        mods: set[str] = set()
        for spec in {id(s): s for job in self._jobs for s, _ in job.items}.values():
            mod = (spec.ref or "").partition(":")[0]
            if mod.startswith("rewardkit.scorers."):
                mods.add(mod)
                mods.update(_WARM.get(mod, ()))
        return sorted(mods)

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
