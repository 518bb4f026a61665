"""The verl reward manager on a minimal DataProto-like object: runs where verl is not installed."""

from __future__ import annotations

import asyncio

import pytest
from tiny_models import padded_rollout

import rewardkit
from rewardkit.integrations.verl import RewardKitRewardManager, close_engines

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")


class MiniDataProto:
    """Just what a verl reward manager reads: ``batch`` tensors, ``non_tensor_batch`` arrays, slicing."""

    def __init__(self, batch: dict, non_tensor_batch: dict):
        self.batch, self.non_tensor_batch = batch, non_tensor_batch

    def __len__(self) -> int:
        return len(self.batch["responses"])

    def __getitem__(self, item: slice) -> MiniDataProto:
        return MiniDataProto(
            {k: v[item] for k, v in self.batch.items()},
            {k: v[item] for k, v in self.non_tensor_batch.items()},
        )


def build(tokenizer, rows, prompt_len=12, response_len=10) -> MiniDataProto:
    prompts, responses, masks = padded_rollout(
        tokenizer, [(r[0], r[1]) for r in rows], prompt_len, response_len
    )
    return MiniDataProto(
        {
            "prompts": torch.tensor(prompts),
            "responses": torch.tensor(responses),
            "attention_mask": torch.tensor(masks),
        },
        {
            "data_source": np.array(["toy"] * len(rows), dtype=object),
            "reward_model": np.array([{"ground_truth": r[2]} for r in rows], dtype=object),
        },
    )


ROWS = [("q one", "7", "7"), ("q two", "8", "7"), ("q three", "FAIL", "7"), ("q four", "", "")]


def test_manager_on_minimal_dataproto(rk_config, tokenizer):
    data = build(tokenizer, ROWS)
    manager = RewardKitRewardManager(tokenizer, num_examine=1, rewardkit_config=rk_config)
    try:
        records, mask = manager.records(data)
        assert [r["response"] for r in records] == ["7", "8", "FAIL", ""]
        assert [r["prompt"] for r in records] == ["q one", "q two", "q three", "q four"]
        assert [r["response_length"] for r in records] == mask.sum(-1).tolist()
        out = manager(data, return_dict=True)
        own = rewardkit.compute(records, rk_config)
        assert torch.equal(out["reward_tensor"], own.token_level_rewards(mask))
        assert out["reward_extra_info"]["status"] == ["ok", "ok", "failed", "ok"]
        assert torch.count_nonzero(out["reward_tensor"][3]) == 0  # empty response: nothing written
        assert out["reward_extra_info"]["empty_response"] == [False, False, False, True]  # ...and reported

        single = asyncio.run(manager.run_single(data[0:1]))
        assert single["reward_score"] == 1.0 and single["reward_extra_info"]["status"] == "ok"
        assembled = RewardKitRewardManager.assemble_rm_scores(data, [1.0, 0.0, 0.0, 0.0])
        assert assembled[0].sum().item() == 1.0 and torch.count_nonzero(assembled[3]) == 0
    finally:
        close_engines()


def test_mismatched_mask_is_an_error(rk_config, tokenizer):
    data = build(tokenizer, ROWS[:1])
    data.batch["attention_mask"] = data.batch["attention_mask"][:, :-1]
    manager = RewardKitRewardManager(tokenizer, 0, rewardkit_config=rk_config)
    try:
        with pytest.raises(ValueError, match="attention_mask"):
            manager(data)
    finally:
        close_engines()
