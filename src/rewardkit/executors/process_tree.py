"""Finding and killing every process a worker's scorers started, however they detached.

A scorer may start children in the worker's process group, in a new session (``setsid``), or
double-fork a daemon whose parent exits at once. A kill of the worker's process group reaches only
the first kind. So each worker makes itself a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``):
whatever its descendants orphan is re-parented to the worker instead of to init, and stays in the
worker's process tree, where :func:`kill_tree` finds it by walking parent ids in ``/proc``. Each
worker also puts a token in the environment its children inherit (:data:`TOKEN_ENV`), which finds
exec'd descendants that left the tree before it was walked (their worker crashed). No root, no
cgroups.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable

#: Environment variable naming the worker (``<executor id>:<worker number>``) in what it starts.
TOKEN_ENV = "REWARDKIT_WORKER_TOKEN"
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphaned descendants of this process re-parent to it (Linux); False where unsupported."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001 - not Linux
        return False


def _scan() -> dict[int, int]:
    """Parent id of every process in ``/proc``."""
    parents: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return parents
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1 and fields[0] != b"Z":
            parents[int(name)] = int(fields[1])
    return parents


def _carries(pid: int, tokens: tuple[bytes, ...]) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = b"\0" + f.read()
    except OSError:
        return False
    return any(t in env for t in tokens)


def _token_bytes(token: str, prefix: bool) -> bytes:
    return f"\0{TOKEN_ENV}={token}".encode() + (b"" if prefix else b"\0")


def find(roots: Iterable[int], tokens: Iterable[str] = (), prefixes: Iterable[str] = ()) -> set[int]:
    """Live descendants of ``roots`` (not the roots), and processes whose environment carries one of
    ``tokens`` (exactly) or a token starting with one of ``prefixes``."""
    roots = set(roots)
    marks = tuple(_token_bytes(t, False) for t in tokens) + tuple(_token_bytes(p, True) for p in prefixes)
    parents = _scan()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [c for r in roots for c in children.get(r, ())]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    if marks:
        me = os.getpid()
        found.update(p for p in parents if p not in found and p != me and _carries(p, marks))
    return found - roots - {os.getpid()}


def kill_tree(roots: Iterable[int], tokens: Iterable[str] = (), prefixes: Iterable[str] = ()) -> set[int]:
    """SIGKILL what :func:`find` finds, freezing each one first (``SIGSTOP``) so that none can start
    more while the tree is walked; return the pids killed. The roots themselves are left alone."""
    roots, tokens, prefixes = list(roots), list(tokens), list(prefixes)
    killed: set[int] = set()
    for _ in range(5):
        new = find(roots, tokens, prefixes) - killed
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        killed |= new
    for pid in killed:
        _signal(pid, signal.SIGKILL)
    return killed


def zombie_children(pid: int) -> list[int]:
    """Children of ``pid`` that have exited and wait to be reaped."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 1 and fields[0] == b"Z" and int(fields[1]) == pid:
            found.append(int(name))
    return found


def reap_zombies(limit: int) -> int:
    """Reap this process's exited children once more than ``limit`` of them wait; how many were reaped.

    A subreaper inherits every daemon its scorers orphan, and nobody else waits for those: without
    this, a scorer that daemonizes once a sample would fill the process table over a long run. The
    threshold keeps it away from children a scorer still means to wait for itself (a ``Popen``
    whose status this took would read as exit code 0).
    """
    zombies = zombie_children(os.getpid())
    if len(zombies) <= limit:
        return 0
    reaped = 0
    for pid in zombies:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                reaped += 1
        except ChildProcessError:
            pass
    return reaped


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass
