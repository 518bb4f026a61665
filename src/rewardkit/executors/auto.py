"""``executor: auto``: each batch goes where it is both safe and fast.

A batch whose scorers were all registered ``cheap`` (pure built-ins that cannot hang or crash:
``gsm8k``, ``math_dapo``, ``think_format``, ``boxed_format``) is scored in this
process by the ``inline`` executor: a worker round trip would cost more than the scoring. Anything
else (custom code, ``math`` with math-verify, ``code``, plugins' scorers), and every batch when a
deadline is asked for (``batch_timeout_s``, or a ``timeout_s`` set in the config), goes to the
``process`` pool, whose deadlines really stop a scorer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rewardkit.executors.base import Executor, ScoreTask
from rewardkit.executors.inline import CheapCheck, cheap_refs

if TYPE_CHECKING:
    from rewardkit.batch import Sample
    from rewardkit.config import RewardConfig
    from rewardkit.result import SampleResult
    from rewardkit.scoring import ScorerSpec


class AutoExecutor(Executor):
    """Inline for batches of ``cheap`` scorers without a deadline, the process pool for the rest."""

    name = "auto"

    def __init__(self, config: RewardConfig):
        super().__init__(config)
        self.deadline = config.batch_timeout_s is not None or "timeout_s" in config.model_fields_set
        self.cheap = frozenset() if self.deadline else cheap_refs(config)
        self._cheap_here = CheapCheck(self.cheap)
        self._inline: Executor | None = None
        self._process: Executor | None = None

    def runs_here(self, specs: Iterable[ScorerSpec]) -> bool:
        """True for ``cheap`` sync scorers without a deadline: where :meth:`choose` picks inline."""
        return not self.deadline and self._cheap_here(specs)

    def choose(self, specs: Iterable[ScorerSpec]) -> Executor:
        """The executor a batch of these scorers goes to (created on first use)."""
        if not self.deadline and all(s.ref in self.cheap for s in specs):
            if self._inline is None:
                from rewardkit.executors.inline import InlineExecutor

                self._inline = InlineExecutor(self.config)
            return self._inline
        if self._process is None:
            from rewardkit.executors.process import ProcessExecutor

            self._process = ProcessExecutor(self.config)
        return self._process

    async def run(self, tasks: Sequence[ScoreTask]) -> list[SampleResult]:
        """Run the tasks where :meth:`choose` sends them; one result per task, in input order."""
        if not tasks:
            return []
        return await self.choose(t.spec for t in tasks).run(tasks)

    async def run_batch(self, spec: ScorerSpec, samples: Sequence[Sample]) -> list[SampleResult]:
        """One call of a batch scorer, where :meth:`choose` sends it."""
        if not samples:
            return []
        return await self.choose([spec]).run_batch(spec, samples)

    def close(self) -> None:
        """Close the executors it started (idempotent)."""
        for ex in (self._inline, self._process):
            if ex is not None:
                ex.close()
