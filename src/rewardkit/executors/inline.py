"""The inline executor: scorers run in this process, one after another."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rewardkit.executors.base import Executor, ScoreTask
from rewardkit.result import SampleResult
from rewardkit.scoring import ainvoke, error_result, invoke, signature_of


class InlineExecutor(Executor):
    """Runs sync scorers one after another in a helper thread (so an event loop is never blocked)
    and async scorers concurrently, up to ``max_concurrency``.

    Deadlines: async scorers are cancelled at ``timeout_s`` (time queued for a sandbox slot not
    counted); a sync scorer cannot be stopped in this process, so use the ``process`` executor
    where a scorer may hang.
    """

    name = "inline"

    async def run(self, tasks: Sequence[ScoreTask]) -> list[SampleResult]:
        results: list[SampleResult | None] = [None] * len(tasks)
        sync_idx = [i for i, t in enumerate(tasks) if not signature_of(t.spec.fn).is_async]
        async_idx = [i for i, t in enumerate(tasks) if signature_of(t.spec.fn).is_async]
        limit = self.config.max_input_chars

        def run_sync() -> None:
            for i in sync_idx:
                try:
                    results[i] = invoke(tasks[i].spec, tasks[i].sample, limit)
                except asyncio.CancelledError as e:  # raised by the scorer: nothing cancels this thread
                    results[i] = error_result(e)

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

        jobs = [run_one(i) for i in async_idx]
        if sync_idx:
            jobs.append(asyncio.to_thread(run_sync))
        await asyncio.gather(*jobs)
        return results  # type: ignore[return-value]


def _being_cancelled() -> bool:
    """Whether the current task itself is being cancelled (rather than a scorer raising CancelledError)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return True if task is None or cancelling is None else cancelling() > 0
