"""Sending contiguous shards to worker actors and gathering the results in input order.

A worker that dies mid-shard does not lose the shard: it is sent again to a live worker (once
whole, then split in halves to corner a sample that kills its worker every time), until each
sample has crashed its worker more than ``max_retries`` times, when that sample alone fails with
reason ``crash``. A batch deadline fails the samples not yet scored with reason ``timeout``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rewardkit.ray.sharding import Shard
from rewardkit.result import SampleResult


class NoLiveWorkersError(RuntimeError):
    """Every worker actor of the pool is dead for good."""


@dataclass(eq=False)
class WorkerSlot:
    """One worker actor and its bookkeeping: shards in flight, and whether it is live."""

    handle: Any
    rank: int
    inflight: int = 0
    state: str = "live"  # live | probing (crashed, waiting for Ray to restart it) | dead


class WorkerPool:
    """Worker actor handles with least-loaded selection and crash recovery.

    Lives on one event loop (the manager's). A crashed worker is probed with ``ping()``: Ray answers
    once it has restarted the actor (then it takes work again) or raises when it is gone for good.
    """

    def __init__(self, handles: Sequence[Any], max_inflight: int = 2, probe_timeout_s: float = 120.0):
        self.slots = [WorkerSlot(h, i) for i, h in enumerate(handles)]
        self.max_inflight = max_inflight
        self.probe_timeout_s = probe_timeout_s
        self.stats: Counter[str] = Counter()
        self._cond: asyncio.Condition | None = None
        self._next = 0
        self._probes: set[asyncio.Task] = set()

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    @property
    def handles(self) -> list[Any]:
        """Every worker handle, live or not."""
        return [s.handle for s in self.slots]

    async def acquire(self, exclusive: bool = False) -> WorkerSlot:
        """The least-loaded live worker with room for one more shard (waits for one).

        ``exclusive``: an idle worker, kept for this shard alone (a shard that was on a worker when
        it died runs alone, so that a second death is its own fault, not a neighbour's).
        """
        cond = self._condition()
        async with cond:
            while True:
                n = len(self.slots)
                order = [self.slots[(self._next + k) % n] for k in range(n)]
                room = 0 if exclusive else self.max_inflight - 1
                ready = [s for s in order if s.state == "live" and s.inflight <= room]
                if ready:
                    slot = min(ready, key=lambda s: s.inflight)
                    slot.inflight += self.max_inflight if exclusive else 1
                    self._next = (slot.rank + 1) % n
                    return slot
                if all(s.state == "dead" for s in self.slots):
                    raise NoLiveWorkersError(f"all {n} RewardLoopWorker actors are dead")
                await cond.wait()

    async def release(self, slot: WorkerSlot, exclusive: bool = False) -> None:
        """Give back the room :meth:`acquire` took."""
        cond = self._condition()
        async with cond:
            slot.inflight -= self.max_inflight if exclusive else 1
            cond.notify_all()

    def crashed(self, slot: WorkerSlot) -> None:
        """Take ``slot`` out of rotation until Ray has restarted it."""
        self.stats["worker_crashes"] += 1
        if slot.state == "live":
            slot.state = "probing"
            task = asyncio.ensure_future(self._probe(slot))
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)

    async def _probe(self, slot: WorkerSlot) -> None:
        from ray.exceptions import ActorUnavailableError

        give_up = time.monotonic() + self.probe_timeout_s
        while True:
            try:
                # Ray retries the ping while the actor restarts; it raises once restarts are exhausted.
                ping = slot.handle.ping.options(max_task_retries=-1).remote()
                await asyncio.wait_for(ping, max(0.1, give_up - time.monotonic()))
                slot.state = "live"
                break
            except ActorUnavailableError:
                if time.monotonic() < give_up:
                    await asyncio.sleep(0.2)
                    continue
                slot.state = "dead"
            except Exception:  # noqa: BLE001 - restarts exhausted, node gone, or too slow
                slot.state = "dead"
            self.stats["workers_dead"] += 1
            break
        cond = self._condition()
        async with cond:
            cond.notify_all()


#: ``send(handle, shard, time_left_s)``: start one shard's remote call; ``time_left_s`` is what is
#: left of the batch deadline (``None``: no deadline), for the worker to stop in time by itself.
Send = Callable[[Any, Shard, float | None], Any]


async def dispatch(
    pool: WorkerPool,
    n: int,
    shards: Sequence[Shard],
    send: Send,
    *,
    deadline: float | None = None,
    batch_timeout_s: float | None = None,
    max_retries: int = 1,
    on_results: Callable[[int, list[SampleResult]], None] | None = None,
    stats: Counter[str] | None = None,
    splittable: bool = True,
) -> list[SampleResult]:
    """Run ``shards`` of a batch of ``n`` on ``pool``; one result per sample, in input order.

    ``send(handle, shard, time_left_s)`` starts the remote call and returns its ``ObjectRef``
    (resolving to a :class:`~rewardkit.ray.worker.ShardReply`); a worker that stops at
    ``time_left_s`` sends back what it scored by then, so those results are kept. ``deadline`` is a ``time.monotonic()`` value.
    ``on_results(start, results)`` is called as each shard finishes (streaming). ``splittable=False``
    (a batch scorer's single call) retries a crashed shard whole and never splits it. An exception the
    worker's engine raised (bad config, bad sample) is re-raised here with its own type.
    """
    import ray
    from ray.exceptions import RayTaskError

    from rewardkit.ray.runtime import crash_errors

    stats = stats if stats is not None else Counter()
    crash_types = crash_errors()
    results: list[SampleResult | None] = [None] * n
    refs: dict[Shard, Any] = {}
    running: dict[asyncio.Task, Shard] = {}

    def finish(shard: Shard, part: list[SampleResult]) -> None:
        results[shard.start : shard.stop] = part
        if on_results is not None:
            on_results(shard.start, part)

    async def run_one(shard: Shard) -> tuple[str, Any]:
        exclusive = shard.crashes > 0
        try:
            slot = await pool.acquire(exclusive)
        except NoLiveWorkersError as e:
            return "no_workers", e
        try:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ref = send(slot.handle, shard, left)
            refs[shard] = ref
            return "ok", await ref
        except crash_types as e:
            pool.crashed(slot)
            return "crash", e
        except RayTaskError as e:
            return "raised", e
        finally:
            refs.pop(shard, None)
            await pool.release(slot, exclusive)

    def start(shard: Shard) -> None:
        stats["shards_sent"] += 1
        running[asyncio.ensure_future(run_one(shard))] = shard

    def after_crash(shard: Shard, err: BaseException) -> None:
        stats["shard_crashes"] += 1
        why = f"the worker scoring it died ({type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''})"
        if len(shard) == 1 or not splittable:
            if shard.crashes + 1 > max_retries:
                stats["samples_crashed"] += len(shard)
                msg = f"{why}; {shard.crashes + 1} time(s), giving up"
                finish(shard, [SampleResult.failed("crash", msg) for _ in range(len(shard))])
            else:
                start(Shard(shard.start, shard.stop, shard.crashes + 1))
        elif shard.crashes == 0 and max_retries >= 1:
            stats["shards_retried"] += 1
            start(Shard(shard.start, shard.stop, 1))
        else:
            stats["shards_split"] += 1
            for half in shard.halves():
                start(Shard(half.start, half.stop, max(1, shard.crashes)))

    async def cancel_all() -> None:
        for ref in list(refs.values()):
            try:
                ray.cancel(ref)
            except Exception:  # noqa: BLE001
                pass
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    for shard in shards:
        start(shard)
    try:
        while running:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, _ = await asyncio.wait(running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                break
            for task in done:
                shard = running.pop(task)
                kind, value = task.result()
                if kind == "ok":
                    if value.error is not None:
                        raise value.error.unpack(shard.start)
                    if len(value.results) != len(shard):
                        msg = f"worker returned {len(value.results)} results for a shard of {len(shard)}"
                        finish(shard, [SampleResult.failed("error", msg) for _ in range(len(shard))])
                    else:
                        finish(shard, list(value.results))
                elif kind == "crash":
                    after_crash(shard, value)
                elif kind == "raised":
                    msg = f"worker call raised: {str(value).splitlines()[0][:300] if str(value) else value!r}"
                    finish(shard, [SampleResult.failed("error", msg) for _ in range(len(shard))])
                else:
                    finish(shard, [SampleResult.failed("crash", str(value)) for _ in range(len(shard))])
    finally:
        pending = dict(running)
        await cancel_all()
    for shard in sorted(pending.values(), key=lambda s: s.start):
        stats["samples_timed_out"] += len(shard)
        msg = f"the batch deadline ({batch_timeout_s}s) passed before this sample was scored"
        finish(shard, [SampleResult.failed("timeout", msg) for _ in range(len(shard))])
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:  # pragma: no cover - a bug, never a silent hole
        raise RuntimeError(f"dispatch lost samples {missing[:10]}")
    return results  # type: ignore[return-value]
