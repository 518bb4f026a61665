"""Attacks on the local code sandbox, each of which must fail, in every setup this machine can produce.

Setups: each confined mode (``namespaces``, ``bwrap``) x

* ``root-unreachable``: rewardkit as root with an interpreter the sandbox user cannot reach
  (``/root/.pyenv``, the setup where the old sandbox kept uid 0);
* ``root-reachable``: rewardkit as root with ``/usr/bin/python3``;
* ``unprivileged``: rewardkit itself run as ``nobody`` (``setpriv``) with ``/usr/bin/python3``; the
  attacks run in that process and their results come back as JSON.

When the tests themselves run unprivileged, the first two become ``unprivileged-self``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import pytest

from rewardkit.scorers import sandbox, sandbox_isolation
from rewardkit.scorers.code import compute_score
from rewardkit.scorers.sandbox import Limits, RunResult, SandboxUnavailable, run_python

from .sandbox_probes import assert_dies_with_its_starter, processes_with

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces")

ROOT = os.geteuid() == 0
SRC = str(Path(__file__).resolve().parents[2] / "src")
SYSTEM_PYTHON = "/usr/bin/python3"
SECRET = "rk-trainer-secret-" + secrets.token_hex(8)
MODES = ("namespaces", "bwrap")


def _world_usable(path: str) -> bool:
    """Whether ``nobody`` can run ``path``: every directory above it searchable, the file executable."""
    real = os.path.realpath(path)
    parts = Path(real).parents
    return (
        os.path.exists(real) and all(os.stat(p).st_mode & 0o001 for p in parts) and os.stat(real).st_mode & 1
    )


# --- the attacks: (program template, limits, check(run, ctx)) ------------------------------------

DUMP = """
import os
out = []
for pid in [p for p in os.listdir('/proc') if p.isdigit()] + ['{trainer_pid}', '{decoy_pid}']:
    for what in ('environ', 'cmdline'):
        try:
            out.append(open('/proc/%s/%s' % (pid, what), 'rb').read().decode('latin-1'))
        except OSError as e:
            out.append('denied %s %s %s' % (pid, what, type(e).__name__))
print(repr(out))
print(repr(dict(os.environ)))
"""

ATTACKS = {
    "read_shadow": "print(open('/etc/shadow').read())",
    "list_root_home": "import os\ntry:\n    print(sorted(os.listdir('/root')))\nexcept OSError:\n    print('DENIED')",
    "read_other_process_environ_and_cmdline": DUMP,
    "trainer_env_vars": "import os\nprint(sorted(os.environ.items()))\nprint(open('/proc/self/environ').read())",
    "write_and_delete_outside": (
        "import os\nr = []\n"
        "for act in (lambda: open('{outside}/planted.txt', 'w').write('x'), lambda: os.remove('{victim}'),\n"
        "            lambda: open('{planted_file}', 'w').write('x'), lambda: os.mkdir('{planted_dir}')):\n"
        "    try:\n        act()\n        r.append('DONE')\n    except OSError as e:\n        r.append(type(e).__name__)\n"
        "print(r)"
    ),
    "fork_bomb": (
        "import os, time\nn = 0\n"
        "for _ in range(200):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        time.sleep(5)\n        os._exit(0)\n"
        "    n += 1\n"
        "print('forked', n)"
    ),
    "disk_fill_many_files": (
        "import os\ntotal = 0\nchunk = b'x' * (1 << 20)\n"
        "for n, d in enumerate(('/sandbox', '/tmp', '/dev/shm', '.', '/', '/dev')):\n"
        "    for i in range(20):\n"
        "        try:\n"
        "            with open('%s/fill%d-%d.bin' % (d, n, i), 'wb') as f:\n"
        "                for _ in range(4):\n                    f.write(chunk)\n                    f.flush()\n"
        "                    total += len(chunk)\n"
        "        except OSError:\n            break\n"
        "print('wrote', total)"
    ),
    "socket_to_local_listener": (
        "import socket\ns = socket.socket()\ns.settimeout(2)\nprint('connect', s.connect_ex(('127.0.0.1', {port})))"
    ),
    "dns": (
        "import socket\n"
        "try:\n    print(socket.getaddrinfo('example.com', 80))\nexcept OSError as e:\n    print('FAILED', e)\n"
        "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "try:\n    u.sendto(b'x', ('1.1.1.1', 53))\n    print('SENT')\nexcept OSError as e:\n    print('FAILED', e)"
    ),
    "kill_parent_and_outside_pids": (
        "import os, signal\nr = []\n"
        "for pid in ({trainer_pid}, {decoy_pid}):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n        r.append('KILLED')\n"
        "    except OSError as e:\n        r.append(type(e).__name__)\n"
        "for pid in (os.getppid(), 1):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n"
        "print(r)"
    ),
    "own_user_namespace": (
        "import ctypes, subprocess\n"
        "print('unshare', ctypes.CDLL(None).unshare(0x10000000))\n"
        "p = subprocess.run(['unshare', '--user', '--map-root-user', '--mount', 'true'], capture_output=True)\n"
        "print('cli', p.returncode)"
    ),
    "forge_exit_status": (
        "import os\nfds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\nprint('fds', fds)\n"
        "for fd in range(3, 64):\n    try:\n        os.write(fd, b'0')\n    except OSError:\n        pass\n"
        "raise SystemExit(7)"
    ),
    "double_forked_daemon": (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\nprint('parent done')"
    ),
}

LIMITS = {
    "fork_bomb": {"max_processes": 16},
    "disk_fill_many_files": {"disk_mb": 8, "file_size_mb": 16},
}


def check(name: str, run: dict, ctx: dict) -> None:
    """Assert that attack ``name`` failed, given its run (a :class:`RunResult` as a dict)."""
    out, err = run["stdout"], run["stderr"]
    assert "rewardkit sandbox launcher" not in err, err
    if name == "read_shadow":
        assert run["status"] == "error" and ("PermissionError" in err or "FileNotFoundError" in err), run
        assert "root:" not in out
    elif name == "list_root_home":
        assert out.strip() == "DENIED", out
    elif name in ("read_other_process_environ_and_cmdline", "trainer_env_vars"):
        assert run["status"] == "ok", run
        assert SECRET not in out and ctx["decoy_arg"] not in out
        if name == "trainer_env_vars":
            assert "RK_TRAINER" not in out and "PYTHONPATH" not in out
    elif name == "write_and_delete_outside":
        assert run["status"] == "ok", run
        assert "DONE" not in out, out
        assert os.path.exists(ctx["victim"]) and not os.path.exists(
            os.path.join(ctx["outside"], "planted.txt")
        )
        assert not os.path.exists(ctx["planted_file"]) and not os.path.exists(ctx["planted_dir"])
    elif name == "fork_bomb":
        forked = int(out.split()[-1])
        assert forked < 16, out  # RLIMIT_NPROC holds for the sandbox user (the program itself counts)
    elif name == "disk_fill_many_files":
        wrote = int(out.split()[-1])
        assert wrote <= 8 << 20, out  # up to 480 MiB attempted across 120 files; 8 MiB in total allowed
    elif name == "socket_to_local_listener":
        assert "connect 0" not in out, out
        assert ctx["accepted"]() == 0
    elif name == "dns":
        assert out.count("FAILED") == 2, out
    elif name == "kill_parent_and_outside_pids":
        assert "KILLED" not in out, out
        assert ctx["decoy"].poll() is None, "the outside process was killed"
    elif name == "own_user_namespace":  # capabilities there would allow an uncapped tmpfs, among others
        assert run["status"] == "ok" and "unshare -1" in out and "cli 0" not in out, run
    elif name == "forge_exit_status":  # the launcher's status fd is not the program's to write
        assert run["status"] == "error" and run["returncode"] == 7, run
        assert out.split("\n")[0] == "fds [0, 1, 2, 3]", out  # 3: the listdir itself
    elif name == "double_forked_daemon":
        deadline = time.monotonic() + 5
        while processes_with(ctx["marker"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = processes_with(ctx["marker"])
        for pid in left:
            os.kill(int(pid), signal.SIGKILL)
        assert left == [], "the daemon outlived the sandbox"
    else:  # pragma: no cover
        raise AssertionError(name)


# --- the world the attacks run in ------------------------------------------------------------------


@pytest.fixture(scope="module")
def ctx():
    """Things outside the sandbox: a listener, a process holding secrets, a world-writable directory."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def serve():
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = listener.accept()
                accepted.append(1)
                conn.close()
            except OSError:
                pass

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    decoy_arg = "rk-decoy-" + secrets.token_hex(8)
    decoy = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", decoy_arg],
        env={"RK_DECOY": SECRET},
        stdout=subprocess.DEVNULL,
    )
    outside = tempfile.mkdtemp(prefix="rk-outside-", dir="/tmp")
    os.chmod(outside, 0o777)  # world-writable: only the sandbox can stop a write here
    victim = os.path.join(outside, "victim.txt")
    Path(victim).write_text("keep me")
    os.chmod(victim, 0o666)
    token = secrets.token_hex(6)
    planted_file, planted_dir = f"/etc/rk-planted-{token}", f"/rk-planted-{token}"
    old = os.environ.get("RK_TRAINER_SECRET")
    os.environ["RK_TRAINER_SECRET"] = SECRET
    try:
        yield {
            "port": listener.getsockname()[1],
            "accepted": lambda: (time.sleep(0.3), len(accepted))[1],
            "decoy": decoy,
            "decoy_pid": decoy.pid,
            "decoy_arg": decoy_arg,
            "trainer_pid": os.getpid(),
            "outside": outside,
            "victim": victim,
            "marker": f"{secrets.randbelow(10**6) + 1000}.{secrets.randbelow(10**6)}",
            "planted_file": planted_file,
            "planted_dir": planted_dir,
        }
    finally:
        if old is None:
            os.environ.pop("RK_TRAINER_SECRET", None)
        else:
            os.environ["RK_TRAINER_SECRET"] = old
        stop.set()
        decoy.kill()
        decoy.wait()
        listener.close()
        shutil.rmtree(outside, ignore_errors=True)
        with contextlib.suppress(OSError):  # only there if an attack got through
            os.remove(planted_file)
        with contextlib.suppress(OSError):
            os.rmdir(planted_dir)


def _programs(ctx: dict) -> dict[str, str]:
    keys = ("port", "trainer_pid", "decoy_pid", "outside", "victim", "marker", "planted_file", "planted_dir")
    fields = {k: ctx[k] for k in keys}
    return {name: template.format(**fields) for name, template in ATTACKS.items()}


def _has_sys_admin() -> bool:
    with open("/proc/self/status") as f:
        caps = next(line for line in f if line.startswith("CapEff:"))
    return bool(int(caps.split()[1], 16) & (1 << 21))  # CAP_SYS_ADMIN


def _should_work(mode: str) -> bool:
    """Whether this machine clearly allows ``mode``: then a failed probe is a bug, not a skip."""
    if mode == "bwrap":
        return bool(shutil.which("bwrap")) and sandbox_isolation.probe("namespaces") is None
    return bool(shutil.which("unshare")) and (not ROOT or _has_sys_admin())


def _require(mode: str) -> None:
    why = sandbox_isolation.probe(mode)
    if why is not None:
        if ROOT and _should_work(mode):
            pytest.fail(f"{mode} should work here (root with CAP_SYS_ADMIN) but: {why}")
        pytest.skip(f"{mode} unavailable here: {why}")


async def _attack(name: str, program: str, mode: str) -> dict:
    limits = Limits(timeout_s=15, **LIMITS.get(name, {}))
    isolation = {"mode": mode, "allow_unconfined": mode == "unconfined"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return asdict(await run_python(program, limits=limits, isolation=isolation))


#: ``RK_ATTACK_UNCONFINED=1`` also runs the attacks against the unconfined mode (the old sandbox), to
#: see which of them the confined modes stop: those tests are expected to fail.
IN_PROCESS_MODES = MODES + (("unconfined",) if os.environ.get("RK_ATTACK_UNCONFINED") == "1" else ())


IN_PROCESS = ["root-unreachable", "root-reachable"] if ROOT else ["unprivileged-self"]


@pytest.mark.parametrize("mode", IN_PROCESS_MODES)
@pytest.mark.parametrize("setup", IN_PROCESS)
@pytest.mark.parametrize("name", list(ATTACKS))
async def test_attack_fails_in_process(name, setup, mode, ctx, monkeypatch):
    if setup == "root-reachable":
        if not _world_usable(SYSTEM_PYTHON):
            pytest.skip(f"{SYSTEM_PYTHON} is not usable by an unprivileged user here")
        monkeypatch.setattr(sys, "executable", SYSTEM_PYTHON)
        monkeypatch.setattr(sandbox, "_drop_ok", None)  # unconfined: probe its uid drop again
    elif setup == "root-unreachable" and _world_usable(sys.executable):
        pytest.skip(f"{sys.executable} is reachable by an unprivileged user: not the unreachable setup")
    if mode != "unconfined":
        _require(mode)
    check(name, await _attack(name, _programs(ctx)[name], mode), ctx)


_RUNNER = """
import asyncio, json, sys
from dataclasses import asdict
from rewardkit.scorers.sandbox import Limits, run_python
job = json.loads(sys.stdin.read())
async def main():
    out = {}
    for name, program in job["programs"].items():
        limits = Limits(timeout_s=15, **job["limits"].get(name, {}))
        try:
            out[name] = asdict(await run_python(program, limits=limits, isolation={"mode": job["mode"]}))
        except Exception as e:
            out[name] = {"unavailable": "%s: %s" % (type(e).__name__, e)}
    return out
print(json.dumps(asyncio.run(main())))
"""


@pytest.fixture(scope="module")
def unprivileged_runs(ctx):
    """Every attack run by a rewardkit process that is itself ``nobody``, per mode (run once)."""
    if not ROOT:
        pytest.skip("the tests run unprivileged already (see unprivileged-self)")
    setpriv = shutil.which("setpriv")
    if not setpriv or not _world_usable(SYSTEM_PYTHON):
        pytest.skip("needs setpriv and a system python usable by nobody")
    site = [p for p in sys.path if p.endswith("site-packages") and _world_usable(os.path.dirname(p))]
    if not all(_world_usable(os.path.dirname(p)) for p in (SRC,)):
        pytest.skip(f"{SRC} is not readable by nobody")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RK_TRAINER_SECRET": SECRET}
    env["PYTHONPATH"] = os.pathsep.join([SRC, *site])
    results = {}
    for mode in MODES:
        job = json.dumps({"programs": _programs(ctx), "limits": LIMITS, "mode": mode})
        cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", SYSTEM_PYTHON, "-c", _RUNNER]
        done = subprocess.run(cmd, input=job, capture_output=True, text=True, env=env, timeout=240, cwd="/")
        if done.returncode != 0:
            results[mode] = {"error": done.stderr[-2000:]}
        else:
            results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_fails_unprivileged(name, mode, unprivileged_runs, ctx):
    runs = unprivileged_runs[mode]
    assert "error" not in runs, runs.get("error")
    run = runs[name]
    if "unavailable" in run:
        pytest.skip(f"{mode} unavailable for nobody: {run['unavailable']}")
    check(name, run, ctx)


# --- failing closed ---------------------------------------------------------------------------------


@pytest.fixture
def nothing_works(monkeypatch):
    """A machine without bubblewrap or util-linux: no confined mode can start."""
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sandbox_isolation, "_probed", {})
    monkeypatch.setattr(sandbox_isolation, "_last_warning", [float("-inf")])


ADD = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
ADD_SOLUTION = "a, b = map(int, input().split())\nprint(a + b)\n"


async def test_unavailable_isolation_fails_the_sample(nothing_works):
    with pytest.raises(SandboxUnavailable) as e:
        await run_python("print(1)")
    msg = str(e.value)
    assert "unshare" in msg and "bubblewrap" in msg and "SandboxFusion" in msg and "allow_unconfined" in msg
    out = await compute_score(ADD_SOLUTION, ADD)
    assert out.status == "failed" and out.reason == "sandbox_unavailable" and "bubblewrap" in out.error
    forced = await compute_score(ADD_SOLUTION, ADD, sandbox={"mode": "namespaces"})
    assert forced.reason == "sandbox_unavailable" and "unshare" in forced.error


async def test_allow_unconfined_runs_with_a_loud_warning(nothing_works, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # the program may need nothing but the interpreter
    monkeypatch.setattr(sandbox_isolation, "probe", lambda mode: f"{mode}: not installed here (test)")
    with pytest.warns(RuntimeWarning, match="UNCONFINED"):
        out = await compute_score(ADD_SOLUTION, ADD, sandbox={"allow_unconfined": True})
    assert out["score"] == 1.0
    with pytest.raises(SandboxUnavailable, match="allow_unconfined"):
        await run_python("print(1)", isolation={"mode": "unconfined"})


@pytest.mark.parametrize("executor", ["inline", "process"])
def test_config_reaches_the_code_scorer(executor, nothing_works):
    """``reward.sandbox`` travels to the scorer through the real engine; unavailable → typed failure."""
    import rewardkit

    samples = [{"response": ADD_SOLUTION, "ground_truth": ADD, "data_source": "apps"}] * 2
    config = {"executor": executor, "num_workers": 1, "sandbox": {"mode": "namespaces", "disk_mb": 8}}
    result = rewardkit.compute(samples, config)
    assert result.status == ["failed", "failed"] and result.reasons == ["sandbox_unavailable"] * 2
    assert "unshare" in result.errors[0]


def test_unconfined_would_have_let_the_attack_through(ctx):
    """The checks are not vacuous: where the old sandbox kept uid 0, ``read_shadow`` succeeds unconfined."""
    if not ROOT or _world_usable(sys.executable):
        pytest.skip("needs root with an interpreter the unprivileged user cannot reach")
    sandbox_isolation._last_warning[0] = float("-inf")
    with pytest.warns(RuntimeWarning):
        run = asyncio.run(
            run_python(ATTACKS["read_shadow"], isolation={"mode": "unconfined", "allow_unconfined": True})
        )
    with pytest.raises(AssertionError):
        check("read_shadow", asdict(run), ctx)
    assert isinstance(run, RunResult)


# --- everything it starts dies with it ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_daemon_dies_at_the_deadline(mode):
    _require(mode)
    marker = f"{secrets.randbelow(10**6) + 1000}.{secrets.randbelow(10**6)}"
    program = (
        "import os\n"
        "if os.fork() == 0:\n    os.setsid()\n"
        f"    os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
        "while True:\n    pass\n"
    )
    run = await run_python(program, limits=Limits(timeout_s=1.0), isolation={"mode": mode})
    assert run.status == "timeout"
    deadline = time.monotonic() + 5
    while processes_with(marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert processes_with(marker) == []


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_dies_with_the_rewardkit_process(mode):
    """A worker SIGKILLed mid-run (no clean-up at all) leaves nothing of the sandbox behind."""
    _require(mode)
    marker = f"{secrets.randbelow(10**6) + 1000}.{secrets.randbelow(10**6)}"
    whole, frac = marker.split(".")
    starter = (
        "import asyncio\n"
        "from rewardkit.scorers.sandbox import Limits, run_python\n"
        f"asyncio.run(run_python(\"import os\\nos.execv('/bin/sleep', ['sleep', '{whole}' + '.{frac}'])\", "
        f"limits=Limits(timeout_s=120), isolation={{'mode': '{mode}'}}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, *sys.path])}
    assert_dies_with_its_starter([sys.executable, "-c", starter], marker, env)


@pytest.mark.parametrize("mode", MODES)
async def test_unicode_empty_and_large_io(mode):
    _require(mode)
    iso = {"mode": mode}
    run = await run_python("print('héllo ✓ \U0001f600')", isolation=iso)
    assert run.status == "ok" and run.stdout == "héllo ✓ \U0001f600\n"
    assert (await run_python("", isolation=iso)).status == "ok"
    big = "x" * (2 << 20)
    run = await run_python("import sys\nprint(len(sys.stdin.read()))", stdin=big, isolation=iso)
    assert run.stdout.strip() == str(len(big))
    huge_program = "x = 1\n" * 100_000 + "print(x)\n"
    assert (await run_python(huge_program, isolation=iso)).stdout.strip() == "1"


@pytest.mark.parametrize("mode", MODES)
def test_engine_scores_code_in_each_mode(mode):
    import rewardkit

    _require(mode)
    samples = [{"response": ADD_SOLUTION, "ground_truth": ADD, "data_source": "apps"}]
    result = rewardkit.compute(samples, {"executor": "process", "num_workers": 1, "sandbox": {"mode": mode}})
    assert result.status == ["ok"] and result.scores == [1.0]


@pytest.mark.parametrize("mode", MODES)
def test_an_interpreter_under_tmp_still_runs_confined(mode, tmp_path_factory):
    """A venv under /tmp (a fresh CI clone in mktemp -d) is bound into the sandbox at its own path, so
    /tmp there cannot be the usual link to /sandbox: the run still works, writing to TMPDIR, and
    /tmp shows nothing of the host's."""
    _require(mode)
    base = tempfile.mkdtemp(prefix="rk-venv-", dir="/tmp")
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", f"{base}/venv"], check=True)
        program = (
            "import os, tempfile\n"
            "open(os.path.join(tempfile.gettempdir(), 'x'), 'w').write('ok')\n"
            "print(tempfile.gettempdir(), sorted(os.listdir('/tmp')) if os.access('/tmp', os.R_OK) else 'unlisted')\n"
        )
        starter = (
            "import asyncio, sys\n"
            "from rewardkit.scorers.sandbox import run_python\n"
            f"run = asyncio.run(run_python({program!r}, isolation={{'mode': '{mode}'}}))\n"
            "print(sys.prefix, run.status, run.stdout.strip(), run.stderr.strip()[-300:])\n"
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, *filter(None, sys.path)])}
        out = subprocess.run(
            [f"{base}/venv/bin/python", "-c", starter], env=env, capture_output=True, text=True, timeout=120
        )
        assert out.stdout.startswith(f"{base}/venv ok /sandbox"), out.stdout + out.stderr
        assert (
            "rk-outside" not in out.stdout
            and os.path.basename(base) not in out.stdout.split("/sandbox", 1)[1]
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
