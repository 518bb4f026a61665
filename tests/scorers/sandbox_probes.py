"""Test helpers for the sandbox: find a sandboxed program by its command line, and check that a
program outlives nothing of the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import time


def processes_with(marker: str) -> list[str]:
    """The pids whose command line holds ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(pid)
            except OSError:
                pass
    return found


def assert_dies_with_its_starter(argv: list[str], marker: str, env: dict[str, str] | None = None) -> None:
    """Start ``argv`` (which starts a sandboxed program holding ``marker``), SIGKILL it once the program
    runs, and assert that nothing holding ``marker`` is left (stragglers are killed, then reported)."""
    proc = subprocess.Popen(argv, env=env)
    try:
        deadline = time.monotonic() + 30
        while not processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(marker), "the sandboxed program never started"
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = processes_with(marker)
    for pid in left:
        os.kill(int(pid), signal.SIGKILL)
    assert left == []
