"""Which isolation a local sandbox run gets, and the command line that sets it up.

Modes (``sandbox.mode`` in the config):

* ``namespaces``: built in, needs only ``unshare`` (util-linux). As root: mount + PID + network + IPC
  + UTS namespaces and a throw-away uid; unprivileged: the same inside a user namespace, with a nested
  one giving the program a uid of its own. The launcher (:mod:`~rewardkit.scorers.sandbox_launcher`)
  builds a minimal read-only root (system directories and the interpreter's prefixes, bound at their
  own paths, so an interpreter under ``/root`` is reachable) with a fresh ``/proc`` and a size-capped
  tmpfs as the only writable place.
* ``bwrap``: the same layout built by bubblewrap (``apt-get install bubblewrap``).
* ``unconfined``: the old rlimits-and-directory sandbox; it may run code as root. Only with
  ``allow_unconfined: true``, and then with a warning at most every 30 s (so at least once per batch).
* ``auto`` (default): ``bwrap`` if it works here, else ``namespaces``; if neither does, code samples fail
  with reason ``sandbox_unavailable`` (or run unconfined when ``allow_unconfined`` is set).

Each mode is probed once per process by running a tiny program through it.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

from rewardkit.scorers.sandbox_launcher import LAUNCHER
from rewardkit.scorers.sandbox_limits import LAUNCH_FAILED, Limits

log = logging.getLogger(__name__)

MODES = ("auto", "bwrap", "namespaces", "unconfined")
CONFINED = ("bwrap", "namespaces")
#: The program's uid inside an unprivileged sandbox (its own user namespace).
INNER_UID = 1000
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_FIX = (
    "To get it: run rewardkit as an unprivileged user or as root with mount namespaces allowed "
    "(e.g. docker --privileged or --cap-add SYS_ADMIN), allow unprivileged user namespaces "
    "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces>0), install bubblewrap "
    "(apt-get install bubblewrap), or use SandboxFusion (reward.sandbox_fusion.url). "
    "To run untrusted code without isolation anyway, set reward.sandbox.allow_unconfined: true."
)


class SandboxUnavailable(RuntimeError):
    """The isolation the config asks for cannot be had on this machine; the message says why and how to fix it."""


@dataclass(frozen=True)
class Isolation:
    """How local sandboxed runs are isolated: ``mode`` (one of :data:`MODES`) and the unconfined opt-out."""

    mode: str = "auto"
    allow_unconfined: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"sandbox.mode must be one of {MODES}, got {self.mode!r}")

    @classmethod
    def coerce(cls, value: Isolation | dict[str, Any] | None) -> Isolation:
        """An :class:`Isolation` from itself, a config dict (other keys ignored) or ``None`` (defaults)."""
        if isinstance(value, Isolation):
            return value
        value = value or {}
        return cls(mode=value.get("mode") or "auto", allow_unconfined=bool(value.get("allow_unconfined")))


def is_root() -> bool:
    """Whether this process runs as uid 0."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def ro_paths(python: str | None = None) -> list[str]:
    """Host paths bound read-only into the sandbox: system directories and the interpreter's prefixes."""
    python = python or sys.executable
    real = os.path.realpath(python)
    wanted = [*_SYSTEM_PATHS, sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(real))]
    wanted += [os.path.dirname(python), sysconfig.get_paths().get("purelib") or ""]
    out: list[str] = []
    for path in sorted({os.path.abspath(p) for p in wanted if p and os.path.exists(p)}):
        if path != "/" and not any(
            path.startswith(p.rstrip("/") + "/") for p in out if not os.path.islink(p)
        ):
            out.append(path)
    return out


def sandbox_uid() -> int:
    """A throw-away uid for one run when rewardkit is root: nobody else's files, its own process count."""
    return random.randrange(1_000_000_000, 2_000_000_000)


def launcher_config(mode: str, limits: Any, root_dir: str, status_fd: int, program_fd: int) -> dict:
    """The launcher's JSON config for one run in ``mode`` (``namespaces`` or ``bwrap``)."""
    mb = 1024 * 1024
    root = is_root()
    uid = sandbox_uid() if root else INNER_UID
    drop = "setuid" if root else ("userns" if mode == "namespaces" else None)
    return {
        "build_root": mode == "namespaces",
        "root": root_dir,
        "ro_paths": ro_paths(),
        "disk_kb": max(64, int(limits.disk_mb) * 1024),
        "inodes": int(limits.max_files),
        "work_owner": uid if root else 0,
        "uid": uid,
        "drop": drop,
        "cpu": limits.cpu_s if limits.cpu_s is not None else int(limits.timeout_s) + 1,
        "as": limits.memory_mb * mb if limits.memory_mb else None,
        "fsize": limits.file_size_mb * mb if limits.file_size_mb else None,
        "nofile": limits.max_open_files,
        "nproc": limits.max_processes,
        "python": sys.executable,
        "env": sandbox_env(),
        "status_fd": status_fd,
        "program_fd": program_fd,
    }


def sandbox_env() -> dict[str, str]:
    """The program's whole environment: nothing from rewardkit's."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/sandbox",
        "TMPDIR": "/sandbox",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _launcher_source() -> str:
    return LAUNCHER.replace("__LAUNCH_FAILED__", str(LAUNCH_FAILED))


def _namespaces_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    if not unshare:
        raise SandboxUnavailable("namespaces: no 'unshare' command (util-linux) on PATH")
    # Never a user namespace for real root: its uid 0 would map to host root, and the program's
    # nested uid with it (owner access to root's files). Root needs mount namespaces (CAP_SYS_ADMIN).
    user = [] if is_root() else ["--user", "--map-root-user"]
    return [unshare, *user, "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child"]


def _bwrap_prefix(config: dict) -> list[str]:
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SandboxUnavailable("bwrap: bubblewrap is not installed (apt-get install bubblewrap)")
    cmd = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    cmd += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if is_root():
        # Privileged bwrap, no user namespace (its uid map would make host root the program's owner):
        # the launcher keeps what it needs to drop to the throw-away uid, which clears them.
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_CHOWN"]
    else:
        cmd += ["--unshare-user", "--disable-userns", "--uid", str(INNER_UID), "--gid", str(INNER_UID)]
    made = {"/"}
    for path in config["ro_paths"]:
        parent = os.path.dirname(path)
        chain = []
        while parent not in made:  # directories leading to a bind: traversable, not listable
            chain.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(chain):
            cmd += ["--perms", "0711", "--dir", d]
            made.add(d)
        if os.path.islink(path) and os.path.dirname(path) == "/":
            cmd += ["--symlink", os.readlink(path), path]
        else:
            cmd += ["--ro-bind", path, path]
        made.add(path)
    cmd += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
    cmd += ["--size", str(config["disk_kb"] * 1024), "--perms", "0700", "--tmpfs", "/sandbox"]
    # Where the interpreter lives under /tmp, that path stays read-only (TMPDIR is /sandbox).
    if "/tmp" not in made:
        cmd += ["--symlink", "/sandbox", "/tmp"]
    cmd += ["--remount-ro", "/", "--chdir", "/", "--"]
    return cmd


def command(mode: str, config: dict) -> list[str]:
    """The full command line that runs the launcher with ``config`` under ``mode``."""
    prefix = _namespaces_prefix() if mode == "namespaces" else _bwrap_prefix(config)
    return [*prefix, sys.executable, "-I", "-S", "-c", _launcher_source(), json.dumps(config)]


_probe_lock = threading.Lock()
_probed: dict[tuple[str, str, int], str | None] = {}


def _fresh_lock_after_fork() -> None:
    # A worker forked while another thread probed must not inherit the held lock.
    global _probe_lock
    _probe_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock_after_fork)


def probe(mode: str) -> str | None:
    """``None`` if ``mode`` runs a program here (probed once per process and interpreter), else why not."""
    key = (mode, sys.executable, os.geteuid() if hasattr(os, "geteuid") else -1)
    with _probe_lock:
        if key not in _probed:
            _probed[key] = _probe(mode)
        return _probed[key]


def _probe(mode: str) -> str | None:
    if not sys.platform.startswith("linux"):
        return f"{mode}: Linux only"
    with tempfile.TemporaryDirectory(prefix="rewardkit-probe-") as tmp:
        root = os.path.join(tmp, "root")
        os.mkdir(root)
        status_path, program_path = os.path.join(tmp, "status"), os.path.join(tmp, "main")
        with open(program_path, "w") as f:
            f.write("import os\nprint('rk-probe', os.getuid())\n")
        with open(status_path, "wb") as status, open(program_path, "rb") as program:
            config = launcher_config(mode, Limits(timeout_s=20), root, status.fileno(), program.fileno())
            try:
                cmd = command(mode, config)
                done = subprocess.run(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=30,
                    env=sandbox_env(),
                    pass_fds=(status.fileno(), program.fileno()),
                )
            except SandboxUnavailable as e:
                return str(e)
            except (OSError, subprocess.SubprocessError) as e:
                return f"{mode}: cannot start: {e}"
        if b"rk-probe" in done.stdout and done.returncode == 0:
            return None
        err = done.stderr.decode(errors="replace").strip().splitlines()
        return f"{mode}: the probe failed (exit {done.returncode}): {err[-1] if err else 'no message'}"


def resolve(isolation: Isolation) -> str:
    """The mode to run in: a confined one that works here, or ``unconfined`` if allowed; else raise
    :class:`SandboxUnavailable` with what is missing and how to get it."""
    if isolation.mode == "unconfined":
        if not isolation.allow_unconfined:
            raise SandboxUnavailable("sandbox.mode 'unconfined' also needs sandbox.allow_unconfined: true")
        warn_unconfined("sandbox.mode is 'unconfined'")
        return "unconfined"
    candidates = CONFINED if isolation.mode == "auto" else (isolation.mode,)
    problems = []
    for mode in candidates:
        why = probe(mode)
        if why is None:
            return mode
        problems.append(why)
    missing = "; ".join(problems)
    if isolation.allow_unconfined:
        warn_unconfined(missing)
        return "unconfined"
    raise SandboxUnavailable(f"no isolated sandbox here ({missing}). {_FIX}")


_WARN_EVERY_S = 30.0
_last_warning = [float("-inf")]


def warn_unconfined(why: str) -> None:
    """The loud warning that untrusted code runs unconfined: at most every 30 s, so at least once per batch."""
    now = time.monotonic()
    if now - _last_warning[0] < _WARN_EVERY_S:
        return
    _last_warning[0] = now
    msg = (
        f"rewardkit sandbox: RUNNING UNTRUSTED CODE UNCONFINED ({why}); it may run as root, read "
        "this machine's files and reach the network. Set sandbox.allow_unconfined: false to refuse."
    )
    log.warning(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)
