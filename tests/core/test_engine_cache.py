"""The module-level ``rewardkit.compute`` reuses one engine per distinct config, closed at exit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading

import pytest

import rewardkit
from rewardkit import engine_cache
from rewardkit.engine import RewardEngine

GSM = [{"data_source": "openai/gsm8k", "response": "#### 42", "ground_truth": "42"}]


@pytest.fixture(autouse=True)
def _fresh():
    engine_cache.close_shared_engines()
    yield
    engine_cache.close_shared_engines()


@pytest.fixture
def built(monkeypatch):
    """Counts the engines constructed."""
    made = []
    real = RewardEngine.__init__

    def init(self, *a, **k):
        made.append(self)
        real(self, *a, **k)

    monkeypatch.setattr(RewardEngine, "__init__", init)
    return made


def test_repeated_compute_builds_one_engine(built):
    for _ in range(5):
        assert rewardkit.compute(GSM, {"executor": "inline"}).scores == [1.0]
    assert len(built) == 1
    assert engine_cache.shared_engines() == built


def test_equal_configs_share_an_engine_different_ones_do_not(built, tmp_path):
    path = tmp_path / "rk.yaml"
    path.write_text("reward:\n  executor: inline\n", encoding="utf-8")
    a = engine_cache.shared_engine({"executor": "inline"})
    assert engine_cache.shared_engine({"executor": "inline"}) is a  # an equal dict, another object
    assert engine_cache.shared_engine(str(path)) is a  # the same content from a YAML file
    assert engine_cache.shared_engine(rewardkit.RewardConfig(executor="inline")) is a
    b = engine_cache.shared_engine({"executor": "inline", "failure_score": -1.0})
    assert b is not a
    assert engine_cache.shared_engine(None) is not a and engine_cache.shared_engine(None) is not b
    assert len(built) == 3


def test_concurrent_first_calls_build_one_engine(built):
    barrier = threading.Barrier(8)
    got = []

    def call():
        barrier.wait()
        got.append(engine_cache.shared_engine({"executor": "inline", "dedup": False}))

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(got) == 8 and len({id(e) for e in got}) == 1 and len(built) == 1


def test_a_closed_engine_is_replaced():
    a = engine_cache.shared_engine({"executor": "inline"})
    a.close()
    b = engine_cache.shared_engine({"executor": "inline"})
    assert b is not a and b.compute(GSM).scores == [1.0]
    engine_cache.close_shared_engines()
    assert b._closed and engine_cache.shared_engines() == []


def test_acompute_uses_the_shared_engine_from_a_running_loop(built):
    async def main():
        first = await rewardkit.acompute(GSM, {"executor": "inline"})
        second = await rewardkit.acompute(GSM, {"executor": "inline"})
        return first.scores + second.scores

    assert asyncio.run(main()) == [1.0, 1.0]
    assert rewardkit.compute(GSM, {"executor": "inline"}).scores == [1.0]
    assert len(built) == 1


def test_engines_are_closed_at_exit():
    """A process that used the default config (process pool) closes its engine and workers on exit."""
    code = textwrap.dedent(
        """
        import rewardkit
        from rewardkit.engine import RewardEngine

        real_close = RewardEngine.close

        def close(self):
            real_close(self)
            print("closed", self._closed, flush=True)

        RewardEngine.close = close
        print(rewardkit.compute(
            [{"data_source": "openai/gsm8k", "response": "#### 1", "ground_truth": "1"}] * 4,
            {"executor": "process", "num_workers": 1},
        ).scores, flush=True)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[1.0, 1.0, 1.0, 1.0]", "closed True"], out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr


def test_a_plugin_reset_gives_a_fresh_engine():
    from rewardkit import plugins

    a = engine_cache.shared_engine({"executor": "inline"})
    plugins.reset()
    b = engine_cache.shared_engine({"executor": "inline"})
    assert b is not a and b.registries is plugins.get_registries()
    assert not a._closed  # whoever still holds it can finish; it closes with the others
    engine_cache.close_shared_engines()
    assert a._closed and b._closed


def test_a_config_with_objects_in_it_is_still_cached(built):
    marker = object()
    cfg = {"executor": "inline", "custom_reward_function": {"reward_kwargs": {"obj": marker}}}
    assert engine_cache.shared_engine(cfg) is engine_cache.shared_engine(dict(cfg))
    assert len(built) == 1
