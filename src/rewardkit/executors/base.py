"""The executor contract: where scorer calls run, with deadlines and isolation."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from rewardkit.scoring import invoke_batch

if TYPE_CHECKING:
    from rewardkit.batch import Sample
    from rewardkit.config import RewardConfig
    from rewardkit.result import SampleResult
    from rewardkit.scoring import ScorerSpec


@dataclass
class ScoreTask:
    """One scorer call on one sample. Picklable: the scorer travels by reference."""

    spec: ScorerSpec
    sample: Sample


class Executor(ABC):
    """Runs :class:`ScoreTask` lists and returns one result per task, in order.

    Built with ``cls(config)``; kept alive by the engine between batches; :meth:`close` frees
    workers. Implementations must turn every failure of a task (exception, deadline, crashed
    worker) into a ``failed`` result for that task alone.
    """

    name: ClassVar[str] = ""

    def __init__(self, config: RewardConfig):
        self.config = config

    @abstractmethod
    async def run(self, tasks: Sequence[ScoreTask]) -> list[SampleResult]:
        """Run the tasks; one result per task, in input order."""

    async def run_batch(self, spec: ScorerSpec, samples: Sequence[Sample]) -> list[SampleResult]:
        """One call of a batch scorer on many samples. Default: in a thread of this process."""
        import asyncio

        return await asyncio.to_thread(invoke_batch, spec, samples)

    def runs_here(self, specs: Iterable[ScorerSpec]) -> bool:
        """Whether calls of these scorers may run synchronously in the calling thread, with results
        identical to :meth:`run` (the engine's fast path). Default: no."""
        return False

    def close(self) -> None:
        """Free workers (idempotent)."""
