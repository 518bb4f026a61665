"""What the process executor's supervisor does when things go wrong: a worker past its deadline, a
dead worker, an abandoned call, and stopping the pool; always killing what the scorers started.

:class:`Failures` is mixed into :class:`~rewardkit.executors.process_supervisor.Supervisor`.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rewardkit.executors import process_tree
from rewardkit.executors.process_job import _Caller, _Chunk, _Job, _Worker
from rewardkit.executors.process_worker import _BEAT, _CHUNK, _CURRENT, _IDLE, _SEVERAL
from rewardkit.result import SampleResult

if TYPE_CHECKING:
    from rewardkit.config import RewardConfig


class Failures:
    """Kill, reap, blame and re-queue (the failure half of the supervisor)."""

    config: RewardConfig
    stats: dict[str, int]
    _workers: list[_Worker]
    _uid: str
    _start_failures: int

    def _kill(self, w: _Worker) -> None:
        """SIGKILL a worker and everything its scorers started, detached (new session, double fork) or not."""
        pid = w.process.pid
        if pid is not None and w.process.exitcode is None:
            try:
                os.kill(pid, signal.SIGSTOP)  # frozen, it cannot start more while its tree is walked
            except OSError:
                pass
        process_tree.kill_tree([pid] if pid else [], tokens=[w.token] if w.token else [])
        w.token = ""  # found and killed: _reap need not look again
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
        w.chunk, w.job = None, None
        if w.process.is_alive():
            self._kill(w)
        else:
            w.process.join(timeout=1)
            if w.token:  # it died: what it started and re-parented to init carries its token
                process_tree.kill_tree([], tokens=[w.token])
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

    def _abandon(self, job: _Job, caller: _Caller | None, reason: str, message: str) -> None:
        """Fail the unfinished tasks of ``caller`` (of every caller of ``job`` if None) with ``reason``,
        killing the workers that hold them; other callers' tasks those workers held are re-queued."""
        mine = range(len(job.items)) if caller is None else range(caller.lo, caller.hi)
        for w in [w for w in self._workers if w.job is job and w.chunk is not None]:
            if not any(i in mine for i in job.open(w.chunk.tasks)):
                continue
            chunk = w.chunk
            self._drain(job, w)
            self._kill(w)
            self.stats["killed"] += 1
            self._reap(w)
            others = [i for i in job.open(chunk.tasks) if i not in mine]
            if others:
                job.queue.appendleft(_Chunk(chunk.kind, others, chunk.isolated))
        if caller is None:
            job.queue.clear()
        for i in mine:
            if job.results[i] is None:
                job.resolve(i, SampleResult.failed(reason, message))

    def _stop_workers(self) -> None:
        workers, self._workers = self._workers, []
        # What scorers started and left running (children, new sessions, double-forked daemons) goes
        # first, while the workers, subreapers of their trees, still hold it.
        roots = [w.process.pid for w in workers if w.process.pid is not None]
        process_tree.kill_tree(roots, prefixes=[f"{self._uid}:"])
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
