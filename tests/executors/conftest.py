"""Scorers that misbehave, written to a file so worker processes load them by path."""

from __future__ import annotations

import textwrap

import pytest

from rewardkit.batch import Sample
from rewardkit.config import RewardConfig
from rewardkit.executors.base import ScoreTask
from rewardkit.scoring import ScorerSpec, load_function

SCORERS = textwrap.dedent(
    """
    import asyncio
    import os
    import signal
    import time

    PEAK = [0, 0]


    def good(response, ground_truth):
        return float(response == ground_truth)


    def where(response):
        return {"score": 1.0, "pid": os.getpid()}


    def hang(response):
        time.sleep(3600)


    def boom(response):
        raise ValueError("boom: " + response)


    def exit_now(response):
        os._exit(3)


    def segfault(response):
        os.kill(os.getpid(), signal.SIGSEGV)


    def hog(response):
        keep = []
        while True:
            keep.append(bytearray(16 * 1024 * 1024))


    def crash_once(response, extra_info):
        marker = extra_info["marker"]
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return 1.0


    def record(response, ground_truth, extra_info):
        with open(extra_info["log"], "a") as f:
            f.write(response + "\\n")
        return float(response == ground_truth)


    async def nap(response, extra_info):
        PEAK[0] += 1
        PEAK[1] = max(PEAK[1], PEAK[0])
        try:
            await asyncio.sleep(extra_info.get("sleep", 0.3))
        finally:
            PEAK[0] -= 1
        return {"score": 1.0, "peak": PEAK[1], "pid": os.getpid()}


    async def await_forever(response):
        await asyncio.Event().wait()


    def sleepy(response, extra_info):
        time.sleep(extra_info["sleep"])
        return 1.0


    def loaded(response):
        import sys

        return {"score": 1.0, "loaded": response in sys.modules}


    def sleepy_where(response, extra_info):
        time.sleep(extra_info["sleep"])
        return {"score": 1.0, "pid": os.getpid()}


    _ONE_SLOT = None


    async def one_slot(response, extra_info):
        # waits its turn for a single sandbox-like slot, then works 0.25 s
        global _ONE_SLOT
        from rewardkit.runtime.limits import Limiter

        if _ONE_SLOT is None:
            _ONE_SLOT = Limiter(1)
        async with _ONE_SLOT.hold():
            await asyncio.sleep(0.25)
        return 1.0


    async def ignore_cancel(response):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass  # swallowed: it keeps running past its deadline
        await asyncio.sleep(30)  # a second cancellation ends it


    def getenv(response):
        return {"score": 1.0, "value": os.environ.get(response)}


    def raise_cancelled(response):
        raise asyncio.CancelledError("from the scorer")


    async def araise_cancelled(response):
        raise asyncio.CancelledError("from the scorer")


    async def block_loop(response):
        time.sleep(3600)


    def spawn_and_hang(response, extra_info):
        import subprocess

        child = subprocess.Popen(["sleep", "600"])
        with open(extra_info["pidfile"], "w") as f:
            f.write(str(child.pid))
        time.sleep(3600)


    def spawn_three(response, extra_info):
        # Leaves a child in each shape running: same process group, new session (env cleared, so no
        # marker to find it by), and a double-forked daemon in its own session that exec's with an
        # empty environment. Writes their pids; hangs if asked to.
        import subprocess

        same = subprocess.Popen(["sleep", "600"])
        session = subprocess.Popen(["sleep", "600"], start_new_session=True, env={})
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(w, str(os.getpid()).encode())
                os.execve("/usr/bin/sleep", ["sleep", "600"], {})
            os._exit(0)
        os.waitpid(pid, 0)
        os.close(w)
        daemon = int(os.read(r, 64))
        os.close(r)
        with open(extra_info["pidfile"], "w") as f:
            f.write(f"{same.pid} {session.pid} {daemon}")
        if extra_info.get("hang"):
            time.sleep(3600)
        return 1.0


    def daemonize(response, extra_info):
        # double-forks extra_info["n"] daemons that exit at once: orphans the worker must reap
        for _ in range(extra_info["n"]):
            pid = os.fork()
            if pid == 0:
                os.setsid()
                if os.fork() == 0:
                    os._exit(0)
                os._exit(0)
            os.waitpid(pid, 0)
        return {"score": 1.0, "pid": os.getpid()}


    def batch_good(solution_strs, ground_truths):
        return [float(a == b) for a, b in zip(solution_strs, ground_truths)]


    def batch_short(solution_strs):
        return [1.0] * (len(solution_strs) - 1)


    def batch_hang(solution_strs):
        time.sleep(3600)


    def batch_crash(solution_strs):
        os._exit(5)
    """
)

PARENT_ONLY = textwrap.dedent(
    """
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        raise ImportError("this module refuses to load in a worker process")


    def score(response):
        return 0.5
    """
)


@pytest.fixture(scope="session")
def scorer_file(tmp_path_factory):
    """Path of the module holding the test scorers."""
    path = tmp_path_factory.mktemp("scorers") / "misbehaving.py"
    path.write_text(SCORERS, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def parent_only_file(tmp_path_factory):
    """Path of a module that imports in the parent but refuses to import in a worker."""
    path = tmp_path_factory.mktemp("scorers") / "parent_only.py"
    path.write_text(PARENT_ONLY, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def spec(scorer_file):
    """``spec(name)``: a ScorerSpec for one of the test scorers, referenced by file path."""

    def make(name: str, **kwargs) -> ScorerSpec:
        fn, ref = load_function(str(scorer_file), name)
        s = ScorerSpec(name, fn, ref)
        return s.with_kwargs(kwargs) if kwargs else s

    return make


@pytest.fixture
def task():
    """``task(spec, index, response, ground_truth, **extra_info)``."""

    def make(spec: ScorerSpec, i: int, response: str = "x", ground_truth=None, **extra) -> ScoreTask:
        return ScoreTask(spec, Sample(i, response, ground_truth=ground_truth, extra_info=extra))

    return make


@pytest.fixture
def make_config():
    """``make_config(**fields)``: a RewardConfig with short deadlines (1 s) and 2 workers."""

    def make(**kw) -> RewardConfig:
        kw.setdefault("timeout_s", 1.0)
        kw.setdefault("num_workers", 2)
        return RewardConfig(**kw)

    return make
