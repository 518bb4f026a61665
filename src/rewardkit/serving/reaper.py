"""``python reaper.py PARENT_PID -- COMMAND...``: run a server and take it down when its owner dies.

Server replicas run in their own session (so that stopping one stops its engine workers too), which
also means nothing kills them when the process that started them is SIGKILLed or OOM-killed: they
would keep their GPUs. This small supervisor, the session leader, runs the server as its child,
forwards SIGTERM / SIGINT to it, exits with its exit code, and kills the whole process group as soon
as it is re-parented (its owner died). Standard library only: it runs as a plain script.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    """Run ``argv[2:]`` (after ``PARENT_PID --``) and watch the parent; the child's exit code."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: reaper.py PARENT_PID -- COMMAND...", file=sys.stderr)
        return 2
    parent = int(argv[0])
    try:
        child = subprocess.Popen(argv[2:])
    except OSError as e:
        print(f"reaper: cannot run {argv[2]!r}: {e}", file=sys.stderr, flush=True)
        return 127

    def forward(sig: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(sig)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        code = child.poll()
        if code is not None:
            return code if code >= 0 else 128 - code
        if os.getppid() != parent:  # the owner is gone: take the group down
            print("reaper: owner process died; stopping the server", file=sys.stderr, flush=True)
            os.killpg(0, signal.SIGTERM)
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            os.killpg(0, signal.SIGKILL)
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
