"""The code scorer and its local sandbox: real subprocesses, real limits."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from rewardkit.scorers import sandbox, sandbox_isolation
from rewardkit.scorers.code import build_tests, compute_score, extract_code
from rewardkit.scorers.sandbox import Limits, run_python

from .sandbox_probes import assert_dies_with_its_starter, processes_with

ADD = {"inputs": ["1 2\n", "3 4\n", "5 5\n"], "outputs": ["3\n", "7", "10\n"]}
ADD_SOLUTION = "Here you go:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\nDone."


def test_extract_code():
    assert extract_code(ADD_SOLUTION) == "a, b = map(int, input().split())\nprint(a + b)\n"
    assert extract_code("```python\nx=1\n```\n```python\nx=2\n```") == "x=2\n"
    assert extract_code("```\nuntagged\n```") == "untagged\n"
    assert extract_code("```python\nx=1\n```\n```\nplain\n```") == "x=1\n"
    assert extract_code("```python\ntruncated") == "truncated"
    assert extract_code("print(1)") == "print(1)"
    assert extract_code("") == ""
    assert extract_code("```js\nx\n```") == "```js\nx\n```"
    start = time.perf_counter()
    extract_code("```python\n" * 200_000)
    assert time.perf_counter() - start < 10


def test_build_tests_shapes():
    assert [t.kind for t in build_tests("x", ADD)] == ["stdio"] * 3
    assert len(build_tests("x", '{"inputs": ["1"], "outputs": ["1"]}')) == 1
    assert [t.kind for t in build_tests("x", ["assert 1", "assert 2"])] == ["assert", "assert"]
    tests = build_tests("x", "import math\nassert f(1) == 1\nassert f(2) == 2\n")
    assert len(tests) == 2 and "import math" in tests[1].program
    assert build_tests("x", {"fn_name": "f", "inputs": [[1]], "outputs": [1]})[0].kind == "call"
    for bad in ({"inputs": ["1"]}, {"inputs": ["1"], "outputs": []}, 5, None):
        with pytest.raises(ValueError):
            build_tests("x", bad)


async def test_passing_failing_and_partial():
    assert await compute_score(ADD_SOLUTION, ADD) == {
        "score": 1.0,
        "acc": True,
        "passed": 3,
        "total": 3,
        "first_failure": None,
    }
    partial = await compute_score("a, b = map(int, input().split())\nprint(a + b if a < 5 else 0)", ADD)
    assert partial["passed"] == 2 and partial["score"] == pytest.approx(2 / 3)
    assert "test 2: wrong answer" in partial["first_failure"]
    crash = await compute_score("raise SystemExit(3)", ADD)
    assert crash["score"] == 0.0 and "exit code 3" in crash["first_failure"]
    syntax = await compute_score("def (", ADD)
    assert "SyntaxError" in syntax["first_failure"]
    empty = await compute_score("", ADD)
    assert empty == {"score": 0.0, "acc": False, "passed": 0, "total": 3, "first_failure": "empty solution"}


async def test_assert_and_call_based_tests():
    add = "def add(a, b):\n    return a + b\n"
    assert (await compute_score(add, ["assert add(1, 2) == 3", "assert add(1, 1) == 3"]))["score"] == 0.5
    assert (await compute_score(add, "import math\nassert add(1, 2) == 3\nassert add(2, 2) == 4\n"))["acc"]
    call = {"fn_name": "add", "inputs": [[1, 2], [2, 2], [[1], [2]]], "outputs": [[3], 4, [[1, 2]]]}
    cls = "class Solution:\n    def add(self, a, b):\n        return a + b\n"
    assert (await compute_score(add, call))["passed"] == 3
    assert (await compute_score(cls, call))["passed"] == 3
    assert "no function" in (await compute_score("x = 1", call))["first_failure"]


async def test_infinite_loop_is_killed_at_the_deadline():
    start = time.perf_counter()
    out = await compute_score("while True:\n    pass", {"inputs": [""], "outputs": ["1"]}, timeout_s=1.0)
    elapsed = time.perf_counter() - start
    assert out["score"] == 0.0 and "timed out" in out["first_failure"]
    assert elapsed < 1.0 * 8  # killed near the deadline, not after running to some natural end


async def test_total_budget_and_stop_on_first_failure():
    many = {"inputs": [""] * 5, "outputs": ["x"] * 5}
    slow = "import time\ntime.sleep(0.4)\nprint('x')"
    out = await compute_score(slow, many, total_timeout_s=0.5)
    # each test runs >= 0.4 s, so the 0.5 s budget is spent after at most two tests
    assert 1 <= out["passed"] <= 2 and out["total"] == 5 and "not run" in out["first_failure"]
    out = await compute_score("print('y')", many, stop_on_first_failure=True)
    assert out["passed"] == 0 and out["first_failure"].startswith("test 0")
    assert (await compute_score("print('x')", many, max_tests=2))["total"] == 2


async def test_unbounded_allocation_is_stopped_by_the_memory_limit():
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 * 1024))\n"
    out = await compute_score(hog, ["assert True"], timeout_s=20, memory_mb=256)
    assert out["score"] == 0.0
    assert "MemoryError" in out["first_failure"] or "killed" in out["first_failure"]


async def test_huge_file_is_capped():
    writer = "with open('big.bin', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))\n"
    run = await run_python(writer, limits=Limits(timeout_s=20, file_size_mb=4))
    assert run.status == "error" and "File too large" in run.stderr


async def test_output_is_capped():
    run = await run_python("import sys\nsys.stdout.write('y' * (5 << 20))", limits=Limits(output_bytes=1000))
    assert run.status == "ok" and len(run.stdout) < 1100 and run.stdout.endswith("[output truncated]")


@pytest.mark.skipif(not sandbox.network_isolation(), reason="no usable unshare --net on this machine")
async def test_network_is_unreachable():
    probe = (
        "import socket\n"
        "s = socket.socket()\n"
        "s.settimeout(2)\n"
        "print('rc', s.connect_ex(('127.0.0.1', 9)))\n"
        "print('ifaces', socket.if_nameindex())\n"
    )
    run = await run_python(probe)
    assert run.status == "ok"
    assert "eth0" not in run.stdout and "ifaces [(1, 'lo')]" in run.stdout


async def test_confined_to_its_own_directory_and_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("REWARDKIT_SECRET", "s3cret")
    program = (
        "import os, sys\n"
        "open('scratch.txt', 'w').write('x')\n"
        "print(os.getcwd())\n"
        "print(os.environ.get('REWARDKIT_SECRET'))\n"
        "print(sys.flags.isolated)\n"
    )
    run = await run_python(program)
    cwd, secret, isolated = run.stdout.split()
    # Confined (the default): a private tmpfs at /sandbox, gone with the run (it was a host temporary
    # directory, removed afterwards, when the sandbox could run code as root).
    assert cwd == "/sandbox" and not os.path.exists("/sandbox/scratch.txt")
    assert secret == "None" and isolated == "1"


def _interpreter_for_unprivileged_users() -> str | None:
    """This interpreter if an unprivileged uid can run it, else a system one that it can, else None."""
    import sys

    if sandbox.privilege_drop_works():
        return sys.executable
    system = "/usr/bin/python3"
    if os.path.exists(system) and os.stat(os.path.realpath(system)).st_mode & 0o001:
        return system
    return None


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
async def test_root_only_files_unreadable_after_privilege_drop(tmp_path, monkeypatch):
    import sys

    python = _interpreter_for_unprivileged_users()
    if python is None:
        pytest.skip("no interpreter usable by an unprivileged uid")
    monkeypatch.setattr(sys, "executable", python)
    monkeypatch.setattr(sandbox, "_drop_ok", None)  # probe again with that interpreter
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    secret.chmod(0o600)
    # The unconfined mode's own uid drop (the confined modes do not even show the host's /tmp).
    unconfined = {"mode": "unconfined", "allow_unconfined": True}
    monkeypatch.setattr(sandbox_isolation, "_last_warning", [float("-inf")])  # warn now, not in 30 s
    with pytest.warns(RuntimeWarning, match="UNCONFINED"):
        run = await run_python(
            f"import os\nprint(os.getuid())\nprint(open({str(secret)!r}).read())", isolation=unconfined
        )
    assert run.status == "error" and "PermissionError" in run.stderr
    assert int(run.stdout.split()[0]) != 0
    ok = await run_python(
        "open('mine.txt', 'w').write('x')\nprint(open('mine.txt').read())", isolation=unconfined
    )
    assert ok.status == "ok" and ok.stdout.strip() == "x"  # its own directory stays writable


async def test_concurrent_runs_respect_the_local_limit():
    results = await asyncio.gather(*(run_python(f"print({i})") for i in range(6)))
    assert [r.stdout.strip() for r in results] == [str(i) for i in range(6)]
    assert sandbox.LOCAL_LIMITER.busy == 0


def test_sync_invocation_through_rewardkit():
    """The scorer is async; rewardkit's synchronous invoke runs it in a private loop."""
    from rewardkit.batch import Sample
    from rewardkit.plugins import get_registries
    from rewardkit.scoring import invoke

    spec = get_registries().scorers.get("code")
    result = invoke(spec, Sample(index=0, response=ADD_SOLUTION, ground_truth=ADD, data_source="apps"))
    assert result.status == "ok" and result.score == 1.0 and result.extra["passed"] == 3
    bad = invoke(spec, Sample(index=0, response=ADD_SOLUTION, ground_truth=None))
    assert bad.status == "failed" and "ground_truth" in bad.error


async def test_signals_and_cpu_limit_are_reported():
    killed = await run_python("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert killed.status == "error" and killed.returncode == -9 and "SIGKILL" in killed.describe()
    spin = await run_python("while True: pass", limits=Limits(timeout_s=60, cpu_s=1))
    assert spin.status == "error" and "SIGXCPU" in spin.describe()
    assert spin.wall_s < 60  # the CPU limit fired long before the wall deadline
    exited = await run_python("import sys\nprint('partial')\nsys.exit(5)")
    assert exited.returncode == 5 and exited.stdout.strip() == "partial"


@pytest.mark.skipif("--pid" not in sandbox.network_isolation(), reason="no PID namespace on this machine")
async def test_escaped_children_do_not_survive():
    marker = "4321.1234"
    program = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"  # leaves the process group: only the PID namespace catches it
        f"    os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
        "import time\n"
        "time.sleep(0.5)\n"
        "print('parent done')\n"
    )
    run = await run_python(program)
    assert run.status == "ok"
    for _ in range(50):
        if not processes_with(marker):
            break
        await asyncio.sleep(0.1)
    assert processes_with(marker) == []


def test_runs_from_a_non_main_thread():
    out = {}

    def work():
        out["r"] = asyncio.run(compute_score(ADD_SOLUTION, ADD))

    t = threading.Thread(target=work)
    t.start()
    t.join(120)
    assert out["r"]["score"] == 1.0


async def test_exiting_early_does_not_pass_asserts():
    for hack in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit"):
        out = await compute_score("def add(a, b):\n    return 0\n" + hack, ["assert add(1, 2) == 3"])
        assert out["score"] == 0.0, hack
    assert (
        "exited before" in (await compute_score("import sys\nsys.exit(0)", ["assert False"]))["first_failure"]
    )
    out = await compute_score("import sys\nprint(sys.stdin.read())\nsys.exit(0)", ["assert False"])
    assert out["score"] == 0.0  # the token was read before the solution ran


async def test_future_imports_still_work():
    code = "from __future__ import annotations\n\ndef add(a: int, b: int) -> int:\n    return a + b\n"
    assert (await compute_score(code, ["assert add(1, 2) == 3"]))["acc"]


def test_forked_worker_gets_a_fresh_limiter():
    import multiprocessing

    parent = sandbox.LOCAL_LIMITER
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        child_id, child_score = pool.apply(_in_forked_child)
    assert child_id != id(parent) and child_score == 1.0


def _in_forked_child():
    result = asyncio.run(compute_score("print(int(input()) * 2)", {"inputs": ["2"], "outputs": ["4"]}))
    return id(sandbox.LOCAL_LIMITER), result["score"]


@pytest.mark.skipif(not os.path.exists("/proc/self/cmdline"), reason="needs Linux /proc")
@pytest.mark.parametrize("isolate", [True, False])
def test_sandbox_dies_with_the_process_that_started_it(isolate):
    """A worker killed at its deadline (SIGKILL, no clean-up) must not leave a sleeping program behind."""
    import secrets
    import sys

    whole, frac = secrets.randbelow(10**6) + 1000, secrets.randbelow(10**6)
    marker = f"{whole}.{frac}"  # only the sandboxed program's command line holds it whole
    starter = (
        "import asyncio, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from rewardkit.scorers.sandbox import Limits, run_python\n"
        f"asyncio.run(run_python(\"import os\\nos.execv('/bin/sleep', ['sleep', '{whole}' + '.{frac}'])\", "
        f"limits=Limits(timeout_s=120, isolate_network={isolate})))\n"
    )
    assert_dies_with_its_starter([sys.executable, "-c", starter], marker)
