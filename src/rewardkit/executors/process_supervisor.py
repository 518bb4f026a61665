"""The supervisor of the process executor: one dispatcher thread that shares the worker pool among
every job in flight, sends chunks to worker processes, reads their results, and kills and replaces
workers past a deadline or dead, failing only the samples they held.

Concurrent calls (a server's requests, a trainer's per-sample calls) each get a job, or join a
coalesced one (:mod:`rewardkit.executors.process_job`); idle workers take the next chunk of the
jobs in turn (round robin), so a slow or hanging batch holds at most its share of the pool.
:class:`Supervisor` is the parent side of :mod:`rewardkit.executors.process_worker`;
:class:`~rewardkit.executors.process.ProcessExecutor` builds on it.
"""

from __future__ import annotations

import asyncio
import math
import os
import pickle
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import wait as wait_ready
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import TYPE_CHECKING, Any

from rewardkit.executors import process_tree
from rewardkit.executors.process_failures import Failures
from rewardkit.executors.process_job import _Caller, _Chunk, _Job, _Worker
from rewardkit.executors.process_worker import (
    _BEAT,
    _CHUNK,
    _CURRENT,
    _IDLE,
    _LIMIT,
    _MAIN_ENV,
    _NO_LIMIT,
    WARM_ENV,
    _fields_read,
    _prepare_fork_server,
    _slim,
    _worker_main,
)
from rewardkit.result import SampleResult

if TYPE_CHECKING:
    from rewardkit.config import RewardConfig

_STARTUP_S = 60.0  # a worker that has not picked up its first chunk by then is replaced
_ASYNC_GRACE = 0.5  # async tasks time out inside the worker; the parent kills only a blocked event loop
_STEAL_S = 0.05  # a task running this long while a worker is free: the rest of its chunk moves
_MERGE_MAX = 4096  # most tasks of coalesced small calls in one job
_WINDOW_S = 0.002  # in a burst of small calls, a coalesced job waits this long for more to join...
_BURST_S = 0.01  # ... a burst: small calls less than this apart
_WINDOW_FULL = 256  # ... unless it has this many tasks already


class Supervisor(Failures):
    """The dispatcher over a pool of worker processes (the parent side); mixed into
    :class:`~rewardkit.executors.process.ProcessExecutor`, which holds the pool's state."""

    config: RewardConfig
    num_workers: int
    memory_limit_mb: int | None
    start_method: str
    chunk_size: int | None
    stats: dict[str, int]
    _workers: list[_Worker]
    _uid: str
    _ctx: SpawnContext | ForkServerContext
    _ids: Iterator[int]
    _cost: dict[str, float]  # moving average of a sync task's CPU cost, by scorer name

    if TYPE_CHECKING:  # the planning half, in ProcessExecutor

        def _plan(self, job: _Job, tasks: list[int]) -> None: ...

        def _chunk_size(self, job: _Job, chunk: _Chunk) -> int: ...

        def _preload(self) -> list[str]: ...

        def _per_worker_concurrency(self) -> int: ...

    def _init_dispatcher(self) -> None:
        self._cv = threading.Lock()  # guards the inbox and the dispatcher thread's handle
        self._inbox: list[_Caller] = []
        self._thread: threading.Thread | None = None
        self._wake_r = self._wake_w = -1
        self._jobs: list[_Job] = []  # in round-robin order: the next chunk goes to the first with work
        self._open: _Job | None = None  # the coalesced job small calls still join
        self._last_small = -math.inf  # when the last small call arrived
        self._shutdown = threading.Event()
        self._worker_n = 0

    # -- submitting --------------------------------------------------------------------------------
    async def _submit_async(self, caller_kw: dict[str, Any]) -> tuple[_Job, _Caller]:
        """Hand one call's tasks to the dispatcher; wait until they are settled (results or fallback)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def settle(value: Any) -> None:
            if not fut.done():
                fut.set_result(value)

        def notify(job: _Job, caller: _Caller) -> None:  # on the dispatcher thread
            loop.call_soon_threadsafe(settle, (job, caller))

        caller = _Caller(notify=notify, **caller_kw)
        self._submit(caller)
        try:
            return await fut
        except asyncio.CancelledError:
            caller.cancelled = True
            self._poke()
            raise

    def _submit(self, caller: _Caller) -> None:
        with self._cv:
            self._inbox.append(caller)
            if self._thread is None:
                self._wake_r, self._wake_w = os.pipe()
                os.set_blocking(self._wake_r, False)
                os.set_blocking(self._wake_w, False)
                # A daemon thread of our own, not asyncio.to_thread: the interpreter joins the default
                # executor's threads at exit, which would wait for a hung batch before our atexit hook.
                self._thread = threading.Thread(target=self._serve, name="rewardkit-dispatcher", daemon=True)
                self._thread.start()
            else:
                self._poke_locked()

    def _poke(self) -> None:
        with self._cv:
            self._poke_locked()

    def _poke_locked(self) -> None:
        if self._thread is not None:
            try:
                os.write(self._wake_w, b"x")
            except OSError:  # full: it is awake anyway
                pass

    def _take_inbox(self) -> None:
        with self._cv:
            callers, self._inbox = self._inbox, []
        job: _Job | None
        for c in callers:
            self._start_failures = 0
            if c.kind == "batch":
                job = _Job(c.limit_s)
                job.queue.append(_Chunk("batch", list(job.add(c))))
                self._jobs.append(job)
                continue
            job = self._open if c.coalesce else None
            if job is None or job.sealed or job.limit_s != c.limit_s or len(job.items) >= _MERGE_MAX:
                job = _Job(c.limit_s, coalesced=c.coalesce)
                self._jobs.append(job)
                if c.coalesce:
                    self._open = job
                    now = time.monotonic()
                    if now - self._last_small < _BURST_S:  # more are coming: let them join
                        job.hold_until = now + _WINDOW_S
            if c.coalesce:
                self._last_small = time.monotonic()
            self._plan(job, list(job.add(c)))
            if len(job.items) >= _WINDOW_FULL:
                job.hold_until = 0.0

    # -- the dispatcher ----------------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            while True:
                self._take_inbox()
                self._jobs = [j for j in self._jobs if not j.finished]
                if not self._jobs:
                    with self._cv:
                        if not self._inbox:
                            os.close(self._wake_r)
                            os.close(self._wake_w)
                            self._thread, self._open = None, None
                            return
                    continue
                self._step()
        except BaseException as e:  # a bug here must not leave callers waiting forever
            with self._cv:
                callers, self._inbox = self._inbox, []
            for c in callers:
                self._take_inbox_failed(c)
            for job in self._jobs:
                self._abandon(job, None, "error", f"internal error in the process executor: {e!r}")
            self._jobs = []
            with self._cv:
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._thread, self._open = None, None
            raise

    def _take_inbox_failed(self, c: _Caller) -> None:
        job = _Job(c.limit_s)
        job.add(c)
        self._jobs.append(job)

    def _step(self) -> None:
        now = time.monotonic()
        for job in self._jobs:
            if self._shutdown.is_set():
                self._abandon(job, None, "error", "the executor was closed")
                continue
            for c in job.callers:
                if c.done:
                    continue
                if c.cancelled:
                    self._abandon(job, c, "error", "the batch was cancelled")
                elif c.deadline is not None and now >= c.deadline:
                    why = f"the batch passed its {c.batch_timeout_s}s deadline (batch_timeout_s)"
                    self._abandon(job, c, "timeout", why)
        self._jobs = [j for j in self._jobs if not j.finished]
        if not self._jobs:
            return
        self._dispatch(now)
        busy = [w for w in self._workers if w.chunk is not None]
        held = [j.hold_until - now for j in self._jobs if j.queue and j.hold_until > now]
        if not busy and held:
            if wait_ready([self._wake_r], min(held)):
                self._read_wake()
            return
        if not busy:
            if any(j.queue for j in self._jobs):
                why = (
                    "worker processes cannot start (a main script must guard its entry point "
                    "with `if __name__ == '__main__':`, since workers import it)"
                )
            else:
                why = "internal error in the process executor: tasks were neither queued nor running"
            for job in self._jobs:
                self._abandon(job, None, "crash" if job.queue else "error", why)
            return
        wake = min(0.5, *held, *(self._time_left(w.job, w, now) for w in busy if w.job is not None))
        if len(busy) < self.num_workers:  # a worker is free: look again soon for tasks to steal
            wake = min(wake, _STEAL_S)
        for job in self._jobs:
            for c in job.callers:
                if not c.done and c.deadline is not None:
                    wake = min(wake, c.deadline - now)
        handles: dict[Any, _Worker | None] = {w.conn: w for w in busy}
        handles.update({w.process.sentinel: w for w in busy})
        handles[self._wake_r] = None
        for h in wait_ready(list(handles), max(0.0, wake)):
            w = handles[h]
            if w is None:
                self._read_wake()
            elif w.chunk is not None and w.job is not None:
                self._service(w.job, w)
        now = time.monotonic()
        for w in busy:
            if w.chunk is not None and w.job is not None and self._time_left(w.job, w, now) <= 0:
                self._on_timeout(w.job, w, now)

    def _read_wake(self) -> None:
        try:
            os.read(self._wake_r, 4096)
        except OSError:
            pass

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
            _prepare_fork_server(self._ctx, self._preload())
        parent, child = self._ctx.Pipe(duplex=True)
        state = self._ctx.RawArray("d", [-1.0, _IDLE, 0.0, _NO_LIMIT])
        self._worker_n += 1
        token = f"{self._uid}:{self._worker_n}"
        environ = {k: v for k, v in os.environ.items() if k not in (_MAIN_ENV, WARM_ENV)}
        environ[process_tree.TOKEN_ENV] = token
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
                environ,
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
        w = _Worker(proc, parent, state, token)
        self._workers.append(w)
        return w

    def _dispatch(self, now: float) -> None:
        for dead in [w for w in self._workers if w.chunk is None and not w.process.is_alive()]:
            self._reap(dead)  # died while idle (e.g. killed from outside): nothing to blame
        while True:
            job = next((j for j in self._jobs if j.queue and j.hold_until <= now), None)
            if job is None and not self._steal(now):
                return
            if job is None:
                continue
            w = next((w for w in self._workers if w.chunk is None), None)
            if w is None:
                if len(self._workers) >= self.num_workers or self._start_failures >= 3:
                    return
                w = self._start_worker()
                if w is None:
                    self._start_failures += 1
                    continue
            chunk = job.queue.popleft()
            self._jobs.remove(job)  # its turn is used: the other jobs go first next time
            self._jobs.append(job)
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
            w.state[_LIMIT] = _NO_LIMIT
            job.sealed = True
            try:
                w.conn.send((chunk.kind, w.chunk_id, payload))
            except (OSError, ValueError):  # it died while idle
                job.queue.appendleft(chunk)
                self._reap(w)
                continue
            w.job, w.chunk, w.sent_at, w.left = job, chunk, time.monotonic(), len(chunk.tasks)
            self.stats["chunks"] += 1

    def _steal(self, now: float) -> bool:
        """With a worker free and nothing queued: re-queue the tasks waiting behind a slow task in
        another worker's chunk, so that one expensive sample does not hold up the end of a batch.
        Both workers may then score them; the first result counts."""
        if all(w.chunk is not None for w in self._workers) and len(self._workers) >= self.num_workers:
            return False
        for w in self._workers:
            chunk, job, current = w.chunk, w.job, w.state[_CURRENT]
            if chunk is None or job is None or chunk.kind != "sync" or chunk.stolen or current < 0:
                continue
            if w.state[_CHUNK] != w.chunk_id or now - w.state[_BEAT] < _STEAL_S:
                continue
            stop = int(current) + 1
            w.state[_LIMIT] = stop  # it stops there (at worst after one more task)
            rest = job.open(chunk.tasks[stop:])
            chunk.stolen = True
            if rest:
                job.queue.appendleft(_Chunk("sync", rest))
                return True
        return False

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
                job.fallback_errors.setdefault(job.items[i][0].name, body)  # before its caller wakes
                job.fall_back(i)
            w.chunk, w.job = None, None
            w.received = True
            return
        w.received = True
        for pos, result in body:
            if job.resolve(chunk.tasks[pos], result):
                w.left -= 1
        if busy is not None:  # CPU seconds per task of a finished sync chunk: sizes the next chunks
            name = job.items[chunk.tasks[0]][0].name
            old = self._cost.get(name)
            self._cost[name] = busy if old is None else 0.7 * old + 0.3 * busy
        if w.left <= 0 or busy is not None or not job.open(chunk.tasks):  # busy: a sync chunk's last message
            w.chunk, w.job = None, None
            self._start_failures = 0
