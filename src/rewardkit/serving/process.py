"""One server replica as a local process: free port, its own process group, health wait, log tail.

The process is started in a new session (``start_new_session``) under a small supervisor
(:mod:`rewardkit.serving.reaper`) so that :meth:`ProcessReplica.stop` can signal the whole group,
engine workers included, and the group goes down by itself if this process dies. Its stdout and stderr go to a log file whose
tail is quoted in start-up errors.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rewardkit.errors import RewardKitError

if TYPE_CHECKING:
    from rewardkit.config import ServerConfig
    from rewardkit.serving.launcher import Call, ServerLauncher


#: The supervisor every server runs under (see :mod:`rewardkit.serving.reaper`).
REAPER = Path(__file__).with_name("reaper.py")


class ServerStartError(RewardKitError, RuntimeError):
    """A server replica did not become healthy (it exited, or its start-up deadline passed)."""


class ServerCallError(RewardKitError, RuntimeError):
    """A sleep / wake request to a replica failed."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def http_call(
    base_url: str, method: str, path: str, *, params=None, body: Any = None, timeout: float = 30.0
) -> tuple[int, str]:
    """One blocking HTTP request; ``(status, text)``. Connection errors raise :class:`OSError`."""
    url = base_url + path + ("?" + urllib.parse.urlencode(params) if params else "")
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback URL we built
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


class ProcessReplica:
    """Replica ``index`` of a served model, run as a child process of this one.

    ``start()`` picks a free port (or reuses the last one on restart), launches the launcher's
    command line and waits for ``GET health`` to answer 200 within ``startup_timeout_s``.
    """

    def __init__(
        self,
        launcher: ServerLauncher,
        config: ServerConfig,
        model_path: str,
        index: int = 0,
        env: dict[str, str] | None = None,
        log_dir: str | None = None,
    ):
        self.launcher = launcher
        self.config = config
        self.model_path = model_path
        self.index = index
        self.extra_env = dict(env or {})
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.restarts = 0  # successful restarts
        self.restart_attempts = 0
        self.asleep = False
        self._log_dir = Path(log_dir or tempfile.mkdtemp(prefix="rewardkit-server-"))
        self.log_path = self._log_dir / f"replica{index}.log"

    @property
    def url(self) -> str:
        """The replica's base URL (``http://127.0.0.1:PORT``)."""
        host = "127.0.0.1" if self.config.host in ("0.0.0.0", "") else self.config.host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's process group id (its supervisor's pid; the server is its child)."""
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        """Whether the process is running."""
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines the server wrote."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- start / stop ----------------------------------------------------------------------------
    def start(self) -> None:
        """Launch the process and wait until it is healthy; :class:`ServerStartError` otherwise."""
        if self.port is None:
            self.port = free_port(self.config.host if self.config.host != "0.0.0.0" else "127.0.0.1")
        argv = self.launcher.command(self.config.host, self.port, self.model_path)
        env = {**os.environ, **self.launcher.environment(), **self.config.env, **self.extra_env}
        self._log_dir.mkdir(parents=True, exist_ok=True)
        # the reaper (session leader) runs the server and kills the group if this process dies
        wrapped = [sys.executable, str(REAPER), str(os.getpid()), "--", *argv]
        with open(self.log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(
                    wrapped, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=env, start_new_session=True,
                )  # fmt: skip
            except OSError as e:
                raise ServerStartError(f"server replica {self.index}: cannot run {argv[0]!r}: {e}") from None
        self.asleep = False
        self._wait_healthy(argv)

    def _wait_healthy(self, argv: list[str]) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        delay = 0.05
        while True:
            code = self.proc.poll() if self.proc is not None else -1
            if code is not None:
                raise ServerStartError(
                    f"server replica {self.index} exited with code {code} before it was healthy\n"
                    f"command: {' '.join(argv)}\nlog tail ({self.log_path}):\n{self.log_tail()}"
                )
            if self.healthy(timeout=min(2.0, self.config.startup_timeout_s)):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(
                    f"server replica {self.index} was not healthy within startup_timeout_s="
                    f"{self.config.startup_timeout_s:g}s (GET {self.url}{self.launcher.health})\n"
                    f"command: {' '.join(argv)}\nlog tail ({self.log_path}):\n{self.log_tail()}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def healthy(self, timeout: float = 2.0) -> bool:
        """Whether ``GET health`` answers 200 now."""
        if self.port is None:
            return False
        try:
            status, _ = http_call(self.url, "GET", self.launcher.health, timeout=timeout)
        except OSError:
            return False
        return status == 200

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left after ``timeout`` (idempotent)."""
        proc = self.proc
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # the leader may be gone while group members live on
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def restart(self) -> None:
        """Stop what is left of the process and start it again on the same port."""
        self.stop(timeout=2.0)
        self.restart_attempts += 1
        self.start()
        self.restarts += 1

    # -- protocol --------------------------------------------------------------------------------
    def call(self, call: Call | None) -> float:
        """Send one protocol request; the seconds it took. A non-2xx answer raises :class:`ServerCallError`."""
        if call is None:
            return 0.0
        start = time.perf_counter()
        try:
            status, text = http_call(
                self.url, call.method, call.path, params=call.params or None, body=call.json,
                timeout=self.config.request_timeout_s,
            )  # fmt: skip
        except OSError as e:
            raise ServerCallError(
                f"replica {self.index} ({self.url}): {call.method} {call.path} failed: {e}"
            ) from e
        if not 200 <= status < 300:
            raise ServerCallError(
                f"replica {self.index} ({self.url}): {call.method} {call.path} answered {status}: {text[:300]}"
            )
        return time.perf_counter() - start

    def sleep(self) -> float:
        """Free the replica's accelerator memory; seconds taken."""
        elapsed = self.call(self.launcher.sleep_call(self.config.sleep_level))
        self.asleep = True
        return elapsed

    def wake_up(self) -> float:
        """Take the memory back; seconds taken."""
        elapsed = self.call(self.launcher.wake_call())
        self.asleep = False
        return elapsed
