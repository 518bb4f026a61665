"""The inline executor: scorers run in this process, one after another."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rewardkit.executors.base import Executor, ScoreTask
from rewardkit.result import SampleResult, all_filled
from rewardkit.scoring import ainvoke, error_result, invoke, invoke_batch, signature_of

if TYPE_CHECKING:
    from rewardkit.config import RewardConfig
    from rewardkit.scoring import ScorerSpec

#: A ``time.monotonic()`` deadline set by the caller (a Ray worker passes on what is left of the
#: manager's batch deadline); the inline executor stops at the earlier of it and ``batch_timeout_s``.
_CALLER_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "rewardkit_inline_deadline", default=None
)

_LEFT_RUNNING = (
    "; the inline executor cannot stop a running sync scorer: its thread was left running "
    "(use executor: process to have hung scorers killed)"
)


@contextlib.contextmanager
def batch_deadline(deadline: float | None) -> Iterator[None]:
    """Bound inline ``run`` calls made inside this block by a ``time.monotonic()`` deadline."""
    token = _CALLER_DEADLINE.set(deadline)
    try:
        yield
    finally:
        _CALLER_DEADLINE.reset(token)


def caller_deadline() -> float | None:
    """The deadline set by :func:`batch_deadline` around this call, or ``None``."""
    return _CALLER_DEADLINE.get()


def cheap_refs(config: RewardConfig) -> frozenset[str]:
    """References (``module:function``) of the scorers registered ``cheap`` under ``config``'s plugins."""
    from rewardkit.plugins import get_registries

    scorers = get_registries(config.plugins).scorers
    return frozenset(e.obj.ref for e in scorers if e.meta.get("cheap") and getattr(e.obj, "ref", None))


class CheapCheck:
    """``check(specs)``: whether every spec is a sync, one-sample scorer among ``cheap`` refs and no
    caller deadline is set (scorers that may run in the calling thread); the answer per spec is kept."""

    def __init__(self, cheap: frozenset[str]):
        self.cheap = cheap
        self._seen: dict[int, tuple[ScorerSpec, bool]] = {}  # by id; the spec is kept alive here

    def __call__(self, specs: Iterable[ScorerSpec]) -> bool:
        if _CALLER_DEADLINE.get() is not None:
            return False
        seen = self._seen
        for spec in specs:
            hit = seen.get(id(spec))
            if hit is None or hit[0] is not spec:
                ok = spec.ref in self.cheap and not spec.batch and not signature_of(spec.fn).is_async
                if len(seen) > 1024:
                    seen.clear()
                hit = seen[id(spec)] = (spec, ok)
            if not hit[1]:
                return False
        return True


class InlineExecutor(Executor):
    """Runs sync scorers one after another in a helper thread (so an event loop is never blocked)
    and async scorers concurrently, up to ``max_concurrency``.

    Deadlines: async scorers are cancelled at ``timeout_s`` (time queued for a sandbox slot not
    counted). A sync scorer cannot be stopped in this process: at ``batch_timeout_s`` the batch
    returns anyway, the unfinished samples fail with ``timeout``, and the thread running the hung
    call is left behind (its result says so). Use the ``process`` executor where a scorer may hang.
    """

    name = "inline"

    def __init__(self, config: Any):
        super().__init__(config)
        self._cheap: CheapCheck | None = None

    def runs_here(self, specs: Iterable[ScorerSpec]) -> bool:
        """True for ``cheap`` sync scorers when no batch deadline applies: calling them in this
        thread gives what :meth:`run`'s helper thread would."""
        cheap = self._cheap
        if cheap is None:  # (the config and the class do not change: decided once)
            if self.config.batch_timeout_s is not None or type(self).run is not InlineExecutor.run:
                cheap = self._cheap = CheapCheck(frozenset())
            else:
                cheap = self._cheap = CheapCheck(cheap_refs(self.config))
        return cheap(specs)

    def _deadline(self) -> float | None:
        limits = [d for d in (_CALLER_DEADLINE.get(),) if d is not None]
        if self.config.batch_timeout_s is not None:
            limits.append(time.monotonic() + self.config.batch_timeout_s)
        return min(limits) if limits else None

    async def run(self, tasks: Sequence[ScoreTask]) -> list[SampleResult]:
        deadline = self._deadline()
        results: list[SampleResult | None] = [None] * len(tasks)
        sync_idx = [i for i, t in enumerate(tasks) if not signature_of(t.spec.fn).is_async]
        async_idx = [i for i, t in enumerate(tasks) if signature_of(t.spec.fn).is_async]
        limit = self.config.max_input_chars
        stop = threading.Event()
        running: list[int] = []  # the sync task the helper thread is in, if any

        def run_sync() -> None:
            for i in sync_idx:
                if stop.is_set():
                    return
                running[:] = [i]
                try:
                    results[i] = _safe(functools.partial(invoke, tasks[i].spec, tasks[i].sample, limit))
                except asyncio.CancelledError as e:  # raised by the scorer: nothing cancels this thread
                    results[i] = error_result(e)
                running.clear()

        from rewardkit.runtime.deadlines import wait_for_unqueued

        sem = asyncio.Semaphore(self.config.max_concurrency)
        timeout = self.config.timeout_s

        async def run_one(i: int) -> None:
            async with sem:
                try:
                    results[i] = await wait_for_unqueued(
                        lambda: ainvoke(tasks[i].spec, tasks[i].sample, limit), timeout
                    )
                except asyncio.TimeoutError:
                    results[i] = SampleResult.failed(
                        "timeout", f"async scorer passed its {timeout}s deadline"
                    )
                except asyncio.CancelledError as e:
                    if _being_cancelled():
                        raise
                    results[i] = error_result(e)  # the scorer raised it: fail that sample, not the batch
                except Exception as e:  # noqa: BLE001 - e.g. an exception whose __str__ raises
                    results[i] = _safe(functools.partial(error_result, e))

        jobs: list[asyncio.Future[Any]] = [asyncio.ensure_future(run_one(i)) for i in async_idx]
        if sync_idx:
            jobs.append(_in_daemon_thread(run_sync))
        try:
            if jobs:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                _, pending = await asyncio.wait(jobs, timeout=left)
                for job in pending:
                    job.cancel()
                if pending:
                    await asyncio.gather(*pending, return_exceptions=True)
                for job in jobs:
                    if not job.cancelled() and (exc := job.exception()) is not None:
                        raise exc
        finally:
            stop.set()
            for job in jobs:
                job.cancel()
        hung = set(running)
        for i, r in enumerate(results):
            if r is None:
                msg = "the batch passed its deadline (batch_timeout_s) before this sample was scored"
                if i in hung:
                    results[i] = SampleResult.failed("timeout", msg + _LEFT_RUNNING, thread_left_running=True)
                else:
                    results[i] = SampleResult.failed("timeout", msg)
        return all_filled(results, "the inline executor")

    async def run_batch(self, spec, samples) -> list[SampleResult]:
        """One call of a batch scorer in a helper thread, bounded by ``batch_timeout_s`` (else ``timeout_s``)."""
        limit = self.config.batch_timeout_s or self.config.timeout_s
        caller = _CALLER_DEADLINE.get()
        if caller is not None:
            left = max(0.0, caller - time.monotonic())
            limit = left if limit is None else min(limit, left)
        job = _in_daemon_thread(lambda: invoke_batch(spec, samples))
        try:
            return await asyncio.wait_for(job, limit)
        except asyncio.TimeoutError:
            msg = f"batch scorer {spec.name!r} passed its {limit:.3g}s deadline" + _LEFT_RUNNING
            return [SampleResult.failed("timeout", msg, thread_left_running=True) for _ in samples]


def _safe(call: Callable[[], SampleResult]) -> SampleResult:
    """``call()``, or a ``failed`` result if building the result itself raised (a broken ``__str__``)."""
    try:
        return call()
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise
    except BaseException as e:  # noqa: BLE001
        return SampleResult.failed("error", f"{type(e).__name__} (its message could not be formatted)")


def _in_daemon_thread(fn: Callable[[], Any]) -> asyncio.Future:
    """Run ``fn`` in a daemon thread (one that never holds up interpreter exit); a future of its result."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def target() -> None:
        try:
            value, error = ctx.run(fn), None
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            value, error = None, e
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop is gone: nobody waits any more
            pass

    threading.Thread(target=target, name="rewardkit-inline", daemon=True).start()
    return future


def _being_cancelled() -> bool:
    """Whether the current task itself is being cancelled (rather than a scorer raising CancelledError)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return True if task is None or cancelling is None else cancelling() > 0
