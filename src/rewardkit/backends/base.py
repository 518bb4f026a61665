"""The reward-model backend contract and its GPU lifecycle.

Every RM backend (discriminative model, generative judge, remote server, third-party model
plugin) subclasses :class:`RMBackend`. The lifecycle is::

    load() → wake_up() → ascore(samples) → sleep() → ... → close()

``wake_up()`` puts weights on the accelerator; ``sleep()`` offloads them to CPU memory and empties
the accelerator cache so a colocated trainer gets its memory back. Each call is idempotent, and
:attr:`RMBackend.state` says where the backend is. Subclasses implement the ``_load``,
``_wake_up``, ``_sleep``, ``_close`` hooks they need (HTTP backends need none) and :meth:`ascore`.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

if TYPE_CHECKING:
    from pydantic import BaseModel

    from rewardkit.batch import Sample
    from rewardkit.config import RewardModelConfig
    from rewardkit.result import SampleResult

State = Literal["unloaded", "awake", "asleep", "closed"]


class RMBackend(ABC):
    """A reward model. Built with ``cls(config)`` where ``config`` is ``reward.reward_model``."""

    #: Registered name; set by subclasses for clarity in logs.
    name: ClassVar[str] = ""
    #: The backend's options model (an :class:`~rewardkit.options.Options`), validated from the
    #: ``reward_model`` sub-section named by :attr:`options_key`; listed in the config reference.
    Options: ClassVar[type[BaseModel] | None] = None
    #: Where in ``reward.reward_model`` the backend's options live: ``rollout`` or ``kwargs``.
    options_key: ClassVar[str] = "rollout"

    def __init__(self, config: RewardModelConfig):
        self.config = config
        self.state: State = "unloaded"
        #: Every lifecycle transition that actually happened, in order (observable in tests and logs).
        self.transitions: list[str] = []
        self._lock = threading.RLock()

    # -- lifecycle -------------------------------------------------------------------------------
    def load(self) -> None:
        """Load the model (idempotent). It ends ``awake``, or ``asleep`` when ``config.offload`` is set."""
        with self._lock:
            if self.state == "closed":
                raise RuntimeError(f"{type(self).__name__} is closed")
            if self.state != "unloaded":
                return
            self._load()
            self.state = "awake"
            self.transitions.append("load")
            if self.config.offload:
                self.sleep()

    def wake_up(self) -> None:
        """Put the weights on the accelerator (idempotent; loads first if needed)."""
        with self._lock:
            if self.state == "unloaded":
                self.load()
            if self.state == "awake":
                return
            if self.state == "closed":
                raise RuntimeError(f"{type(self).__name__} is closed")
            self._wake_up()
            self.state = "awake"
            self.transitions.append("wake_up")

    def sleep(self) -> None:
        """Offload the weights and free accelerator memory (idempotent; a no-op unless awake)."""
        with self._lock:
            if self.state != "awake":
                return
            self._sleep()
            self.state = "asleep"
            self.transitions.append("sleep")

    def close(self) -> None:
        """Release everything (idempotent)."""
        with self._lock:
            if self.state == "closed":
                return
            if self.state != "unloaded":
                self._close()
            self.state = "closed"
            self.transitions.append("close")

    async def aclose(self) -> None:
        """Async variant of :meth:`close` for backends holding async resources (HTTP sessions)."""
        self.close()

    def _load(self) -> None:
        """Load weights / open clients. Default: nothing."""

    def _wake_up(self) -> None:
        """Move weights onto the accelerator. Default: nothing."""

    def _sleep(self) -> None:
        """Offload weights and empty the accelerator cache. Default: nothing."""

    def _close(self) -> None:
        """Free resources. Default: nothing."""

    # -- scoring ---------------------------------------------------------------------------------
    @abstractmethod
    async def ascore(self, samples: Sequence[Sample]) -> list[SampleResult]:
        """Score samples; one :class:`SampleResult` per sample, in order. Never raise for one bad sample."""

    def metrics(self) -> dict[str, float]:
        """Backend metrics accumulated since the last call (requests, retries, latencies...)."""
        return {}
