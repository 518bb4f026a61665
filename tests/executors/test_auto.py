"""``executor: auto``: inline for batches of cheap built-ins, the process pool for everything else."""

from __future__ import annotations

import pytest

import rewardkit
from rewardkit.executors.auto import AutoExecutor
from rewardkit.executors.inline import InlineExecutor
from rewardkit.executors.process import ProcessExecutor
from rewardkit.plugins import get_registries

pytestmark = pytest.mark.timeout(60)

GSM8K = {"data_source": "openai/gsm8k", "response": "so #### 42", "ground_truth": "42"}
MATH = {"data_source": "lighteval/MATH", "response": "\\boxed{\\frac{1}{2}}", "ground_truth": "0.5"}


def test_built_ins_declare_whether_they_are_cheap():
    scorers = get_registries().scorers
    cheap = {e.name for e in scorers if e.meta.get("cheap")}
    assert {"gsm8k", "math_dapo", "think_format", "boxed_format"} <= cheap
    # can run away, run programs, backtrack, or run any of those as a base scorer
    assert not cheap & {"math", "code", "regex_format", "cosine_length"}


def test_cheap_built_ins_are_scored_in_this_process():
    with rewardkit.RewardEngine({"executor": "auto"}) as engine:
        assert isinstance(engine.executor, AutoExecutor)
        result = engine.compute([GSM8K, {**GSM8K, "response": "#### 7"}])
        assert result.scores == [1.0, 0.0]
        assert engine.executor._process is None  # no worker pool was started for them
        # scored in the calling thread (the engine's fast path): not even the inline executor ran
        assert engine.executor._inline is None
        gsm8k = engine.manager.context.scorer("gsm8k")
        assert isinstance(engine.executor.choose([gsm8k]), InlineExecutor)  # where run() sends them


def test_math_verify_custom_code_and_deadlines_go_to_the_process_pool(scorer_file):
    with rewardkit.RewardEngine({}) as engine:  # auto is the default
        assert engine.compute([MATH]).scores == [1.0]
        assert isinstance(engine.executor._process, ProcessExecutor) and engine.executor._process.pids
    custom = {"custom_reward_function": {"path": str(scorer_file), "name": "where"}}
    with rewardkit.RewardEngine(custom) as engine:
        result = engine.compute([{"response": "x"}])
        assert result.status == ["ok"] and engine.executor._process is not None
    for deadline in ({"batch_timeout_s": 60}, {"timeout_s": 5}):
        with rewardkit.RewardEngine(deadline) as engine:
            assert engine.compute([GSM8K]).scores == [1.0]
            assert engine.executor._inline is None and engine.executor._process is not None


async def test_empty_batches_start_nothing(make_config):
    ex = AutoExecutor(make_config())
    assert await ex.run([]) == [] and ex._inline is None and ex._process is None
    ex.close()
