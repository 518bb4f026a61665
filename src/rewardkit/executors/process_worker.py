"""The worker side of the process executor: the entry point and loop of one worker process.

A worker reads chunks of ``(spec, sample)`` tasks from its pipe, runs them (sync ones one at a time,
async ones up to a concurrency on one event loop, a batch scorer in one call), writes in a small
shared-memory slot which task it is running and since when, and sends results back. It dies with
the process that owns the pool. :mod:`rewardkit.executors.process_supervisor` is the other end.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rewardkit.batch import Sample
from rewardkit.executors.process_tree import become_subreaper, kill_tree, reap_zombies
from rewardkit.result import SampleResult
from rewardkit.runtime.worker import mark_worker
from rewardkit.scoring import ainvoke, error_result, invoke, invoke_batch, signature_of

if TYPE_CHECKING:
    from rewardkit.scoring import ScorerSpec

# Slots of a worker's shared state: the chunk it holds, the task it runs, when it last started or
# finished one (time.monotonic(), the same clock in every process on one machine), and the position
# in a sync chunk where it must stop (the parent moved the tasks from there on to a free worker).
_CHUNK, _CURRENT, _BEAT, _LIMIT = 0, 1, 2, 3
_NO_LIMIT = 1e18
_IDLE = -1.0  # no task running (loading a chunk, or between chunks)
_SEVERAL = -2.0  # several async tasks in flight: which one hangs is unknown
_FLUSH_S = 0.05  # a worker sends finished results at least this often
_REAP_EVERY_S = 5.0  # a worker looks for orphans to reap this often...
_ZOMBIE_MAX = 64  # ... and reaps them once more than this many wait


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

            # Private CPython state (absent from typeshed), hence Any and the guard.
            server: Any = forkserver._forkserver
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
        self._out: list[tuple[int, SampleResult]] | None = None  # finished, unsent results of a sync chunk
        self._out_chunk = -1
        self._out_lock = threading.Lock()
        self._flusher: threading.Thread | None = None

    def serve(self) -> None:
        while True:
            try:
                kind, chunk_id, payload = self.conn.recv()
            except (EOFError, OSError):
                kind = "stop"
            if kind == "stop":
                kill_tree([os.getpid()])  # what its scorers started and left running ends with it
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
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_stalled, name="rewardkit-flush", daemon=True)
            self._flusher.start()
        out = self._out = []
        self._out_chunk = chunk_id
        last = time.monotonic()
        ran = 0
        cpu = time.process_time()  # CPU, not wall: the cost of a task, however busy the machine is
        for i, (spec, sample) in enumerate(items):
            if i >= self.state[_LIMIT]:
                break
            ran = i + 1
            now = time.monotonic()
            if out and now - last > _FLUSH_S:
                with self._out_lock:
                    if out:
                        self.send(("results", chunk_id, out[:], None))
                        out.clear()
                last = now
            self.beat(i)
            try:
                r = invoke(spec, sample, self.max_input_chars)
            except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt/CancelledError from a scorer
                r = error_result(e)
            with self._out_lock:
                out.append((i, r))
        with self._out_lock:
            self.send(("results", chunk_id, out[:], (time.process_time() - cpu) / max(1, ran)))
            out.clear()
            self._out = None

    def _flush_stalled(self) -> None:
        """Send finished results while a slow task runs: a kill at its deadline must not lose them."""
        while True:
            time.sleep(_FLUSH_S)
            if self._out and time.monotonic() - self.state[_BEAT] > _FLUSH_S:
                with self._out_lock:
                    out = self._out
                    if out:
                        self.send(("results", self._out_chunk, out[:], None))
                        out.clear()

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


def _reap_orphans() -> None:
    while True:
        time.sleep(_REAP_EVERY_S)
        try:
            reap_zombies(_ZOMBIE_MAX)
        except OSError:
            pass


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
    if become_subreaper():  # what its scorers orphan (daemons, double forks) stays in its tree, to be killed
        threading.Thread(target=_reap_orphans, name="rewardkit-reaper", daemon=True).start()
    _die_with_parent(start_method)
    if memory_limit_mb:
        _limit_memory(memory_limit_mb)
    _WorkerLoop(conn, state, max_input_chars, timeout_s, concurrency).serve()


# What crosses the pipe: a sample slimmed to the fields its scorer reads.
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


# The fork server and the workers must not run the parent's main script again: an unguarded script
# (no `if __name__ == "__main__":`, common for training scripts) would start a second training run
# there. Scorers travel by reference, so workers never need it. The fork server preloads only this
# module, which, seeing this variable there, gives the fork server's own (empty) __main__ the
# parent's file name or module name: multiprocessing then takes it as already loaded in every worker.
_MAIN_ENV = "REWARDKIT_PARENT_MAIN"
#: Comma-separated scorer modules whose ``warm_up()`` the fork server runs (see process_warm).
WARM_ENV = "REWARDKIT_FORKSERVER_WARM"


def _prepare_fork_server(ctx, preload: Sequence[str] = ()) -> None:
    """Before the fork server starts: preload this module (and ``preload``: built-in scorer modules, so
    that every worker forks warm, their ``warm_up()`` run by :mod:`~rewardkit.executors.process_warm`),
    not ``__main__``, and name the parent's main."""
    from multiprocessing import process

    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    path = getattr(main, "__file__", None)
    if name:
        os.environ[_MAIN_ENV] = f"name:{name}"
    elif path:
        original_dir: str | None = getattr(process, "ORIGINAL_DIR", None)  # private, not in typeshed
        if not os.path.isabs(path) and original_dir is not None:
            path = os.path.join(original_dir, path)
        os.environ[_MAIN_ENV] = f"path:{os.path.normpath(path)}"
    scorers = [m for m in preload if m.startswith("rewardkit.scorers.")]
    if scorers:
        os.environ[WARM_ENV] = ",".join(scorers)
    else:
        os.environ.pop(WARM_ENV, None)
    ctx.set_forkserver_preload(["rewardkit.executors.process", *preload, "rewardkit.executors.process_warm"])


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
