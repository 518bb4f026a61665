"""The supervisor of the process executor: sends chunks to worker processes, reads their results,
and kills and replaces workers past a deadline or dead, failing only the samples they held.

:class:`Supervisor` is the parent side of :mod:`rewardkit.executors.process_worker`;
:class:`~rewardkit.executors.process.ProcessExecutor` builds on it.
"""

from __future__ import annotations

import asyncio
import math
import os
import pickle
import signal
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_ready
from typing import TYPE_CHECKING, Any

from rewardkit.batch import Sample
from rewardkit.executors.process_worker import (
    _BEAT,
    _CHUNK,
    _CURRENT,
    _IDLE,
    _MAIN_ENV,
    _SEVERAL,
    _fields_read,
    _prepare_fork_server,
    _slim,
    _worker_main,
)
from rewardkit.result import SampleResult

if TYPE_CHECKING:
    from rewardkit.config import RewardConfig
    from rewardkit.scoring import ScorerSpec

_STARTUP_S = 60.0  # a worker that has not picked up its first chunk by then is replaced
_ASYNC_GRACE = 0.5  # async tasks time out inside the worker; the parent kills only a blocked event loop


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


class Supervisor:
    """The supervision loop over a pool of worker processes (the parent side); mixed into
    :class:`~rewardkit.executors.process.ProcessExecutor`, which holds the pool's state."""

    config: RewardConfig
    num_workers: int
    memory_limit_mb: int | None
    start_method: str
    chunk_size: int | None
    stats: dict[str, int]
    _workers: list[_Worker]
    _task_s: float | None

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
