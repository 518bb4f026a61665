"""Helpers for served-model tests (also imported by tests/ray): configs that launch the vLLM stand-in."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

STANDIN = str(Path(__file__).resolve().parent / "standin_server.py")


def standin_server(engine: str = "vllm", replicas: int = 1, flags: str = "", **extra) -> dict:
    """A ``reward_model.server`` section launching the stand-in as ``engine`` with a ``command`` override."""
    cmd = f"{sys.executable} {STANDIN} --host {{host}} --port {{port}} --model {{model_path}} --max-lifetime 240 {flags}"
    return {
        "engine": engine,
        "model_path": "standin-rm",
        "replicas": replicas,
        "command": cmd.strip(),
        "startup_timeout_s": 60,
        "health_interval_s": 0.2,
        **extra,
    }


def stats(url: str) -> dict:
    """What one stand-in replica saw (``GET /stats``)."""
    with urllib.request.urlopen(url + "/stats", timeout=10) as r:
        return json.loads(r.read())


def gone(pid: int) -> bool:
    """Whether neither the process nor its process group exists any more (zombies reaped by us count as gone)."""
    for probe in (lambda: os.kill(pid, 0), lambda: os.killpg(pid, 0)):
        try:
            probe()
            return False
        except ProcessLookupError:
            continue
        except PermissionError:
            return False
    return True


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1) -> bool:
    """Poll ``predicate`` until true or ``timeout``; its last value."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
