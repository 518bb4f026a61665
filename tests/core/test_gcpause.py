"""Large batches are scored with the garbage collector paused, and it always comes back on."""

from __future__ import annotations

import gc
import threading

import pytest

from rewardkit import gcpause
from rewardkit.engine import RewardEngine
from rewardkit.errors import SampleError

SCORER = "import gc\n\ndef compute_score(solution_str):\n    return {'score': 1.0, 'gc_on': gc.isenabled()}\n"


@pytest.fixture
def engine(tmp_path):
    path = tmp_path / "gc_scorer.py"
    path.write_text(SCORER, encoding="utf-8")
    with RewardEngine({"executor": "inline", "custom_reward_function": {"path": str(path)}}) as e:
        yield e


def test_large_batches_run_without_the_collector_small_ones_with_it(engine):
    assert gc.isenabled()
    big = engine.compute([{"response": f"r{i}"} for i in range(gcpause.MIN_BATCH)])
    assert set(big.extra["gc_on"]) == {False} and big.num_failed == 0
    assert gc.isenabled()
    small = engine.compute([{"response": "x"}] * 8)
    assert small.extra["gc_on"] == [True] * 8


def test_a_failing_batch_turns_the_collector_back_on(engine):
    with pytest.raises(SampleError, match="response"):
        engine.compute([{"no_response": 1}] * gcpause.MIN_BATCH)
    assert gc.isenabled()


def test_a_caller_that_disabled_the_collector_keeps_it_disabled():
    gc.disable()
    try:
        with gcpause.paused_gc(gcpause.MIN_BATCH):
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_pauses_from_threads_reenable_once_all_are_done():
    inside, release = threading.Barrier(3), threading.Event()

    def hold():
        with gcpause.paused_gc(gcpause.MIN_BATCH):
            inside.wait()
            release.wait(10)

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    assert not gc.isenabled()
    with gcpause.paused_gc(gcpause.MIN_BATCH):
        pass
    assert not gc.isenabled()  # the two other pauses still hold
    release.set()
    for t in threads:
        t.join(10)
    assert gc.isenabled()


def test_batch_size_of_the_accepted_inputs():
    assert gcpause.batch_size([1, 2, 3]) == 3
    assert gcpause.batch_size({"completions": ["a", "b"], "prompts": ["p", "q"]}) == 2
    assert gcpause.batch_size(iter([1, 2])) == 0  # a generator is not consumed to count it
