"""verl's per-sample paths on cheap scorers: no thread, no executor, no prompt decode, same results."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rewardkit.integrations import verl as rk_verl

pytest.importorskip("torch")
pytest.importorskip("verl.protocol", reason="needs verl's DataProto")

from .test_verl import MIXED, make_dataproto  # noqa: E402

GSM8K = [
    ("q1", "#### 4", "4", "openai/gsm8k"),
    ("q2 数学", "so 2+2 is #### 4 🙂", "4", "openai/gsm8k"),
    ("q3", "The answer is 5", "4", "openai/gsm8k"),
    ("q4", "", "4", "openai/gsm8k"),  # empty response
    *MIXED,
]


@pytest.fixture(autouse=True)
def _fresh_engines(monkeypatch):
    monkeypatch.delenv(rk_verl.ENV_CONFIG, raising=False)
    yield
    rk_verl.close_engines()


def test_run_single_scores_cheap_samples_without_threads_executor_or_prompt_decode(tokenizer, monkeypatch):
    from rewardkit.inputs import _PromptIds

    manager = rk_verl.RewardKitRewardManager(tokenizer, rewardkit_config={"executor": "auto"})
    data = make_dataproto(tokenizer, GSM8K)
    legacy = manager(data, return_dict=True)  # the batch path: the reference

    started, decoded = [], []
    real_start, real_text = threading.Thread.start, _PromptIds.text
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self.name) or real_start(self))
    monkeypatch.setattr(_PromptIds, "text", lambda self, i: decoded.append(i) or real_text(self, i))
    executor = manager.engine.executor
    monkeypatch.setattr(executor, "run", lambda *a, **k: pytest.fail("executor called"))

    async def run_all():
        return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))

    outs = asyncio.run(run_all())
    assert started == [] and decoded == []
    scores = [o["reward_score"] for o in outs]
    tensor = legacy["reward_tensor"]
    assert scores == [float(row.sum()) for row in tensor]
    for key, values in legacy["reward_extra_info"].items():
        assert [o["reward_extra_info"][key] for o in outs] == values, key
    assert [o["reward_extra_info"]["status"] for o in outs][:4] == ["ok", "ok", "ok", "ok"]


def test_run_single_of_a_custom_scorer_still_goes_through_the_engine(tokenizer, write_module):
    path = write_module("mine.py", "def compute_score(solution_str):\n    return float(len(solution_str))\n")
    cfg = {"executor": "inline", "custom_reward_function": {"path": str(path)}}
    manager = rk_verl.RewardKitRewardManager(tokenizer, rewardkit_config=cfg)
    data = make_dataproto(tokenizer, GSM8K[:2])
    out = asyncio.run(manager.run_single(data[:1]))
    assert out["reward_score"] == float(len("#### 4")) and out["reward_extra_info"]["status"] == "ok"
    assert manager.engine._loop is not None  # scored on the engine's loop, not here
