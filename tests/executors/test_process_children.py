"""What scorers start (children, new sessions, double-forked daemons) never outlives the executor."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from rewardkit.executors.process import ProcessExecutor

pytestmark = pytest.mark.timeout(90)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _pids(path) -> list[int]:
    pids = [int(p) for p in path.read_text().split()]
    assert len(pids) == 3
    return pids


def test_engine_close_kills_what_a_finished_scorer_left_running(scorer_file, tmp_path):
    import rewardkit

    pidfile = tmp_path / "pids"
    cfg = {
        "executor": "process",
        "num_workers": 1,
        "timeout_s": 20.0,
        "custom_reward_function": {"path": str(scorer_file), "name": "spawn_three"},
    }
    with rewardkit.RewardEngine(cfg) as engine:
        result = engine.compute([{"response": "x", "extra_info": {"pidfile": str(pidfile)}}])
        assert result.scores == [1.0]
        pids = _pids(pidfile)
        assert all(_alive(p) for p in pids)  # left running by a scorer that returned
    assert _wait_gone(pids) == []


def test_a_timeout_kills_detached_children_too(make_config, spec, task, tmp_path):
    pidfile = tmp_path / "pids"
    ex = ProcessExecutor(make_config(num_workers=1, timeout_s=2.0))
    try:
        import asyncio

        results = asyncio.run(ex.run([task(spec("spawn_three"), 0, pidfile=str(pidfile), hang=True)]))
        assert results[0].reason == "timeout"
        pids = _pids(pidfile)
        assert _wait_gone(pids) == []  # gone at the kill, before close
        assert ex.stats["killed"] == 1
    finally:
        ex.close()


def test_interpreter_exit_kills_them(scorer_file, tmp_path):
    pidfile = tmp_path / "pids"
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio
            from rewardkit.batch import Sample
            from rewardkit.config import RewardConfig
            from rewardkit.executors.base import ScoreTask
            from rewardkit.executors.process import ProcessExecutor
            from rewardkit.scoring import ScorerSpec, load_function

            if __name__ == "__main__":
                fn, ref = load_function({str(scorer_file)!r}, "spawn_three")
                ex = ProcessExecutor(RewardConfig(num_workers=2, timeout_s=20))
                task = ScoreTask(ScorerSpec("s", fn, ref), Sample(0, "x", extra_info={{"pidfile": {str(pidfile)!r}}}))
                print(asyncio.run(ex.run([task]))[0].status, flush=True)
                # no close(): the interpreter exits with the pool up
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
    assert _wait_gone(_pids(pidfile)) == []


def _zombies_of(pid: int) -> int:
    from rewardkit.executors.process_tree import zombie_children

    return len(zombie_children(pid))


def test_orphans_a_worker_inherits_are_reaped(make_config, spec, task):
    """A subreaper inherits every daemon its scorers orphan: they must not pile up as zombies."""
    import asyncio

    ex = ProcessExecutor(make_config(num_workers=1, timeout_s=20.0))
    try:
        result = asyncio.run(ex.run([task(spec("daemonize"), 0, n=100)]))[0]
        assert result.status == "ok"
        worker = result.extra["pid"]
        deadline = time.monotonic() + 20
        while _zombies_of(worker) > 64 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _zombies_of(worker) <= 64
        assert ex.pids == [worker]  # the same worker, still serving
    finally:
        ex.close()
