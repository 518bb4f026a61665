"""Ray plumbing shared by the manager and the executor: connecting, and carrying exceptions across
the process boundary with their type intact (the private event loop is :class:`~rewardkit.runtime.loop.LoopThread`).

Nothing here imports ray at module import time.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

from rewardkit.runtime.actors import close_and_kill
from rewardkit.runtime.loop import LoopThread

__all__ = [
    "NAMESPACE",
    "LoopThread",
    "PackedError",
    "RemoteTraceback",
    "close_and_kill",
    "crash_errors",
    "ensure_ray",
    "pack_error",
]

#: Namespace of the named actors rewardkit creates (limiters).
NAMESPACE = "rewardkit"


def ensure_ray(address: str | None = None) -> None:
    """Connect to Ray: reuse an initialised Ray, else join ``address`` (``"auto"``, ``"ray://..."``)
    or ``$RAY_ADDRESS``, else start a local Ray on this machine."""
    import ray

    if ray.is_initialized():
        return
    import os

    kwargs: dict[str, Any] = {"ignore_reinit_error": True}
    if address:
        kwargs["address"] = address
    elif not os.environ.get("RAY_ADDRESS"):  # Ray itself joins $RAY_ADDRESS when it is set
        kwargs["include_dashboard"] = False
    ray.init(**kwargs)


def crash_errors() -> tuple[type[BaseException], ...]:
    """Ray exceptions that mean "the process running this died", not "the code raised"."""
    from ray import exceptions as rx

    return (
        rx.RayActorError,
        rx.WorkerCrashedError,
        rx.NodeDiedError,
        rx.ObjectLostError,
        rx.OutOfMemoryError,
        rx.RaySystemError,
        rx.ActorUnschedulableError,
    )


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a Ray worker (set as ``__cause__`` when re-raised here)."""


@dataclass
class PackedError:
    """An exception raised in a worker, carried as data so that its type survives pickling."""

    cls_ref: str
    message: str
    state: dict[str, Any] = field(default_factory=dict)
    traceback: str = ""

    def unpack(self, index_offset: int = 0) -> BaseException:
        """Rebuild the exception (same class, message and attributes); sample indices shifted by ``index_offset``."""
        from rewardkit.errors import SampleError
        from rewardkit.scoring import resolve_ref

        try:
            cls = resolve_ref(self.cls_ref)
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                raise TypeError(self.cls_ref)
        except Exception:
            exc: BaseException = RuntimeError(f"{self.cls_ref}: {self.message}")
        else:
            message = self.message
            state = dict(self.state)
            if issubclass(cls, SampleError) and isinstance(state.get("index"), int) and index_offset:
                old = state["index"]
                state["index"] = old + index_offset
                if message.startswith(f"sample {old}"):
                    message = f"sample {old + index_offset}" + message[len(f"sample {old}") :]
            exc = cls.__new__(cls)
            exc.args = (message,)
            try:
                exc.__dict__.update(state)
            except AttributeError:  # pragma: no cover - exceptions with __slots__
                pass
            if "message" in state:
                exc.message = message  # type: ignore[attr-defined]
        if self.traceback:
            exc.__cause__ = RemoteTraceback(self.traceback)
        return exc


def pack_error(exc: BaseException) -> PackedError:
    """Capture ``exc`` as a :class:`PackedError` (its picklable attributes only)."""
    import pickle

    state = {}
    for k, v in getattr(exc, "__dict__", {}).items():
        try:
            pickle.dumps(v)
        except Exception:
            continue
        state[k] = v
    cls = type(exc)
    return PackedError(
        f"{cls.__module__}:{cls.__qualname__}",
        str(exc),
        state,
        "".join(traceback.format_exception(cls, exc, exc.__traceback__)),
    )
