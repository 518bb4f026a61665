"""The replicas of one served reward model on this machine: start, monitor, wake/sleep fan-out, close.

:class:`ServerGroup` starts ``server.replicas`` :class:`~rewardkit.serving.process.ProcessReplica`
processes concurrently, restarts one that dies (a monitor thread, at most ``max_restarts`` times
per replica; a replica restarted while the group sleeps is put back to sleep), and fans ``wake_up``
/ ``sleep`` out to every replica, returning when all have answered. The Ray variant
(:mod:`rewardkit.serving.ray_group`) runs one single-replica group per actor.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rewardkit.errors import ConfigError, RewardKitError
from rewardkit.serving.process import ProcessReplica, ServerCallError, ServerStartError

if TYPE_CHECKING:
    from rewardkit.config import RewardModelConfig
    from rewardkit.serving.launcher import ServerLauncher


#: Started groups not closed yet: stopped at interpreter exit so no server outlives its owner.
_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_live_groups() -> None:
    for group in list(_LIVE):
        try:
            group.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


class ServersAsleepError(RewardKitError, RuntimeError):
    """A batch arrived while the servers sleep and ``server.when_asleep`` is ``fail``."""


def fan_out(fns: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run every callable at once in threads; each result or the exception it raised, in order."""
    if not fns:
        return []
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(fns)) as pool:
            futures = [pool.submit(fn) for fn in fns]
    except RuntimeError:  # at interpreter exit no new threads: one after the other
        return [_call(fn) for fn in fns]
    return [_call(f.result) for f in futures]


def _call(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - returned to the caller, who raises them together
        return e


def raise_failures(action: str, results: Sequence[Any]) -> None:
    """Raise one :class:`ServerCallError` naming every replica whose call failed."""
    failed = [f"replica {i}: {r}" for i, r in enumerate(results) if isinstance(r, BaseException)]
    if failed:
        raise ServerCallError(
            f"{action} failed on {len(failed)} of {len(results)} replica(s): " + "; ".join(failed)
        )


def served_model_path(rm: RewardModelConfig) -> str:
    """The model the servers load: ``server.model_path``, else ``reward_model.model_path``."""
    assert rm.server is not None
    path = rm.server.model_path or rm.model_path
    if not path:
        raise ConfigError("reward_model.server: set server.model_path (or reward_model.model_path)")
    return path


class ServerGroup:
    """Local server processes for ``reward_model.server`` (see the module docstring)."""

    def __init__(
        self,
        rm: RewardModelConfig,
        launcher: ServerLauncher,
        indices: Sequence[int] | None = None,
        env: dict[str, str] | None = None,
    ):
        if rm.server is None:
            raise ConfigError("ServerGroup needs reward_model.server")
        self.rm = rm
        self.config = rm.server
        self.launcher = launcher
        path = served_model_path(rm)
        idx = list(indices) if indices is not None else list(range(self.config.replicas))
        self.replicas = [ProcessReplica(launcher, self.config, path, i, env) for i in idx]
        self.asleep = False
        self.timings: dict[str, float] = {}
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._monitor: threading.Thread | None = None
        #: Replicas that died more often than ``max_restarts``: index → last error.
        self.failed: dict[int, str] = {}

    # -- start / close ---------------------------------------------------------------------------
    def start(self) -> ServerGroup:
        """Start every replica concurrently and wait for all to be healthy; on any failure stop all and raise."""
        results = fan_out([r.start for r in self.replicas])
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            self.close()
            msg = "\n\n".join(str(e) for e in errors)
            raise ServerStartError(
                f"{len(errors)} of {len(self.replicas)} server replica(s) failed to start:\n{msg}"
            )
        self._monitor = threading.Thread(target=self._watch, name="rewardkit-server-monitor", daemon=True)
        self._monitor.start()
        _LIVE.add(self)
        return self

    def close(self) -> None:
        """Stop the monitor and every process this group started (idempotent)."""
        self._closed.set()
        if self._monitor is not None and self._monitor is not threading.current_thread():
            self._monitor.join(timeout=self.config.health_interval_s + 5)
        with self._lock:
            fan_out([r.stop for r in self.replicas])
        _LIVE.discard(self)

    def __enter__(self) -> ServerGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- monitoring ------------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._closed.wait(self.config.health_interval_s):
            self.check()

    def check(self) -> int:
        """Restart replicas whose process died (bounded by ``max_restarts``); how many were restarted."""
        restarted = 0
        with self._lock:
            if self._closed.is_set():
                return 0
            for r in self.replicas:
                if r.alive() or r.index in self.failed:
                    continue
                if r.restart_attempts >= self.config.max_restarts:
                    self.failed[r.index] = f"died {r.restart_attempts + 1} times; last log:\n{r.log_tail(10)}"
                    continue
                try:
                    r.restart()
                    if self.asleep:
                        r.sleep()
                    restarted += 1
                except Exception as e:  # noqa: BLE001 - tried again on the next round
                    if r.restart_attempts >= self.config.max_restarts:
                        self.failed[r.index] = str(e)
        return restarted

    # -- introspection ---------------------------------------------------------------------------
    @property
    def urls(self) -> list[str]:
        """Base URLs of the replicas, in replica order."""
        return [r.url for r in self.replicas]

    @property
    def pids(self) -> list[int]:
        """Process ids (= process group ids) of the replicas."""
        return [r.pid for r in self.replicas if r.pid is not None]

    def restarts(self) -> int:
        """Restarts so far, all replicas together."""
        return sum(r.restarts for r in self.replicas)

    # -- wake / sleep ----------------------------------------------------------------------------
    def _fan(self, action: str) -> dict[str, float]:
        with self._lock:
            results = fan_out([getattr(r, action) for r in self.replicas])
            raise_failures(action, results)
            self.asleep = action == "sleep"
            timings = {f"r{r.index}": float(t) for r, t in zip(self.replicas, results, strict=True)}
            self.timings.update({f"{action}_s/{k}": v for k, v in timings.items()})
            return timings

    def wake_up(self) -> dict[str, float]:
        """Wake every replica; returns when all answered: replica → seconds. Failures raise, naming each."""
        return self._fan("wake_up")

    def sleep(self) -> dict[str, float]:
        """Put every replica to sleep (frees accelerator memory); replica → seconds."""
        return self._fan("sleep")

    def metrics(self) -> dict[str, float]:
        """``replicas``, ``restarts``, ``failed`` and the last wake/sleep seconds per replica."""
        return {
            "replicas": float(len(self.replicas)),
            "restarts": float(self.restarts()),
            "failed": float(len(self.failed)),
            **self.timings,
        }


class BatchWaker:
    """Wakes sleeping servers for a batch and puts them back to sleep when the last batch ends.

    ``servers`` has ``asleep``, ``wake_up()``, ``sleep()`` and ``config.when_asleep``. Scoring never
    changes the sleep state the caller left: servers found asleep (``when_asleep: wake``) sleep
    again after the batch; with ``when_asleep: fail`` the batch raises :class:`ServersAsleepError`.
    """

    def __init__(self, servers: Any):
        self.servers = servers
        self._active = 0
        self._woke = False
        self._lock: asyncio.Lock | None = None

    async def enter(self) -> None:
        """Call before a batch."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._active == 0 and self.servers.asleep:
                if self.servers.config.when_asleep == "fail":
                    raise ServersAsleepError(
                        "the reward model's servers are asleep and reward_model.server.when_asleep is 'fail': "
                        "call wake_up() before scoring"
                    )
                await asyncio.to_thread(self.servers.wake_up)
                self._woke = True
            self._active += 1

    async def exit(self) -> None:
        """Call after a batch (also when it raised)."""
        assert self._lock is not None
        async with self._lock:
            self._active -= 1
            if self._active == 0 and self._woke:
                self._woke = False
                await asyncio.to_thread(self.servers.sleep)
