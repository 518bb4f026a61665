"""A local sandbox for untrusted Python: one short-lived, resource-limited subprocess per run.

Model-written code never runs in rewardkit's own process, and never with more privilege than an
unprivileged user. How it is isolated is chosen by :mod:`rewardkit.scorers.sandbox_isolation`
(``namespaces``, ``bwrap``, or the opt-in ``unconfined``); a confined run gets a minimal read-only
root, a uid of its own, ``no_new_privs``, fresh PID and network namespaces, an empty environment and
a size-capped tmpfs (:mod:`rewardkit.scorers.sandbox_launcher`). When no confined mode works here,
:func:`run_python` raises :class:`SandboxUnavailable` rather than run the code with less.

Every mode also gets:

* ``python -I`` (isolated mode: no user site-packages, no ``PYTHON*`` variables, cwd not on ``sys.path``);
* rlimits set by a tiny launcher before it ``exec``s the interpreter: CPU seconds, address space,
  file size (which also caps what it can print), open files, processes, no core dumps;
* a wall-clock deadline after which it is killed with everything it started;
* on Linux, death with the process that started it (``PR_SET_PDEATHSIG``): a worker killed at its
  deadline or crashed leaves no sandboxed program behind.

The ``unconfined`` mode (the sandbox of old) only adds its own temporary directory, ``unshare --net``
where the platform allows it, and, as root, a throw-away uid when that uid can reach the interpreter.
For code you must not trust with a kernel, use a remote sandbox (SandboxFusion) or a VM.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from rewardkit.runtime.limits import Limiter
from rewardkit.scorers.sandbox_isolation import (  # noqa: F401  (SandboxUnavailable: re-exported)
    Isolation,
    SandboxUnavailable,
    launcher_config,
    resolve,
    sandbox_env,
)
from rewardkit.scorers.sandbox_isolation import command as isolation_command
from rewardkit.scorers.sandbox_launcher import RLIMIT_SOURCE
from rewardkit.scorers.sandbox_limits import LAUNCH_FAILED, Limits  # noqa: F401  (re-exported)

# The launcher forks: the child sets the limits, drops privileges and execs the program; the parent
# (pid 1 of the namespace when there is one, so its exit takes every straggler with it) waits and
# writes the child's exact wait status to a file, because ``unshare --fork`` does not relay signals.
_LAUNCHER = r"""
import json, os, resource, sys
c = json.loads(sys.argv[1])
__RLIMIT__
launcher = os.getpid()
pid = os.fork()
if pid == 0:
    try:
        apply_limits(c)
        if c["uid"] is not None:
            os.setgroups([])
            os.setgid(c["uid"])
            os.setuid(c["uid"])
        if c["pdeathsig"]:  # after setuid, which clears it: die with the launcher
            import ctypes
            ctypes.CDLL(None).prctl(1, 9)
            if os.getppid() != launcher:
                os._exit(1)
        os.execve(c["python"], [c["python"], "-I", *c["argv"]], c["env"])
    except BaseException as e:
        os.write(2, ("rewardkit sandbox launcher: %s: %s\n" % (type(e).__name__, e)).encode())
    os._exit(%d)
_, status = os.waitpid(pid, 0)
if c["status_file"]:
    with open(c["status_file"], "w") as f:
        f.write(str(status))
os._exit(0)
""".replace("%d", str(LAUNCH_FAILED)).replace("__RLIMIT__\n", RLIMIT_SOURCE)


@dataclass
class RunResult:
    """What one run did. ``status``: ``"ok"`` (exit 0), ``"error"`` (non-zero exit or signal), ``"timeout"``."""

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float

    def describe(self, limit: int = 300) -> str:
        """A one-line reason for a failed run: the signal, the last stderr line, or the deadline."""
        if self.status == "timeout":
            return f"timed out after {self.wall_s:.1f}s"
        rc = self.returncode
        if rc is not None and rc < 0:
            with contextlib.suppress(ValueError):
                name = signal.Signals(-rc).name
                hint = {"SIGKILL": " (memory or CPU limit?)", "SIGXCPU": " (CPU time limit)"}.get(name, "")
                return f"killed by {name}{hint}"
        last = next((ln for ln in reversed(self.stderr.strip().splitlines()) if ln.strip()), "")
        msg = f"exit code {rc}" + (f": {last.strip()}" if last else "")
        return msg if len(msg) <= limit else msg[: limit - 1] + "…"


#: Local sandboxed processes in flight per rewardkit process.
LOCAL_LIMITER = Limiter(os.cpu_count() or 2)


def _fresh_limiter_after_fork() -> None:
    # A forked worker must not inherit a lock or waiters belonging to its parent's threads and loops.
    global LOCAL_LIMITER
    LOCAL_LIMITER = Limiter(LOCAL_LIMITER.n)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_limiter_after_fork)

_isolation_lock = threading.Lock()
_isolation: list[str] | None = None
_warned = False

_UNSHARE_CANDIDATES = (
    ["--net", "--pid", "--fork", "--kill-child"],  # --kill-child: the namespace dies with unshare
    ["--net"],
    ["--map-root-user", "--net", "--pid", "--fork", "--kill-child"],
    ["--map-root-user", "--net"],
)


def network_isolation() -> list[str]:
    """The command prefix that runs a program without network (``[]`` if none works here; probed once)."""
    global _isolation
    with _isolation_lock:
        if _isolation is not None:
            return _isolation
        _isolation = []
        unshare = shutil.which("unshare") if sys.platform.startswith("linux") else None
        if unshare:
            for flags in _UNSHARE_CANDIDATES:
                cmd = [unshare, *flags]
                try:
                    ok = (
                        subprocess.run(
                            [*cmd, sys.executable, "-I", "-S", "-c", "pass"],
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            timeout=10,
                        ).returncode
                        == 0
                    )
                except (OSError, subprocess.SubprocessError):
                    ok = False
                if ok:
                    _isolation = cmd
                    break
        return _isolation


def _warn_no_network_isolation() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            "rewardkit sandbox: cannot isolate the network here (no usable 'unshare --net'); "
            "sandboxed code can reach the network. Use SandboxFusion for untrusted code.",
            RuntimeWarning,
            stacklevel=3,
        )


_drop_lock = threading.Lock()
_drop_ok: bool | None = None
NOBODY = 65534


def privilege_drop_works() -> bool:
    """Whether, running as root, an unprivileged uid can still start this interpreter (probed once).

    It cannot when Python lives under a root-only directory (e.g. ``/root/.pyenv``); sandboxed
    programs then keep root's uid, with a warning.
    """
    global _drop_ok
    with _drop_lock:
        if _drop_ok is None:
            _drop_ok = False
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                with tempfile.TemporaryDirectory(prefix="rewardkit-probe-") as probe_dir:
                    status_path = os.path.join(probe_dir, "status")
                    config = {
                        **_base_config(probe_dir),
                        "uid": NOBODY,
                        "argv": ["-c", "pass"],
                        "status_file": status_path,
                    }
                    try:
                        subprocess.run(
                            [sys.executable, "-I", "-S", "-c", _LAUNCHER, json.dumps(config)],
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            timeout=20,
                        )
                        rc = _program_returncode(status_path, None)
                    except (OSError, subprocess.SubprocessError):
                        rc = -1
                _drop_ok = rc == 0
                if not _drop_ok:
                    warnings.warn(
                        f"rewardkit sandbox: running as root but an unprivileged user cannot start "
                        f"{sys.executable}; sandboxed code runs as root (confined to its directory and rlimits only)",
                        RuntimeWarning,
                        stacklevel=2,
                    )
        return _drop_ok


def _choose_uid(workdir: str) -> int | None:
    """When running as root: a throw-away uid that owns ``workdir`` (or nobody); else ``None``."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not privilege_drop_works():
        return None
    for uid in (random.randrange(1_000_000_000, 2_000_000_000), NOBODY):
        try:
            os.chown(workdir, uid, uid)
            return uid
        except OSError:
            continue
    return None


def _env(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _base_config(workdir: str, limits: Limits | None = None) -> dict:
    limits = limits or Limits()
    mb = 1024 * 1024
    return {
        "cpu": limits.cpu_s if limits.cpu_s is not None else int(limits.timeout_s) + 1,
        "as": limits.memory_mb * mb if limits.memory_mb else None,
        "fsize": limits.file_size_mb * mb if limits.file_size_mb else None,
        "nofile": limits.max_open_files,
        "nproc": limits.max_processes,
        "uid": None,
        "python": sys.executable,
        "argv": ["main.py"],
        "env": _env(workdir),
        "status_file": None,
        "pdeathsig": sys.platform.startswith("linux"),
    }


def _read_capped(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return ""
    text = data[:limit].decode("utf-8", errors="replace")
    return text + ("\n…[output truncated]" if len(data) > limit else "")


def _program_returncode(status_path: str, launcher_rc: int | None) -> int | None:
    """The program's return code (``-signal`` if a signal killed it), from the launcher's status file."""
    try:
        with open(status_path) as f:
            status = int(f.read().strip())
    except (OSError, ValueError):
        return launcher_rc if launcher_rc != 0 else -1  # the launcher itself died
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _die_with_this_process() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has Linux SIGKILL the sandbox when the process that started it dies.

    Without it, a worker process killed at its deadline (or crashing) would leave a sleeping
    program behind: the sandbox runs in its own session, so killing the worker's process group
    does not reach it, and a program that sleeps never hits its CPU limit. ``None`` off Linux.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG: kept across exec (unshare is not setuid)
        if os.getppid() != parent:  # it died before prctl took effect
            os._exit(1)

    return hook


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


async def run_python(
    program: str,
    stdin: str = "",
    limits: Limits | None = None,
    isolation: Isolation | dict | None = None,
) -> RunResult:
    """Run ``program`` (Python source) in a fresh sandboxed subprocess, feeding it ``stdin``.

    ``isolation`` (an :class:`~rewardkit.scorers.sandbox_isolation.Isolation` or the ``sandbox:`` config
    dict) picks the mode; by default the best confined one that works here. Raises
    :class:`SandboxUnavailable` when the requested isolation cannot be had, and :class:`RuntimeError`
    when the sandbox itself cannot start (never for anything the program does): those are
    infrastructure failures, not wrong answers.
    """
    limits = limits or Limits()
    mode = await asyncio.to_thread(resolve, Isolation.coerce(isolation))  # the first call probes
    prefix: list[str] = []
    if mode == "unconfined" and limits.isolate_network:
        prefix = network_isolation()
        if not prefix:
            _warn_no_network_isolation()
    async with LOCAL_LIMITER.hold():
        workdir = tempfile.mkdtemp(prefix="rewardkit-sandbox-")
        try:
            if mode == "unconfined":
                return await _run_in(workdir, prefix, program, stdin, limits)
            return await _run_confined(mode, workdir, program, stdin, limits)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


async def _run_in(workdir: str, prefix: list[str], program: str, stdin: str, limits: Limits) -> RunResult:
    script = os.path.join(workdir, "main.py")
    with open(script, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(program)
    os.chmod(script, 0o644)
    config = {**_base_config(workdir, limits), "uid": _choose_uid(workdir)}

    def make_command(status_path: str, _status_fd: int, _program_fd: int) -> list[str]:
        config["status_file"] = status_path
        return [*prefix, sys.executable, "-I", "-S", "-c", _LAUNCHER, json.dumps(config)]

    return await _supervise(make_command, workdir, config["env"], program, stdin, limits, pass_fds=False)


async def _run_confined(mode: str, workdir: str, program: str, stdin: str, limits: Limits) -> RunResult:
    # ``workdir`` (empty) is where the namespaces launcher mounts the sandbox's new root.
    def make_command(_status_path: str, status_fd: int, program_fd: int) -> list[str]:
        return isolation_command(mode, launcher_config(mode, limits, workdir, status_fd, program_fd))

    return await _supervise(make_command, workdir, sandbox_env(), program, stdin, limits)


async def _supervise(
    make_command: Callable[[str, int, int], list[str]],
    workdir: str,
    env: dict[str, str],
    program: str,
    stdin: str,
    limits: Limits,
    pass_fds: bool = True,
) -> RunResult:
    """Start the launcher, enforce the wall deadline, and read back what the program did."""
    # stdin/stdout/stderr are files outside the work directory: no pipe to drain, no deadlock, and
    # RLIMIT_FSIZE caps how much the program can print. The confined launchers get the program and
    # the status file as inherited fds.
    io_dir = tempfile.mkdtemp(prefix="rewardkit-io-")
    try:
        in_path, out_path, err_path, status_path, program_path = (
            os.path.join(io_dir, n) for n in ("in", "out", "err", "status", "program")
        )
        with open(in_path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(stdin or "")
        with open(program_path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(program)
        with (
            open(in_path, "rb") as fin,
            open(out_path, "wb") as fout,
            open(err_path, "wb") as ferr,
            open(status_path, "wb") as fstatus,
            open(program_path, "rb") as fprogram,
        ):
            cmd = make_command(status_path, fstatus.fileno(), fprogram.fileno())
            start = time.monotonic()
            try:
                proc = await asyncio.create_subprocess_exec(
                    *cmd,
                    stdin=fin,
                    stdout=fout,
                    stderr=ferr,
                    cwd=workdir,
                    env=env,
                    start_new_session=True,
                    preexec_fn=_die_with_this_process(),
                    pass_fds=(fstatus.fileno(), fprogram.fileno()) if pass_fds else (),
                )
            except OSError as e:
                raise RuntimeError(f"sandbox: cannot start a subprocess: {e}") from e
            try:
                await asyncio.wait_for(proc.wait(), timeout=limits.timeout_s)
                rc = _program_returncode(status_path, proc.returncode)
                status = "ok" if rc == 0 else "error"
            except asyncio.TimeoutError:
                _kill_group(proc)
                await proc.wait()
                rc, status = proc.returncode, "timeout"
            except BaseException:  # cancelled by the executor: never leave the program running
                _kill_group(proc)
                raise
            finally:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)  # stragglers it forked
            wall = time.monotonic() - start
        stdout = _read_capped(out_path, limits.output_bytes)
        stderr = _read_capped(err_path, limits.output_bytes)
    finally:
        shutil.rmtree(io_dir, ignore_errors=True)
    if rc == LAUNCH_FAILED and "rewardkit sandbox launcher" in stderr:
        raise RuntimeError(stderr.strip().splitlines()[-1])
    return RunResult(status, rc, stdout, stderr, wall)
