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
worker (a closure, a lambda) runs in this process instead, with a one-time warning.
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
import signal
import sys
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_ready
from typing import TYPE_CHECKING, Any

from rewardkit.batch import Sample
from rewardkit.executors.base import Executor, ScoreTask
from rewardkit.result import SampleResult
from rewardkit.runtime.worker import in_worker, mark_worker  # noqa: F401 - in_worker: public here too
from rewardkit.scoring import ainvoke, error_result, invoke, invoke_batch, signature_of

if TYPE_CHECKING:
    from rewardkit.config import RewardConfig
    from rewardkit.scoring import ScorerSpec

# Slots of a worker's shared state: the chunk it holds, the task it runs, when it last started or
# finished one (time.monotonic(), the same clock in every process on one machine).
_CHUNK, _CURRENT, _BEAT = 0, 1, 2
_IDLE = -1.0  # no task running (loading a chunk, or between chunks)
_SEVERAL = -2.0  # several async tasks in flight: which one hangs is unknown
_FLUSH_S = 0.05  # a worker sends finished results at least this often
_FIRST_CHUNK = 64  # most tasks per chunk before the cost of a task is known
_MAX_CHUNK = 1024
_CHUNK_S = 0.02  # once it is known, chunks hold about this much work: few round trips, fair shares
_STARTUP_S = 60.0  # a worker that has not picked up its first chunk by then is replaced
_ASYNC_GRACE = 0.5  # async tasks time out inside the worker; the parent kills only a blocked event loop


# ---------------------------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------------------------


def _die_with_parent(start_method: str) -> None:
    """Make sure this worker dies with the process that owns the pool, even while a scorer hangs.

    Under ``forkserver`` the worker's parent is the fork server, which exits when the owning
    process is gone *and* no worker holds its "alive" pipe: so the worker drops its copy of that
    pipe and asks Linux to SIGKILL it when the fork server exits (``PR_SET_PDEATHSIG``). Under
    ``spawn`` a watchdog thread exits when the parent process changes.
    """
    if start_method == "forkserver":
        try:
            from multiprocessing import forkserver

            server = forkserver._forkserver  # private, hence the guard
            if server._forkserver_pid is None and server._forkserver_alive_fd is not None:
                os.close(server._forkserver_alive_fd)
                server._forkserver_alive_fd = None
        except Exception:  # noqa: BLE001
            pass
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            if os.getppid() == 1:  # the fork server died before prctl took effect
                os._exit(1)
            return
        except Exception:  # noqa: BLE001 - not Linux: fall back to the watchdog
            pass
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="rewardkit-parent-watch", daemon=True).start()


def _limit_memory(limit_mb: int) -> None:
    """Cap the worker's address space at its current size plus ``limit_mb``."""
    import resource

    size = 0
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    size = int(line.split()[1]) * 1024
    except OSError:
        pass
    cap = size + limit_mb * 1024 * 1024
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


class _WorkerLoop:
    """What runs inside a worker process: receive a chunk, score it, send the results back."""

    def __init__(self, conn, state, max_input_chars, timeout_s, concurrency):
        self.conn = conn
        self.state = state
        self.max_input_chars = max_input_chars
        self.timeout_s = timeout_s
        self.concurrency = concurrency
        self.loop: asyncio.AbstractEventLoop | None = None
        self.retire = False

    def serve(self) -> None:
        while True:
            try:
                kind, chunk_id, payload = self.conn.recv()
            except (EOFError, OSError):
                return
            if kind == "stop":
                return
            self.state[_CURRENT] = _IDLE
            self.state[_CHUNK] = chunk_id
            self.state[_BEAT] = time.monotonic()
            try:
                items = pickle.loads(payload)
            except BaseException as e:  # noqa: BLE001 - e.g. the scorer's module fails to import here
                self.send(("load_error", chunk_id, f"{type(e).__name__}: {e}", None))
                continue
            if kind == "sync":
                self.run_sync(chunk_id, items)
            elif kind == "async":
                if self.loop is None:
                    self.loop = asyncio.new_event_loop()
                self.loop.run_until_complete(self.run_async(chunk_id, items))
                if self.retire:  # results are sent; exit now, whatever threads the stray task holds
                    os._exit(0)
            else:  # "batch": one call of a batch scorer
                spec, samples = items
                self.beat(0)
                try:
                    results = invoke_batch(spec, samples)
                except BaseException as e:  # noqa: BLE001
                    results = [error_result(e)] * len(samples)
                self.send(("results", chunk_id, list(enumerate(results)), None))
            self.state[_CURRENT] = _IDLE

    def beat(self, current: float) -> None:
        self.state[_CURRENT] = current
        self.state[_BEAT] = time.monotonic()

    def run_sync(self, chunk_id: int, items: list) -> None:
        out: list[tuple[int, SampleResult]] = []
        last = time.monotonic()
        cpu = time.process_time()  # CPU, not wall: the cost of a task, however busy the machine is
        for i, (spec, sample) in enumerate(items):
            now = time.monotonic()
            if out and now - last > _FLUSH_S:
                self.send(("results", chunk_id, out, None))
                out, last = [], now
            self.beat(i)
            try:
                r = invoke(spec, sample, self.max_input_chars)
            except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt/CancelledError from a scorer
                r = error_result(e)
            out.append((i, r))
        self.send(("results", chunk_id, out, (time.process_time() - cpu) / max(1, len(items))))

    async def run_async(self, chunk_id: int, items: list) -> None:
        from rewardkit.runtime.deadlines import LeftRunning, wait_for_unqueued

        sem = asyncio.Semaphore(self.concurrency)
        out: list[tuple[int, SampleResult]] = []
        last = [time.monotonic()]
        where = 0.0 if len(items) == 1 else _SEVERAL

        async def heartbeat() -> None:
            # Deadlines of async tasks are kept here (time queued for a sandbox slot excluded); the
            # parent only has to catch a blocked event loop, which stops this beat.
            while True:
                self.beat(where)
                await asyncio.sleep(_FLUSH_S)

        async def one(i: int, spec: ScorerSpec, sample: Sample) -> None:
            async with sem:
                self.beat(where)
                try:
                    r = await wait_for_unqueued(
                        lambda: ainvoke(spec, sample, self.max_input_chars), self.timeout_s
                    )
                except (asyncio.TimeoutError, TimeoutError) as e:
                    r = SampleResult.failed("timeout", f"async scorer passed its {self.timeout_s}s deadline")
                    if isinstance(e, LeftRunning):
                        self.retire = True  # leave once the chunk is done: the parent starts a fresh worker
                except BaseException as e:  # noqa: BLE001
                    r = error_result(e)
                self.beat(where)
                out.append((i, r))
                if time.monotonic() - last[0] > _FLUSH_S:
                    self.send(("results", chunk_id, out[:], None))
                    out.clear()
                    last[0] = time.monotonic()

        beating = asyncio.ensure_future(heartbeat())
        try:
            await asyncio.gather(*(one(i, spec, sample) for i, (spec, sample) in enumerate(items)))
        finally:
            beating.cancel()
        self.send(("results", chunk_id, out, None))

    def send(self, msg: tuple) -> None:
        try:
            data = pickle.dumps(msg, pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - a scorer returned extras that do not pickle
            data = pickle.dumps(_sendable(msg), pickle.HIGHEST_PROTOCOL)
        self.conn.send_bytes(data)


def _sendable(msg: tuple) -> tuple:
    kind, chunk_id, results, busy = msg
    if kind != "results":
        return (kind, chunk_id, str(results), busy)
    clean = []
    for i, r in results:
        try:
            pickle.dumps(r, pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001
            r = SampleResult.failed(
                "invalid_return", f"the scorer's result cannot be sent back from the worker: {e}"
            )
        clean.append((i, r))
    return (kind, chunk_id, clean, busy)


def _worker_main(
    conn, state, max_input_chars, timeout_s, concurrency, memory_limit_mb, start_method, environ=None
) -> None:
    """Entry point of a worker process."""
    mark_worker()
    if environ is not None:
        # A forkserver child inherits the fork server's environment, frozen when the first pool
        # started; take the owning process's environment as it is now instead.
        os.environ.clear()
        os.environ.update(environ)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        os.setsid()  # its own process group, so that a kill also reaches what a scorer started
    except OSError:
        pass
    _die_with_parent(start_method)
    if memory_limit_mb:
        _limit_memory(memory_limit_mb)
    _WorkerLoop(conn, state, max_input_chars, timeout_s, concurrency).serve()


# ---------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------


@dataclass
class _Chunk:
    kind: str  # "sync" | "async" | "batch"
    tasks: list[int]  # indices into the job
    isolated: bool = False  # re-sent alone to find out which task hangs or crashes


@dataclass
class _Worker:
    process: Any
    conn: Any
    state: Any
    chunk: _Chunk | None = None
    chunk_id: int = -1
    sent_at: float = 0.0
    left: int = 0
    received: bool = False  # has it ever taken a chunk (tells a start failure from a crash)


class _Job:
    """The state of one batch in the supervisor."""

    def __init__(self, items: list[tuple[ScorerSpec, Sample]], limit_s: float | None):
        self.items = items
        self.results: list[SampleResult | None] = [None] * len(items)
        self.attempts = [0] * len(items)
        self.queue: deque[_Chunk] = deque()
        self.unresolved = len(items)
        self.fallback: list[int] = []  # tasks a worker could not load: run in this process
        self._fallback: set[int] = set()
        self.fallback_errors: dict[str, str] = {}
        self.limit_s = limit_s  # per-task deadline (per-call for batch chunks)
        self.cancel = threading.Event()

    def resolve(self, i: int, result: SampleResult) -> bool:
        if self.results[i] is not None or i in self._fallback:
            return False
        self.results[i] = result
        self.unresolved -= 1
        return True

    def open(self, tasks: Sequence[int]) -> list[int]:
        return [i for i in tasks if self.results[i] is None and i not in self._fallback]

    def fall_back(self, i: int) -> None:
        if i not in self._fallback:
            self._fallback.add(i)
            self.fallback.append(i)


# The fork server and the workers must not run the parent's main script again: an unguarded script
# (no `if __name__ == "__main__":`, common for training scripts) would start a second training run
# there. Scorers travel by reference, so workers never need it. The fork server preloads only this
# module, which, seeing this variable there, gives the fork server's own (empty) __main__ the
# parent's file name or module name: multiprocessing then takes it as already loaded in every worker.
_MAIN_ENV = "REWARDKIT_PARENT_MAIN"


def _prepare_fork_server(ctx) -> None:
    """Before the fork server starts: preload this module, not ``__main__``, and name the parent's main."""
    from multiprocessing import process

    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    path = getattr(main, "__file__", None)
    if name:
        os.environ[_MAIN_ENV] = f"name:{name}"
    elif path:
        if not os.path.isabs(path) and process.ORIGINAL_DIR is not None:
            path = os.path.join(process.ORIGINAL_DIR, path)
        os.environ[_MAIN_ENV] = f"path:{os.path.normpath(path)}"
    ctx.set_forkserver_preload(["rewardkit.executors.process"])


def _adopt_parent_main() -> None:
    """In the fork server (an interpreter started with ``-c``): pose as the parent's main module."""
    marker = os.environ.get(_MAIN_ENV)
    main = sys.modules.get("__main__")
    if not marker or main is None or getattr(main, "__file__", None) or getattr(main, "__spec__", None):
        return
    del os.environ[_MAIN_ENV]  # not for the workers' own subprocesses
    kind, _, value = marker.partition(":")
    if kind == "path":
        main.__file__ = value
    elif kind == "name":
        import importlib.machinery

        main.__spec__ = importlib.machinery.ModuleSpec(value, None)


_adopt_parent_main()

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


class ProcessExecutor(Executor):
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
        remote, local = self._split(tasks)
        results: list[SampleResult | None] = [None] * len(tasks)
        jobs = []
        job = None
        if remote:
            job = _Job([(tasks[i].spec, tasks[i].sample) for i in remote], self.config.timeout_s)
            self._plan(job)
            jobs.append(self._supervise_async(job))
        if local:
            jobs.append(self._run_here([tasks[i] for i in local]))
        done = await asyncio.gather(*jobs)
        if job is not None and job.fallback:
            self._warn_fallback(job)
            back = await self._run_here([ScoreTask(*job.items[i]) for i in job.fallback])
            for i, r in zip(job.fallback, back, strict=True):
                job.results[i] = r
        parts = iter(done)
        if remote:
            for i, r in zip(remote, next(parts), strict=True):
                results[i] = r
        if local:
            for i, r in zip(local, next(parts), strict=True):
                results[i] = r
        return results  # type: ignore[return-value]

    async def run_batch(self, spec: ScorerSpec, samples: Sequence[Sample]) -> list[SampleResult]:
        """One call of a batch scorer in a worker, bounded by ``batch_timeout_s`` (else ``timeout_s``)."""
        if not samples:
            return []
        try:
            pickle.dumps((spec, list(samples)), pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001
            self._warn_once(spec.name, f"cannot be sent to a worker process ({e})")
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
    def _split(self, tasks: Sequence[ScoreTask]) -> tuple[list[int], list[int]]:
        """Indices that can go to workers, and those whose scorer cannot be pickled."""
        sendable: dict[int, bool] = {}
        remote, local = [], []
        for i, t in enumerate(tasks):
            ok = sendable.get(id(t.spec))
            if ok is None:
                try:
                    pickle.dumps(t.spec, pickle.HIGHEST_PROTOCOL)
                    ok = True
                except Exception as e:  # noqa: BLE001 - closures, lambdas, unpicklable kwargs
                    ok = False
                    self._warn_once(t.spec.name, f"cannot be sent to a worker process ({e})")
                sendable[id(t.spec)] = ok
            (remote if ok else local).append(i)
        return remote, local

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

    # -- the supervisor ----------------------------------------------------------------------------
    async def _supervise_async(self, job: _Job, batch_limit: bool = True) -> list[SampleResult | None]:
        # A daemon thread of our own, not asyncio.to_thread: the interpreter joins the default
        # executor's threads at exit, which would wait for a hung batch before our atexit hook runs.
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def settle(value: Any, error: BaseException | None) -> None:
            if fut.done():
                return
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(value)

        def target() -> None:
            value, error = None, None
            try:
                value = self._supervise(job, batch_limit)
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
                error = e
            try:
                loop.call_soon_threadsafe(settle, value, error)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

        threading.Thread(target=target, name="rewardkit-supervisor", daemon=True).start()
        try:
            return await fut
        except asyncio.CancelledError:
            job.cancel.set()
            raise

    def _supervise(self, job: _Job, batch_limit: bool) -> list[SampleResult | None]:
        with self._lock:
            self._start_failures = 0
            bt = self.config.batch_timeout_s if batch_limit else None
            deadline = time.monotonic() + bt if bt else None
            while job.unresolved > len(job.fallback):
                now = time.monotonic()
                if job.cancel.is_set() or self._shutdown.is_set():
                    why = "the executor was closed" if self._shutdown.is_set() else "the batch was cancelled"
                    self._abandon(job, "error", why)
                    break
                if deadline is not None and now >= deadline:
                    self._abandon(job, "timeout", f"the batch passed its {bt}s deadline (batch_timeout_s)")
                    break
                self._dispatch(job)
                busy = [w for w in self._workers if w.chunk is not None]
                if not busy:
                    if job.queue:  # no worker could be started
                        self._abandon(
                            job,
                            "crash",
                            "worker processes cannot start (a main script must guard its entry point "
                            "with `if __name__ == '__main__':`, since workers import it)",
                        )
                    break
                wake = min(0.5, *(self._time_left(job, w, now) for w in busy))
                if deadline is not None:
                    wake = min(wake, deadline - now)
                handles = {w.conn: w for w in busy} | {w.process.sentinel: w for w in busy}
                for h in wait_ready(list(handles), max(0.0, wake)):
                    w = handles[h]
                    if w.chunk is not None:
                        self._service(job, w)
                now = time.monotonic()
                for w in busy:
                    if w.chunk is not None and self._time_left(job, w, now) <= 0:
                        self._on_timeout(job, w, now)
        return job.results

    def _limit(self, job: _Job, w: _Worker) -> float | None:
        if job.limit_s is None:
            return None
        if w.chunk is not None and w.chunk.kind == "async":
            return job.limit_s * 1.1 + _ASYNC_GRACE
        return job.limit_s

    def _time_left(self, job: _Job, w: _Worker, now: float) -> float:
        if w.state[_CHUNK] != w.chunk_id:  # not picked up yet: a worker may still be starting
            return w.sent_at + max(_STARTUP_S, job.limit_s or 0.0) - now
        limit = self._limit(job, w)
        if limit is None:
            return math.inf
        return max(w.state[_BEAT], w.sent_at) + limit - now

    def _start_worker(self) -> _Worker | None:
        if self.start_method == "forkserver" and not self._workers:
            _prepare_fork_server(self._ctx)
        parent, child = self._ctx.Pipe(duplex=True)
        state = self._ctx.RawArray("d", [-1.0, _IDLE, 0.0])
        proc = self._ctx.Process(
            target=_worker_main,
            args=(
                child,
                state,
                self.config.max_input_chars,
                self.config.timeout_s,
                self._per_worker_concurrency(),
                self.memory_limit_mb,
                self.start_method,
                {k: v for k, v in os.environ.items() if k != _MAIN_ENV},
            ),
            name="rewardkit-worker",
            daemon=True,
        )
        try:
            proc.start()
        except Exception:  # noqa: BLE001 - e.g. out of processes
            parent.close()
            child.close()
            return None
        finally:
            os.environ.pop(_MAIN_ENV, None)  # the fork server has it now
        child.close()
        self.stats["started"] += 1
        w = _Worker(proc, parent, state)
        self._workers.append(w)
        return w

    def _dispatch(self, job: _Job) -> None:
        for dead in [w for w in self._workers if w.chunk is None and not w.process.is_alive()]:
            self._reap(dead)  # died while idle (e.g. killed from outside): nothing to blame
        while job.queue:
            w = next((w for w in self._workers if w.chunk is None), None)
            if w is None:
                if len(self._workers) >= self.num_workers or self._start_failures >= 3:
                    return
                w = self._start_worker()
                if w is None:
                    self._start_failures += 1
                    continue
            chunk = job.queue.popleft()
            chunk.tasks = job.open(chunk.tasks)
            if not chunk.tasks:
                continue
            if chunk.kind == "sync" and not chunk.isolated:
                size = self._chunk_size(job, chunk)
                if len(chunk.tasks) > size:
                    job.queue.appendleft(_Chunk("sync", chunk.tasks[size:]))
                    chunk = _Chunk("sync", chunk.tasks[:size])
            payload = self._payload(job, chunk)
            if payload is None:
                continue
            w.chunk_id = next(self._ids)
            try:
                w.conn.send((chunk.kind, w.chunk_id, payload))
            except (OSError, ValueError):  # it died while idle
                job.queue.appendleft(chunk)
                self._reap(w)
                continue
            w.chunk, w.sent_at, w.left = chunk, time.monotonic(), len(chunk.tasks)

    def _payload(self, job: _Job, chunk: _Chunk) -> bytes | None:
        if chunk.kind == "batch":
            spec = job.items[0][0]
            items: Any = (spec, [job.items[i][1] for i in chunk.tasks])
        else:
            fields: dict[int, tuple[str, ...] | None] = {}
            items = []
            for spec, sample in (job.items[i] for i in chunk.tasks):
                keep = fields.get(id(spec), ())
                if keep == ():
                    keep = fields[id(spec)] = _fields_read(spec)
                items.append((spec, sample if keep is None else _slim(sample, keep)))
        try:
            return pickle.dumps(items, pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - a sample that does not pickle (specs were checked)
            pass
        if chunk.kind == "batch":
            for i in chunk.tasks:
                job.fall_back(i)
            return None
        good = []
        for i in chunk.tasks:
            try:
                pickle.dumps(job.items[i], pickle.HIGHEST_PROTOCOL)
                good.append(i)
            except Exception as e:  # noqa: BLE001
                job.resolve(
                    i, SampleResult.failed("error", f"sample cannot be sent to a worker process: {e}")
                )
        if good:
            job.queue.appendleft(_Chunk(chunk.kind, good, chunk.isolated))
        return None

    # -- reading workers ---------------------------------------------------------------------------
    def _service(self, job: _Job, w: _Worker) -> None:
        """Read what a worker sent; handle its death if it died."""
        if not self._drain(job, w):
            self._on_death(job, w)
        elif w.chunk is not None and not w.process.is_alive():
            self._drain(job, w)
            self._on_death(job, w)

    def _drain(self, job: _Job, w: _Worker) -> bool:
        """Handle every message waiting on ``w``'s pipe. False when the pipe is closed (it died)."""
        try:
            while w.conn.poll():
                data = w.conn.recv_bytes()
                try:
                    msg = pickle.loads(data)
                except Exception as e:  # noqa: BLE001 - e.g. an extra of a class this process lacks
                    for i in job.open(w.chunk.tasks if w.chunk else []):
                        job.resolve(i, SampleResult.failed("error", f"cannot read the worker's result: {e}"))
                    self._kill(w)
                    self._reap(w)
                    return True
                self._handle(job, w, msg)
        except (EOFError, OSError):
            return False
        return True

    def _handle(self, job: _Job, w: _Worker, msg: tuple) -> None:
        kind, chunk_id, body, busy = msg
        chunk = w.chunk
        if chunk is None or chunk_id != w.chunk_id:
            return  # a late message for a chunk already handled
        if kind == "load_error":
            for i in job.open(chunk.tasks):
                job.fall_back(i)
                job.fallback_errors.setdefault(job.items[i][0].name, body)
            w.chunk = None
            w.received = True
            return
        w.received = True
        for pos, result in body:
            if job.resolve(chunk.tasks[pos], result):
                w.left -= 1
        if busy is not None:  # CPU seconds per task of a finished sync chunk: sizes the next chunks
            self._task_s = busy if self._task_s is None else 0.7 * self._task_s + 0.3 * busy
        if w.left <= 0 or not job.open(chunk.tasks):
            w.chunk = None
            self._start_failures = 0

    # -- failures ----------------------------------------------------------------------------------
    def _kill(self, w: _Worker) -> None:
        pid = w.process.pid
        try:
            if pid is not None and os.getpgid(pid) == pid:  # the worker leads its own group
                os.killpg(pid, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        try:
            w.process.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass
        w.process.join(timeout=5)

    def _reap(self, w: _Worker) -> None:
        w.chunk = None
        if w.process.is_alive():
            self._kill(w)
        else:
            w.process.join(timeout=1)
        try:
            w.conn.close()
        except Exception:  # noqa: BLE001
            pass
        with_w = [x for x in self._workers if x is not w]
        self._workers = with_w
        try:
            w.process.close()
        except Exception:  # noqa: BLE001
            pass

    def _requeue(self, job: _Job, tasks: Sequence[int], kind: str, isolated: bool) -> None:
        tasks = job.open(tasks)
        if not tasks:
            return
        if isolated:
            job.queue.extendleft(_Chunk(kind, [i], True) for i in reversed(tasks))
        else:
            job.queue.appendleft(_Chunk(kind, list(tasks)))

    def _on_timeout(self, job: _Job, w: _Worker, decided_at: float) -> None:
        chunk = w.chunk
        assert chunk is not None
        limit = self._limit(job, w)
        self._kill(w)
        self.stats["killed"] += 1
        self._drain(job, w)
        current, beat = w.state[_CURRENT], max(w.state[_BEAT], w.sent_at)
        ours = w.state[_CHUNK] == w.chunk_id
        overdue = limit is not None and decided_at - beat >= limit
        self._reap(w)
        open_tasks = job.open(chunk.tasks)
        msg = f"scorer passed its {job.limit_s}s deadline and its worker process was killed"
        if not ours:  # it never picked the chunk up: a start failure, not the samples' fault
            self._start_failures += 1
            job.queue.appendleft(_Chunk(chunk.kind, open_tasks, chunk.isolated))
        elif chunk.kind == "batch":
            for i in open_tasks:
                job.resolve(i, SampleResult.failed("timeout", f"batch {msg}"))
        elif not overdue:  # it moved on just before the kill: nobody to blame
            self._requeue(job, open_tasks, chunk.kind, False)
        elif current == _IDLE:
            for i in open_tasks:
                job.resolve(
                    i,
                    SampleResult.failed(
                        "timeout", f"loading the scorer in a worker process took longer than {job.limit_s}s"
                    ),
                )
        elif current == _SEVERAL:
            self._requeue(job, open_tasks, chunk.kind, True)
        else:
            culprit = chunk.tasks[int(current)]
            job.resolve(culprit, SampleResult.failed("timeout", msg))
            self._requeue(job, [i for i in open_tasks if i != culprit], chunk.kind, False)

    def _on_death(self, job: _Job, w: _Worker) -> None:
        chunk = w.chunk
        if chunk is None:
            self._reap(w)
            return
        w.process.join(timeout=5)
        code = w.process.exitcode
        current = w.state[_CURRENT]
        ours = w.state[_CHUNK] == w.chunk_id
        started_before = w.received
        self._reap(w)
        open_tasks = job.open(chunk.tasks)
        if not open_tasks:
            return
        if not ours:  # it died before taking the chunk up: not the samples' fault
            if not started_before:
                self._start_failures += 1
            job.queue.appendleft(_Chunk(chunk.kind, open_tasks, chunk.isolated))
            return
        self.stats["crashed"] += 1
        how = _describe_exit(code)
        if chunk.kind == "batch" or current in (_IDLE, _SEVERAL):
            suspects = open_tasks
        else:
            suspects = [chunk.tasks[int(current)]]
            self._requeue(job, [i for i in open_tasks if i not in suspects], chunk.kind, False)
        retry = []
        for i in suspects:
            job.attempts[i] += 1
            if job.attempts[i] > self.config.max_retries:
                tries = job.attempts[i]
                job.resolve(
                    i,
                    SampleResult.failed(
                        "crash", f"worker process {how} while scoring this sample ({tries} attempt(s))"
                    ),
                )
            else:
                retry.append(i)
        isolated = current == _SEVERAL and chunk.kind != "batch"
        self._requeue(job, retry, chunk.kind, isolated)

    def _abandon(self, job: _Job, reason: str, message: str) -> None:
        for w in [w for w in self._workers if w.chunk is not None]:
            self._drain(job, w)
            self._kill(w)
            self.stats["killed"] += 1
            self._reap(w)
        job.queue.clear()
        for i in range(len(job.items)):
            if job.results[i] is None:
                job.resolve(i, SampleResult.failed(reason, message))

    def _stop_workers(self) -> None:
        workers, self._workers = self._workers, []
        for w in workers:
            if w.chunk is None:
                try:
                    w.conn.send(("stop", -1, b""))
                except Exception:  # noqa: BLE001
                    pass
        end = time.monotonic() + 1.0
        for w in workers:
            w.process.join(timeout=max(0.0, end - time.monotonic()))
            if w.process.exitcode is None:
                self._kill(w)
            try:
                w.conn.close()
                w.process.close()
            except Exception:  # noqa: BLE001
                pass


_SLIM_FIELDS = ("prompt", "data_source", "ground_truth", "extra_info")


def _fields_read(spec: ScorerSpec) -> tuple[str, ...] | None:
    """The optional sample fields a scorer reads; ``None`` when it may read them all."""
    sig = signature_of(spec.fn)
    if sig.var_kwargs or "sample" in sig.params:
        return None
    return tuple(f for f in _SLIM_FIELDS if f in sig.params)


def _slim(sample: Sample, keep: tuple[str, ...]) -> Sample:
    """The sample with only the fields the scorer reads, so that less crosses the pipe."""
    slim = Sample(sample.index, sample.response)
    for f in keep:
        setattr(slim, f, getattr(sample, f))
    return slim


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped responding"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if -code == signal.SIGKILL:
            return f"was killed by {name} (the out-of-memory killer?)"
        return f"was killed by {name}"
    return f"exited with code {code}"
