"""Stopping Ray actors: ask each to close, then kill it (Ray is imported only when called)."""

from __future__ import annotations

from typing import Any

__all__ = ["close_and_kill"]


def close_and_kill(handles: list[Any], graceful_timeout_s: float) -> None:
    """Ask each actor to ``close()`` (best effort, bounded wait), then kill it without restart."""
    import ray

    try:
        ray.get([h.close.remote() for h in handles], timeout=graceful_timeout_s)
    except Exception:  # noqa: BLE001 - a dead actor cannot close
        pass
    for h in handles:
        try:
            ray.kill(h, no_restart=True)
        except Exception:  # noqa: BLE001
            pass
