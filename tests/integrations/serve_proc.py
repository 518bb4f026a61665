"""Run ``rewardkit serve`` in a subprocess on 127.0.0.1 and talk to it with the standard library."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


class ServeProc:
    """A ``rewardkit serve`` subprocess: ``base`` URL, ``pid``, ``stop()``; always killed by ``close()``."""

    def __init__(self, config: Path, *args: str, start_timeout: float = 60):
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("REWARDKIT_SERVE_TOKEN", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rewardkit.cli", "serve", "--config", str(config), "--port", "0", *args],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.pid = self.proc.pid
        deadline = time.monotonic() + start_timeout
        port = None
        self.log: list[str] = []
        while port is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            self.log.append(line)
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if found:
                port = int(found.group(1))
        if port is None:
            self.close()
            raise AssertionError(f"server did not start: {''.join(self.log)}")
        self.port = port
        self.base = f"http://127.0.0.1:{port}"

    def post(self, path: str, payload, timeout: float = 60, headers=None) -> tuple[int, dict]:
        """POST JSON (or raw bytes); ``(status, decoded JSON body)``."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        req = urllib.request.Request(
            self.base + path,
            data=data,
            headers={"Content-Type": "application/json", **(headers or {})},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def get(self, path: str, timeout: float = 10) -> tuple[int, dict]:
        """GET; ``(status, decoded JSON body)``."""
        try:
            with urllib.request.urlopen(self.base + path, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def rss_kib(self) -> int:
        """The server's resident memory (VmRSS from /proc), KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stderr_rest(self, timeout: float = 30) -> str:
        """What the server wrote to stderr after start-up (waits for it to exit)."""
        _, err = self.proc.communicate(timeout=timeout)
        return err

    def close(self) -> None:
        """Kill the server if it is still running."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def trickle(
    socks: list[socket.socket], byte_every_s: float, give_up_s: float, got: list[bytes] | None = None
) -> list[float | None]:
    """Send each socket a byte every ``byte_every_s``; when each was closed (s), None if never.

    ``got`` (optional, one entry per socket) collects what the server sent on each."""
    start = time.monotonic()
    closed: list[float | None] = [None] * len(socks)
    for s in socks:
        s.setblocking(False)
    while None in closed and time.monotonic() - start < give_up_s:
        for i, s in enumerate(socks):
            if closed[i] is not None:
                continue
            try:
                while chunk := s.recv(4096):  # drain what the server sent; b"" is its close
                    if got is not None:
                        got[i] += chunk
                closed[i] = time.monotonic() - start
                continue
            except BlockingIOError:
                pass
            except OSError:
                closed[i] = time.monotonic() - start
                continue
            try:
                s.send(b"X")
            except OSError:
                closed[i] = time.monotonic() - start
        time.sleep(byte_every_s)
    return closed
