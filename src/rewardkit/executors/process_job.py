"""The bookkeeping of the process executor's dispatcher: jobs, their chunks, and the callers in them.

A :class:`_Job` is a list of ``(spec, sample)`` tasks with a queue of chunks still to send. It holds
one caller (one :meth:`~rewardkit.executors.process.ProcessExecutor.run` call), or, for small calls
that arrive while the pool is busy, several callers coalesced into one job, so that their tasks
travel together in a few chunks instead of one pipe write each. Each :class:`_Caller` is told as
soon as its own tasks are settled, not when the whole job is.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rewardkit.result import SampleResult

if TYPE_CHECKING:
    from rewardkit.batch import Sample
    from rewardkit.scoring import ScorerSpec


@dataclass
class _Chunk:
    kind: str  # "sync" | "async" | "batch"
    tasks: list[int]  # indices into the job
    isolated: bool = False  # re-sent alone to find out which task hangs or crashes
    stolen: bool = False  # the tasks behind its slow one were re-queued for a free worker


@dataclass
class _Worker:
    process: Any
    conn: Any
    state: Any
    token: str = ""  # in its children's environment: finds them even after they detach
    job: _Job | None = None
    chunk: _Chunk | None = None
    chunk_id: int = -1
    sent_at: float = 0.0
    left: int = 0
    received: bool = False  # has it ever taken a chunk (tells a start failure from a crash)


@dataclass
class _Caller:
    """One call's slice ``[lo, hi)`` of a job, its batch deadline, and how to tell it it is done."""

    items: list[tuple[ScorerSpec, Sample]]
    notify: Callable[[_Job, _Caller], None]
    kind: str = "tasks"  # "tasks" | "batch" (one call of a batch scorer)
    limit_s: float | None = None  # per-task deadline (per call for a batch scorer)
    batch_timeout_s: float | None = None
    coalesce: bool = False
    deadline: float | None = None  # time.monotonic() past which its unfinished tasks fail
    lo: int = 0
    hi: int = 0
    left: int = 0
    done: bool = False
    cancelled: bool = False
    fallback: list[int] = field(default_factory=list)  # its tasks a worker could not load (job indices)

    def __post_init__(self) -> None:
        if self.batch_timeout_s:
            self.deadline = time.monotonic() + self.batch_timeout_s


class _Job:
    """The state of one or several callers' tasks in the dispatcher."""

    def __init__(self, limit_s: float | None, coalesced: bool = False):
        self.items: list[tuple[ScorerSpec, Sample]] = []
        self.results: list[SampleResult | None] = []
        self.attempts: list[int] = []
        self.owner: list[int] = []  # caller index of each task
        self.callers: list[_Caller] = []
        self.queue: deque[_Chunk] = deque()
        self._fallback: set[int] = set()
        self.fallback_errors: dict[str, str] = {}
        self.limit_s = limit_s  # per-task deadline (per-call for batch chunks)
        self.coalesced = coalesced
        self.sealed = False  # a chunk of it was sent: no more callers join it
        self.hold_until = 0.0  # time.monotonic() before which it is not sent (small calls gather)

    def add(self, caller: _Caller) -> range:
        """Append a caller's tasks; their indices."""
        caller.lo = len(self.items)
        self.items.extend(caller.items)
        caller.hi = len(self.items)
        caller.left = caller.hi - caller.lo
        n = caller.left
        self.results.extend([None] * n)
        self.attempts.extend([0] * n)
        self.owner.extend([len(self.callers)] * n)
        self.callers.append(caller)
        if n == 0:
            self._finish(caller)
        return range(caller.lo, caller.hi)

    @property
    def finished(self) -> bool:
        return all(c.done for c in self.callers)

    def resolve(self, i: int, result: SampleResult) -> bool:
        if self.results[i] is not None or i in self._fallback:
            return False
        self.results[i] = result
        self._settle(i)
        return True

    def open(self, tasks: Sequence[int]) -> list[int]:
        return [i for i in tasks if self.results[i] is None and i not in self._fallback]

    def fall_back(self, i: int) -> None:
        if i not in self._fallback:
            self._fallback.add(i)
            self.callers[self.owner[i]].fallback.append(i)
            self._settle(i)

    def _settle(self, i: int) -> None:
        caller = self.callers[self.owner[i]]
        caller.left -= 1
        if caller.left <= 0:
            self._finish(caller)

    def _finish(self, caller: _Caller) -> None:
        if not caller.done:
            caller.done = True
            try:
                caller.notify(self, caller)
            except Exception:  # noqa: BLE001 - its event loop is gone: nobody is waiting
                pass
