"""Whether this process is a ``process`` executor worker (set once by the worker's entry point)."""

from __future__ import annotations

_in_worker = False


def in_worker() -> bool:
    """Whether this process is a ``process`` executor worker, where blocking the event loop is safe
    (the parent's deadline kills a blocked worker) and moving work to a thread would escape it."""
    return _in_worker


def mark_worker() -> None:
    """Mark this process as a ``process`` executor worker (called by the worker's entry point)."""
    global _in_worker
    _in_worker = True
