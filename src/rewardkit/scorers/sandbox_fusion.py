"""A client for a remote `SandboxFusion <https://github.com/bytedance/SandboxFusion>`_ server's ``/run_code`` API.

Configured by ``reward.sandbox_fusion`` (``url``, ``max_concurrency``, ``memory_limit_mb``), which
rewardkit passes to scorers that take a ``sandbox_fusion`` argument. At most ``max_concurrency``
requests per server are in flight per process. A server-side failure (HTTP error, ``SandboxError``)
raises, so the sample fails instead of silently scoring 0.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from rewardkit.runtime.limits import Limiter
from rewardkit.scorers.sandbox import RunResult

_limiters: dict[tuple[str, int], Limiter] = {}
_limiters_lock = threading.Lock()


def _forget_limiters_after_fork() -> None:
    global _limiters_lock
    _limiters.clear()
    _limiters_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_limiters_after_fork)

#: HTTP statuses worth retrying (the server is busy or restarting).
RETRY_STATUSES = (429, 500, 502, 503, 504)


def run_code_url(url: str) -> str:
    """The ``/run_code`` endpoint for a server URL (which may already end in ``/run_code``)."""
    url = url.rstrip("/")
    return url if url.endswith("/run_code") else url + "/run_code"


def limiter_for(url: str, max_concurrent: int) -> Limiter:
    """The process-wide limiter for one server."""
    key = (run_code_url(url), int(max_concurrent))
    with _limiters_lock:
        lim = _limiters.get(key)
        if lim is None:
            lim = _limiters[key] = Limiter(max_concurrent)
        return lim


def to_run_result(payload: dict[str, Any], wall_s: float) -> RunResult:
    """Turn a ``/run_code`` response into a :class:`RunResult`; raise on a sandbox-side error."""
    status = payload.get("status")
    run = payload.get("run_result") or payload.get("compile_result")
    if status == "SandboxError" or not isinstance(run, dict):
        raise RuntimeError(f"SandboxFusion error: {payload.get('message') or status or 'no run_result'}")
    rc = run.get("return_code")
    run_status = run.get("status")
    if run_status == "TimeLimitExceeded":
        kind = "timeout"
    elif run_status == "Finished" and rc == 0:
        kind = "ok"
    else:
        kind = "error"
    return RunResult(
        kind,
        rc,
        run.get("stdout") or "",
        run.get("stderr") or "",
        float(run.get("execution_time") or wall_s),
    )


async def run_python_remote(
    program: str,
    stdin: str,
    *,
    url: str,
    timeout_s: float,
    memory_limit_mb: int = 1024,
    max_concurrent: int = 64,
    retries: int = 2,
    session: Any = None,
) -> RunResult:
    """Run ``program`` on a SandboxFusion server (``POST {url}/run_code``) and return its :class:`RunResult`."""
    import aiohttp

    body = {
        "code": program,
        "language": "python",
        "stdin": stdin or "",
        "run_timeout": timeout_s,
        "compile_timeout": timeout_s,
        "memory_limit_MB": memory_limit_mb,
    }
    endpoint = run_code_url(url)
    own_session = session is None
    if own_session:
        session = aiohttp.ClientSession()
    try:
        async with limiter_for(url, max_concurrent).hold():
            last_error = ""
            for attempt in range(retries + 1):
                if attempt:
                    await asyncio.sleep(0.2 * 2**attempt)
                loop = asyncio.get_running_loop()
                start = loop.time()
                try:
                    # The server enforces run_timeout; our own deadline only guards against a stuck server.
                    timeout = aiohttp.ClientTimeout(total=timeout_s + 30)
                    async with session.post(endpoint, json=body, timeout=timeout) as resp:
                        if resp.status in RETRY_STATUSES:
                            last_error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                            continue
                        if resp.status != 200:
                            raise RuntimeError(
                                f"SandboxFusion HTTP {resp.status}: {(await resp.text())[:200]}"
                            )
                        payload = await resp.json(content_type=None)
                except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                    last_error = f"{type(e).__name__}: {e}"
                    continue
                return to_run_result(payload, loop.time() - start)
            raise RuntimeError(
                f"SandboxFusion at {endpoint} failed after {retries + 1} attempts: {last_error}"
            )
    finally:
        if own_session:
            await session.close()
